//! A downstream HTTP service for the consumer's `http` handler, on loopback.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A tiny HTTP server on loopback that records each request body and answers with scripted statuses
/// (then 200): stands in for the third-party endpoints a test cannot reach (an alert webhook, a downstream
/// service behind the `http` handler).
#[derive(Debug, Clone)]
pub struct FakeEndpoint {
    pub addr: SocketAddr,
    state: Arc<Mutex<FakeEndpointState>>,
}

#[derive(Debug, Default)]
struct FakeEndpointState {
    bodies: Vec<(HeaderMap, Bytes)>,
    statuses: VecDeque<u16>,
}

impl FakeEndpoint {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(FakeEndpointState::default()));
        let handler_state = state.clone();
        let handler = move |request: Request<hyper::body::Incoming>| {
            let state = handler_state.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let status = {
                    let mut state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    state.bodies.push((parts.headers, body));
                    state.statuses.pop_front().unwrap_or(200)
                };
                let mut response = hookline_common::http::text(StatusCode::OK, "ok");
                *response.status_mut() = StatusCode::from_u16(status).expect("status");
                response
            }
        };
        tokio::spawn(hookline_common::http::serve(
            listener,
            handler,
            hookline_common::http::ServeLimits::default(),
            CancellationToken::new(),
        ));
        Self { addr, state }
    }

    /// The next requests are answered with these statuses, in order; then 200.
    pub fn respond_with(&self, statuses: impl IntoIterator<Item = u16>) {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).statuses.extend(statuses);
    }

    pub fn requests(&self) -> Vec<(HeaderMap, Bytes)> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).bodies.clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}
