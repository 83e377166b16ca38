//! The OTLP exporter's HTTP client: our hyper client ([`crate::http_client`], http and https), run on the
//! service's tokio runtime. The SDK's batch processor exports from its own thread; each export is spawned onto the
//! runtime and its answer awaited there, so no blocking client exists anywhere and no request or record waits for
//! the collector.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

use crate::http_client::HttpsClient;

/// The most of a collector's answer read (it is an OTLP status, a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

pub(super) struct RuntimeClient {
    runtime: tokio::runtime::Handle,
    client: Option<HttpsClient>,
    timeout: Duration,
}

impl std::fmt::Debug for RuntimeClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RuntimeClient").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl RuntimeClient {
    pub(super) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        // Building the client needs no runtime; a failure (none expected without a CA file) is reported per export.
        Self { runtime, client: crate::http_client::client(None).ok(), timeout }
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone().ok_or("traces: no HTTP client")?;
        let timeout = self.timeout;
        let exchange = async move {
            let (parts, body) = request.into_parts();
            let response = client.request(Request::from_parts(parts, Full::new(body))).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let answer = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, exchange).await.unwrap_or_else(|_| Err("traces: export timed out".into()))
        });
        answer.await.map_err(|_| HttpError::from("traces: the export task ended (runtime shutting down)"))?
    }
}
