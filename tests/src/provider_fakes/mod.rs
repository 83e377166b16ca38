//! Local fakes of the provider APIs the reconciler reads, on loopback, following the providers' documented
//! request and response shapes (pagination included): GitHub's hook deliveries and hooks, Paddle Billing's
//! notifications and notification destinations. A redelivery or replay the fake accepts is sent to the gateway signed, as the provider would.
//! Stripe is the real `stripe-mock`, behind [`TlsFront`] for real TLS.
//!
//! Each fake records every API request (method, path and query, Authorization header, time) so tests can
//! assert on what the reconciler asked, and can be told to refuse the credential or to rate-limit.

mod github;
mod paddle;
mod stripe;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use github::{FakeGithub, GITHUB_HOOK, GithubDelivery, GithubHook};
pub use paddle::{FakePaddle, PADDLE_SETTING, PaddleNotification, PaddleSetting, paddle_body};
pub use stripe::{StripeMock, TlsFront};

type Body = hookline_common::http::Body;

/// One request a fake received.
#[derive(Debug, Clone)]
pub struct ApiCall {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub authorization: Option<String>,
    pub at: Instant,
}

/// What every fake can be told to do besides answering: refuse, rate-limit, and who to deliver to.
#[derive(Debug, Default)]
struct Control {
    calls: Vec<ApiCall>,
    /// The next this many requests get 429 with `Retry-After: retry_after_s`.
    rate_limited: usize,
    retry_after_s: u64,
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// RFC 3339 with milliseconds, UTC, as GitHub and Paddle write times.
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| pair.split_once('=').filter(|(key, _)| *key == name).map(|(_, value)| value))
}

/// Starts `handler` on a fresh loopback port, answering 401 without the token and 429 while rate-limited.
async fn serve_fake<F>(
    token: &str,
    control: Arc<Mutex<Control>>,
    unauthorized: serde_json::Value,
    handler: F,
) -> SocketAddr
where
    F: Fn(&str, &str) -> Response<Body> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let expected = format!("Bearer {token}");
    let handler = Arc::new(handler);
    let service = move |request: Request<hyper::body::Incoming>| {
        let control = control.clone();
        let handler = handler.clone();
        let expected = expected.clone();
        let unauthorized = unauthorized.clone();
        async move {
            let method = request.method().as_str().to_owned();
            let target = request.uri().path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_default();
            let authorization =
                request.headers().get("authorization").and_then(|value| value.to_str().ok()).map(str::to_owned);
            let rate_limited = {
                let mut control = control.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                control.calls.push(ApiCall {
                    method: method.clone(),
                    target: target.clone(),
                    authorization: authorization.clone(),
                    at: Instant::now(),
                });
                if control.rate_limited > 0 {
                    control.rate_limited -= 1;
                    Some(control.retry_after_s)
                } else {
                    None
                }
            };
            if authorization.as_deref() != Some(expected.as_str()) {
                return json(StatusCode::UNAUTHORIZED, &unauthorized);
            }
            if let Some(retry_after_s) = rate_limited {
                let mut response = json(StatusCode::TOO_MANY_REQUESTS, &serde_json::json!({"message": "slow down"}));
                response.headers_mut().insert("retry-after", HeaderValue::from(retry_after_s));
                return response;
            }
            let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
            handler(&format!("{method} {path}"), query)
        }
    };
    tokio::spawn(hookline_common::http::serve(
        listener,
        service,
        hookline_common::http::ServeLimits::default(),
        CancellationToken::new(),
    ));
    addr
}

/// Sends a webhook to the gateway the way the provider would; returns the status it got (502 if unreachable).
async fn send_webhook(url: &str, headers: Vec<(String, String)>, body: Bytes) -> u16 {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::post(url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let Ok(request) = request.body(Full::new(body)) else { return 400 };
    match client.request(request).await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 502,
    }
}

impl Control {
    fn calls(control: &Mutex<Control>) -> Vec<ApiCall> {
        control.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).calls.clone()
    }
}
