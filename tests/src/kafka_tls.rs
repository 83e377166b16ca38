//! The local stack's TLS listeners for Kafka (`scripts/stack`: SASL_SSL with SCRAM-SHA-512/256, PLAIN and
//! OAUTHBEARER, and mutual TLS) as the `[kafka.tls]` / `[kafka.sasl]` settings of a [`KafkaConfig`], the wrong
//! settings the refusal tests need, and the OAuth client-credentials token endpoint the OAUTHBEARER test serves.
//!
//! `scripts/stack env` exports where everything is (`KAFKA_SASL_SSL_BROKERS`, `KAFKA_MTLS_BROKERS`,
//! `KAFKA_TLS_DIR`, `KAFKA_SCRAM_PASSWORD_FILE`, ...); the defaults are the stack's default ports and `.stack/`.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use bytes::Bytes;
use hookline_common::config::{KafkaConfig, KafkaSaslConfig, KafkaTlsConfig, SaslMechanism, SecretRef};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The brokers and TLS/SASL settings every service and client of a [`crate::TestStack`] uses.
#[derive(Debug, Clone)]
pub struct KafkaSecurity {
    pub brokers: String,
    pub tls: Option<KafkaTlsConfig>,
    pub sasl: Option<KafkaSaslConfig>,
}

impl KafkaSecurity {
    /// Sets the brokers, `[kafka.tls]` and `[kafka.sasl]` of `kafka`.
    pub fn apply_to(&self, kafka: &mut KafkaConfig) {
        kafka.brokers = self.brokers.clone();
        kafka.tls = self.tls.clone();
        kafka.sasl = self.sasl.clone();
    }

    /// SASL_SSL with `mechanism`, the stack's CA and its test user's password.
    pub fn sasl_ssl(mechanism: SaslMechanism) -> Self {
        let password_file = match mechanism {
            SaslMechanism::Plain => {
                env_or("KAFKA_PLAIN_PASSWORD_FILE", || stack_path("kafka/credentials/plain-password"))
            }
            _ => env_or("KAFKA_SCRAM_PASSWORD_FILE", || stack_path("kafka/credentials/scram-password")),
        };
        Self {
            brokers: env_or("KAFKA_SASL_SSL_BROKERS", || "127.0.0.1:19094".to_owned()),
            tls: Some(KafkaTlsConfig { ca_file: Some(tls_file("ca.pem")), ..KafkaTlsConfig::default() }),
            sasl: Some(KafkaSaslConfig {
                mechanism,
                username: Some(env_or("KAFKA_SASL_USERNAME", || "hookline".to_owned())),
                password: Some(SecretRef::from_file("kafka-password", password_file)),
                token_endpoint_url: None,
                client_id: None,
                client_secret: None,
                scope: None,
            }),
        }
    }

    /// SSL with the stack's client certificate (CN=hookline), on the listener that requires one.
    pub fn mutual_tls() -> Self {
        Self::mutual_tls_with("client.pem", "client.key")
    }

    /// The mutual-TLS listener with the stack's expired client certificate.
    pub fn expired_client_certificate() -> Self {
        Self::mutual_tls_with("client-expired.pem", "client-expired.key")
    }

    fn mutual_tls_with(certificate: &str, key: &str) -> Self {
        Self {
            brokers: env_or("KAFKA_MTLS_BROKERS", || "127.0.0.1:19095".to_owned()),
            tls: Some(KafkaTlsConfig {
                ca_file: Some(tls_file("ca.pem")),
                client_cert_file: Some(tls_file(certificate)),
                client_key: Some(SecretRef::from_file("kafka-client-key", tls_file(key))),
            }),
            sasl: None,
        }
    }

    /// SCRAM-SHA-512 with a password the broker does not know (written to `dir`).
    pub fn wrong_password(dir: &std::path::Path) -> Self {
        let path = dir.join("wrong-kafka-password");
        std::fs::write(&path, "not-the-password").expect("write the wrong password");
        let mut security = Self::sasl_ssl(SaslMechanism::ScramSha512);
        if let Some(sasl) = &mut security.sasl {
            sasl.password = Some(SecretRef::from_file("kafka-password", path.display().to_string()));
        }
        security
    }

