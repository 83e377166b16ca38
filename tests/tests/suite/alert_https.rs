//! The alert webhook over https: Slack's incoming webhooks are https only, so an https URL must work, and a
//! URL that cannot work must be a config error rather than silently no alerts.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use hookline_consumer::{
    ConsumerConfig, Loaded,
    alert::{AlertTarget, Alerts, DeadLettered},
    config::AlertConfig,
};
use hookline_tests::eventually;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// A TLS endpoint on loopback with a fresh self-signed certificate; records each request body.
struct TlsEndpoint {
    port: u16,
    ca_pem: String,
    bodies: Arc<Mutex<Vec<Bytes>>>,
}

impl TlsEndpoint {
    async fn start() -> Self {
        let (acceptor, ca_pem) = hookline_tests::loopback_tls::self_signed_acceptor();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let recorded = bodies.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else { return };
                    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                        let recorded = recorded.clone();
                        async move {
                            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            recorded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(body);
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Self { port, ca_pem, bodies }
    }

    fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

#[tokio::test]
async fn alert_webhook_posts_over_https_to_an_endpoint_the_configured_ca_vouches_for() {
    let endpoint = TlsEndpoint::start().await;
    let dir = std::env::temp_dir().join(format!("hookline-alert-https-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("ca.pem"), &endpoint.ca_pem).expect("write CA");
    let config = AlertConfig {
        url: Some(format!("https://127.0.0.1:{}/alert", endpoint.port)),
        interval_s: 1,
        max_event_ids: 5,
        ca_file: Some("ca.pem".into()),
    };
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let target = AlertTarget::build(&config, &dir).expect("a valid alert config");
    assert!(target.is_some(), "a URL makes a target");
    let alerts = Alerts::start(target, shutdown.clone(), &tasks);
    alerts.dead_lettered(DeadLettered {
        source: "stripe".to_owned(),
        error_class: "poison",
        event_id: Some("evt_https".to_owned()),
    });

    eventually(Duration::from_secs(15), "alert posted over https", || async { !endpoint.bodies().is_empty() }).await;
    let body: serde_json::Value = serde_json::from_slice(&endpoint.bodies()[0]).expect("JSON");
    let text = body["text"].as_str().expect("Slack-compatible text");
    assert!(text.contains("stripe: 1 poison") && text.contains("evt_https"), "{text}");
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_alert_client_does_not_trust_a_certificate_no_ca_vouches_for() {
    let endpoint = TlsEndpoint::start().await;
    let client = hookline_common::http_client::client(None).expect("client");
    let request = Request::post(format!("https://127.0.0.1:{}/alert", endpoint.port))
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("request");
    let answer = client.request(request).await;
    assert!(answer.is_err(), "a self-signed certificate was trusted without its CA: {answer:?}");
    assert!(endpoint.bodies().is_empty());
}

#[test]
fn an_alert_url_that_cannot_work_is_a_config_error() {
    for (url, expected) in [
        ("hooks.slack.com/services/T/B/x", "alert.url"),
        ("ftp://example.com/x", "alert.url"),
        ("https://", "alert.url"),
    ] {
        let mut config = ConsumerConfig::default();
        config.alert.url = Some(url.to_owned());
        let error = Loaded::build(config).expect_err(url).to_string();
        assert!(error.contains(expected), "{url}: {error}");
    }
    let mut config = ConsumerConfig::default();
    config.kafka.record_auth = hookline_tests::record_auth::test_record_auth();
    config.alert.url = Some("https://hooks.slack.com/services/T/B/x".to_owned());
    let built = Loaded::build(config);
    assert!(built.is_ok(), "an https URL is accepted: {:?}", built.err());
}
