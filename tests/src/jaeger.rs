//! Jaeger v2 (an OpenTelemetry collector with trace storage and a query API, built by `tests/tools/jaeger/install`)
//! on loopback ports of its own, killed on drop: what the traces tests export to over OTLP, and read back from
//! through Jaeger's HTTP query API, as an operator's tools would.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

#[derive(Debug)]
pub struct Jaeger {
    /// The OTLP/HTTP receiver, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it (`http://127.0.0.1:<port>`).
    pub otlp_endpoint: String,
    /// The query API (`/api/traces/<trace id>`, `/api/services`).
    pub query: SocketAddr,
    child: Child,
    config_file: PathBuf,
}

/// One span as Jaeger's query API returns it, with what the tests look at.
#[derive(Debug, Clone)]
pub struct StoredSpan {
    pub trace_id: String,
    pub span_id: String,
    pub operation: String,
    pub service: String,
    /// `(reference type, trace id, span id)`: `CHILD_OF` for the parent, `FOLLOWS_FROM` for a link.
    pub references: Vec<(String, String, String)>,
    pub tags: serde_json::Map<String, serde_json::Value>,
}

impl StoredSpan {
    pub fn tag(&self, key: &str) -> Option<&serde_json::Value> {
        self.tags.get(key)
    }

    pub fn tag_str(&self, key: &str) -> Option<String> {
        self.tag(key).map(|value| value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string()))
    }

    /// The span id of the parent within the same trace, if any.
    pub fn parent(&self) -> Option<&str> {
        self.references
            .iter()
            .find(|(kind, trace, _)| kind == "CHILD_OF" && *trace == self.trace_id)
            .map(|r| r.2.as_str())
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

impl Jaeger {
    pub fn binary() -> PathBuf {
        std::env::var("JAEGER")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.stack/bin/jaeger"))
    }

    pub async fn start() -> Self {
        let binary = Self::binary();
        assert!(
            binary.is_file(),
            "jaeger not found at {} (build it with tests/tools/jaeger/install; scripts/test does)",
            binary.display()
        );
        let (otlp_port, query_port, query_grpc_port) = (free_port(), free_port(), free_port());
        // Memory storage, the OTLP/HTTP receiver and the query API, every listener on loopback; no metrics
        // listener (the default binds 0.0.0.0:8888) and no self-tracing.
        let config = format!(
            r"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"
        );
        let config_file = std::env::temp_dir().join(format!("hookline-jaeger-{}.yaml", uuid::Uuid::new_v4()));
        std::fs::write(&config_file, config).expect("write the jaeger config");
        let child = Command::new(&binary)
            .arg("--config")
            .arg(&config_file)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start jaeger");
        let jaeger = Self {
            otlp_endpoint: format!("http://127.0.0.1:{otlp_port}"),
            query: ([127, 0, 0, 1], query_port).into(),
            child,
            config_file,
        };
        let started = Instant::now();
        for addr in [jaeger.query, ([127, 0, 0, 1], otlp_port).into()] {
            while tokio::net::TcpStream::connect(addr).await.is_err() {
                assert!(started.elapsed() < Duration::from_secs(60), "jaeger did not listen on {addr}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        jaeger
    }

    async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
        let uri: http::Uri = format!("http://{}{path}", self.query).parse().expect("uri");
        let response = client.get(uri).await.expect("jaeger query");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    /// The query API's answer for `trace_id`, as it came (JSON; `Null` for no answer).
    pub async fn trace_json(&self, trace_id: &str) -> serde_json::Value {
        let (status, body) = self.get(&format!("/api/traces/{trace_id}")).await;
        if status == 200 { body } else { serde_json::Value::Null }
    }

    /// The spans Jaeger holds for `trace_id` (32 hex digits), empty when it has none (yet).
    pub async fn trace(&self, trace_id: &str) -> Vec<StoredSpan> {
        let body = self.trace_json(trace_id).await;
        let mut spans = Vec::new();
        for trace in body["data"].as_array().into_iter().flatten() {
            let processes = &trace["processes"];
            for span in trace["spans"].as_array().into_iter().flatten() {
                let service = processes[span["processID"].as_str().unwrap_or_default()]["serviceName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let references = span["references"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        let field = |name: &str| r[name].as_str().unwrap_or_default().to_owned();
                        (field("refType"), field("traceID"), field("spanID"))
                    })
                    .collect();
                let tags = span["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|tag| Some((tag["key"].as_str()?.to_owned(), tag["value"].clone())))
                    .collect();
                spans.push(StoredSpan {
                    trace_id: span["traceID"].as_str().unwrap_or_default().to_owned(),
                    span_id: span["spanID"].as_str().unwrap_or_default().to_owned(),
                    operation: span["operationName"].as_str().unwrap_or_default().to_owned(),
                    service,
                    references,
                    tags,
                });
            }
        }
        spans
    }

    /// Waits until the trace holds spans for which `complete` holds, and returns them; panics after `within`.
    pub async fn wait_for_trace(
        &self,
        trace_id: &str,
        within: Duration,
        complete: impl Fn(&[StoredSpan]) -> bool,
    ) -> Vec<StoredSpan> {
        let started = Instant::now();
        loop {
            let spans = self.trace(trace_id).await;
            if complete(&spans) {
                return spans;
            }
            assert!(
                started.elapsed() < within,
                "trace {trace_id} incomplete after {within:?}: {:?}",
                spans.iter().map(|s| (&s.service, &s.operation)).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The services Jaeger has received spans from.
    pub async fn services(&self) -> Vec<String> {
        let (_, body) = self.get("/api/services").await;
        body["data"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config_file);
    }
}