    /// SCRAM-SHA-512 trusting a CA that did not sign the broker's certificate.
    pub fn untrusted_ca() -> Self {
        let mut security = Self::sasl_ssl(SaslMechanism::ScramSha512);
        security.tls = Some(KafkaTlsConfig { ca_file: Some(tls_file("other-ca.pem")), ..KafkaTlsConfig::default() });
        security
    }

    /// OAUTHBEARER through `endpoint` (client credentials), with the stack's CA.
    pub fn oauthbearer(endpoint: &TokenEndpoint, client_secret_file: &std::path::Path) -> Self {
        let mut security = Self::sasl_ssl(SaslMechanism::OauthBearer);
        security.sasl = Some(KafkaSaslConfig {
            mechanism: SaslMechanism::OauthBearer,
            username: None,
            password: None,
            token_endpoint_url: Some(format!("http://{}/oauth2/token", endpoint.addr)),
            client_id: Some(TokenEndpoint::CLIENT_ID.to_owned()),
            client_secret: Some(SecretRef::from_file("oidc-client-secret", client_secret_file.display().to_string())),
            scope: Some("kafka".to_owned()),
        });
        security
    }
}

fn env_or(var: &str, default: impl FnOnce() -> String) -> String {
    std::env::var(var).unwrap_or_else(|_| default())
}

/// A path under the default stack folder (`<repo>/.stack`).
fn stack_path(relative: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(".stack").join(relative).display().to_string()
}

/// A file of `scripts/stack certs`.
pub fn tls_file(name: &str) -> String {
    let dir = std::env::var("KAFKA_TLS_DIR").unwrap_or_else(|_| stack_path("tls"));
    PathBuf::from(dir).join(name).display().to_string()
}

/// An OAuth 2 token endpoint on loopback for the client-credentials grant: checks the client's id and secret
/// (HTTP Basic, as librdkafka sends them) and answers with an unsecured JWT (`alg: none`) for subject `hookline`,
/// which the stack's broker accepts with Kafka's default OAUTHBEARER validator.
#[derive(Debug)]
pub struct TokenEndpoint {
    pub addr: SocketAddr,
    issued: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl TokenEndpoint {
    pub const CLIENT_ID: &str = "hookline-test-client";

    /// Serves until dropped; `client_secret` is the secret it expects.
    pub async fn start(client_secret: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind token endpoint");
        let addr = listener.local_addr().expect("addr");
        let (issued, refused, stop) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{client_secret}", Self::CLIENT_ID))
        );
        let (issued_in, refused_in, stop_in) = (Arc::clone(&issued), Arc::clone(&refused), stop.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    _ = stop_in.cancelled() => return,
                    accepted = listener.accept() => match accepted { Ok((stream, _)) => stream, Err(_) => continue },
                };
                let (expected, issued, refused) = (expected.clone(), issued_in.clone(), refused_in.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let authorized = request
                            .headers()
                            .get(header::AUTHORIZATION)
                            .is_some_and(|value| value.as_bytes() == expected.as_bytes());
                        let response = if authorized {
                            issued.fetch_add(1, Ordering::SeqCst);
                            token_response()
                        } else {
                            refused.fetch_add(1, Ordering::SeqCst);
                            Response::builder()
                                .status(StatusCode::UNAUTHORIZED)
                                .body(Full::new(Bytes::from_static(b"{\"error\":\"invalid_client\"}")))
                                .expect("response")
                        };
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, issued, refused, stop }
    }

    /// Tokens handed out so far.
    pub fn issued(&self) -> usize {
        self.issued.load(Ordering::SeqCst)
    }

    /// Requests refused for a wrong client id or secret.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn token_response() -> Response<Full<Bytes>> {
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
    let claims = URL_SAFE_NO_PAD.encode(
        serde_json::json!({ "sub": "hookline", "iat": now_s, "exp": now_s + 3600, "scope": "kafka" }).to_string(),
    );
    let body = serde_json::json!({
        "access_token": format!("{header}.{claims}."),
        "token_type": "Bearer",
        "expires_in": 3600,
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}
