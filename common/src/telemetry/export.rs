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
    /// A client trusting the Mozilla roots and, if given, the CA of `tls.ca_file`, presenting `tls`'s client
    /// certificate when the collector asks for one. Building it needs no runtime.
    pub(super) fn new(
        runtime: tokio::runtime::Handle,
        tls: &CollectorTls,
        timeout: Duration,
    ) -> Result<Self, crate::http_client::ClientError> {
        let identity = match (&tls.client_certificate, &tls.client_key) {
            (Some(certificate), Some(key)) => {
                let pem = std::fs::read(key).map_err(|source| crate::http_client::ClientError::CertificateFile {
                    path: key.clone(),
                    source: rustls::pki_types::pem::Error::Io(source),
                })?;
                Some(crate::http_client::ClientIdentity::from_pem(certificate, "OTEL_EXPORTER_OTLP_CLIENT_KEY", &pem)?)
            }
            _ => None,
        };
        let options = crate::http_client::ClientOptions {
            extra_roots: tls.ca_file.as_deref(),
            identity,
            ..crate::http_client::ClientOptions::default()
        };
        Ok(Self { runtime, client: Some(crate::http_client::client_with(options)?), timeout })
    }
}

/// The collector's TLS as the standard variables give it: `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` or
/// `OTEL_EXPORTER_OTLP_CERTIFICATE` (a PEM CA file trusted besides the built-in roots, for a collector behind a
/// private CA, so that its API key header and the span texts need not travel over `http://`), and the
/// `..._CLIENT_CERTIFICATE` / `..._CLIENT_KEY` pair (PEM files) for mutual TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectorTls {
    pub ca_file: Option<std::path::PathBuf>,
    pub client_certificate: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
}

impl CollectorTls {
    /// Reads the variables through `var` (the traces-specific one first, then the general one).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let path = |what: &str| {
            var(&format!("OTEL_EXPORTER_OTLP_TRACES_{what}"))
                .or_else(|| var(&format!("OTEL_EXPORTER_OTLP_{what}")))
                .filter(|value| !value.trim().is_empty())
                .map(std::path::PathBuf::from)
        };
        Self {
            ca_file: path("CERTIFICATE"),
            client_certificate: path("CLIENT_CERTIFICATE"),
            client_key: path("CLIENT_KEY"),
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_collector_ca_comes_from_the_standard_variables() {
        let vars = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_CERTIFICATE" => Some("/etc/ca.pem".to_owned()),
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE" => Some("/etc/client.pem".to_owned()),
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE" => Some("/etc/ignored.pem".to_owned()),
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY" => Some("/etc/client.key".to_owned()),
            _ => None,
        };
        assert_eq!(
            super::CollectorTls::from_vars(vars),
            super::CollectorTls {
                ca_file: Some("/etc/ca.pem".into()),
                client_certificate: Some("/etc/client.pem".into()),
                client_key: Some("/etc/client.key".into()),
            }
        );
        let missing = super::CollectorTls { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let built = super::RuntimeClient::new(runtime.handle().clone(), &missing, std::time::Duration::from_secs(1));
        assert!(built.is_err(), "a CA file that cannot be read stops the service, not each export");
    }

    use http_body_util::BodyExt as _;
    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};

    use super::*;

    /// The real export path, against a collector stand-in on loopback: the SDK's batch thread hands the export to
    /// the runtime through [`RuntimeClient`], the request is OTLP http/protobuf on `/v1/traces`, and the flush at
    /// shutdown delivers the span.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_span_reaches_the_collector_as_otlp_protobuf_on_v1_traces() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (received, mut exports) = tokio::sync::mpsc::unbounded_channel();
        let handler = move |request: http::Request<hyper::body::Incoming>| {
            let received = received.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.map(|body| body.to_bytes()).unwrap_or_default();
                let content_type = parts.headers.get(http::header::CONTENT_TYPE).cloned();
                let _ = received.send((parts.uri.path().to_owned(), content_type, body));
                crate::http::text(http::StatusCode::OK, "")
            }
        };
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(crate::http::serve(listener, handler, crate::http::ServeLimits::default(), stop.clone()));

        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("http://{addr}/v1/traces"))
            .with_http_client(
                RuntimeClient::new(
                    tokio::runtime::Handle::current(),
                    &CollectorTls::default(),
                    Duration::from_secs(10),
                )
                .expect("a client"),
            )
            .build()
            .expect("exporter");
        let provider =
            SdkTracerProvider::builder().with_span_processor(BatchSpanProcessor::builder(exporter).build()).build();
        let mut span = provider.tracer("test").start("send webhooks.inbound");
        span.end();
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await.expect("joined");
        assert!(flushed.is_ok(), "{flushed:?}");

        let (path, content_type, body) =
            tokio::time::timeout(Duration::from_secs(30), exports.recv()).await.expect("an export").expect("one");
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type.as_ref().and_then(|value| value.to_str().ok()), Some("application/x-protobuf"));
        assert!(
            body.windows(b"send webhooks.inbound".len()).any(|window| window == b"send webhooks.inbound"),
            "the span's name is in the protobuf body"
        );
        stop.cancel();
    }
}
