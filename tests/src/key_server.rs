//! A provider's key host of the test's own, for the fetched-key schemes (SNS, PayPal, Google Pub/Sub, Plaid): https on loopback with a
//! CA of its own (rcgen), serving the pinned host names, which the gateway is told to resolve to it through
//! `KeyFetchTestOnly` (a setting no config file can reach). It serves signing certificates (good, expired,
//! issued by a CA the gateway does not trust), one that never answers and one of 10 MB, answers SNS's
//! `ConfirmSubscription`, answers Plaid's `POST /webhook_verification_key/get` (only with the right credentials),
//! plays PayPal's OAuth token and webhook-event API (only with the right client credentials and token), and
//! records every request path it was asked for.
//!
//! Signing keys are RSA, made and used by the `openssl` command line (`genpkey`, `dgst -sign`): PKCS#1 v1.5 as the
//! providers document it, by an implementation independent of the gateway's verifier (ring through webpki); and
//! Plaid's P-256 keys, made and used by `openssl` too (its DER signature turned into JWS's `r || s`).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine;
use bytes::Bytes;
use hookline_gateway::key_fetch::{KeyFetchConfig, KeyFetchTestOnly};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::net::TcpListener;

/// The pinned names the key server answers for.
pub const SNS_HOST: &str = "sns.us-east-1.amazonaws.com";
pub const PAYPAL_HOST: &str = "api.sandbox.paypal.com";
pub const GOOGLE_HOST: &str = "www.googleapis.com";
pub const PLAID_HOST: &str = "production.plaid.com";
/// PayPal's REST API for sandbox credentials: its OAuth token and its webhook events.
pub const PAYPAL_API_HOST: &str = "api-m.sandbox.paypal.com";
const HOSTS: [&str; 5] = [SNS_HOST, PAYPAL_HOST, GOOGLE_HOST, PLAID_HOST, PAYPAL_API_HOST];
/// The access token the PayPal API fake hands out.
const PAYPAL_ACCESS_TOKEN: &str = "A21AAtest-access-token";

/// `openssl genpkey -algorithm <algorithm...> -out path`: a new private key in a PEM file.
fn openssl_genpkey(path: &Path, algorithm: &[&str]) {
    let status = Command::new("openssl")
        .arg("genpkey")
        .arg("-algorithm")
        .args(algorithm)
        .arg("-out")
        .arg(path)
        .stderr(Stdio::null())
        .status()
        .expect("run openssl genpkey (is the openssl command installed?)");
    assert!(status.success(), "openssl genpkey failed");
}

/// `openssl dgst -<digest> -sign key`: the signature of `message` as openssl writes it (PKCS#1 v1.5 for RSA, DER
/// for ECDSA).
fn openssl_sign(digest: &str, key: &Path, message: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(["dgst", &format!("-{digest}"), "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl dgst");
    child.stdin.take().expect("stdin").write_all(message).expect("write the message");
    let output = child.wait_with_output().expect("openssl dgst");
    assert!(output.status.success(), "openssl dgst failed");
    output.stdout
}

/// An RSA private key in a PEM file (PKCS#8), made by `openssl genpkey`.
#[derive(Debug)]
pub struct RsaKey {
    path: PathBuf,
    pem: String,
}

impl RsaKey {
    pub fn generate(directory: &Path, name: &str) -> Self {
        let path = directory.join(format!("{name}.key.pem"));
        openssl_genpkey(&path, &["RSA", "-pkeyopt", "rsa_keygen_bits:2048"]);
        let pem = std::fs::read_to_string(&path).expect("read the key");
        Self { path, pem }
    }

    /// RSA PKCS#1 v1.5 signature of `message` with `digest` (`sha1`, `sha256`), by `openssl dgst -sign`.
    pub fn sign(&self, digest: &str, message: &[u8]) -> Vec<u8> {
        openssl_sign(digest, &self.path, message)
    }

    /// The public key as a JSON Web Key (RS256) with key id `kid`.
    pub fn jwk(&self, kid: &str) -> serde_json::Value {
        let output = Command::new("openssl")
            .args(["rsa", "-noout", "-modulus", "-in"])
            .arg(&self.path)
            .stderr(Stdio::null())
            .output()
            .expect("run openssl rsa");
        let text = String::from_utf8(output.stdout).expect("ascii");
        let modulus = hex::decode(text.trim().trim_start_matches("Modulus=")).expect("hex modulus");
        let base64url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        serde_json::json!({
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": base64url(&modulus), "e": base64url(&[1, 0, 1]),
        })
    }

    fn key_pair(&self) -> KeyPair {
        KeyPair::from_pem(&self.pem).expect("an RSA PKCS#8 key rcgen can use")
    }
}

/// A P-256 private key in a PEM file, made by `openssl genpkey` (Plaid signs its webhooks' JWTs with ES256).
#[derive(Debug)]
pub struct EcKey {
    path: PathBuf,
}

impl EcKey {
    pub fn generate(directory: &Path, name: &str) -> Self {
        let path = directory.join(format!("{name}.ec.pem"));
        openssl_genpkey(&path, &["EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
        Self { path }
    }

    /// The ES256 signature of `message` as JWS writes it (`r || s`, 64 bytes), by `openssl dgst -sha256 -sign`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        let der = openssl_sign("sha256", &self.path, message);
        p256::ecdsa::Signature::from_der(&der).expect("a DER ECDSA signature").to_bytes().to_vec()
    }

    /// The public key as the JWK Plaid's key endpoint answers with (`x`, `y` from the key's SPKI DER).
    pub fn jwk(&self, kid: &str, expired_at: Option<i64>) -> serde_json::Value {
        let output = Command::new("openssl")
            .args(["pkey", "-pubout", "-outform", "DER", "-in"])
            .arg(&self.path)
            .stderr(Stdio::null())
            .output()
            .expect("run openssl pkey");
        assert!(output.status.success(), "openssl pkey failed");
        // The SPKI ends with the uncompressed point: 0x04, x (32 bytes), y (32 bytes).
        let point = &output.stdout[output.stdout.len() - 65..];
        assert_eq!(point[0], 4, "an uncompressed point");
        let base64url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        serde_json::json!({
            "alg": "ES256", "created_at": 1_560_466_143, "crv": "P-256", "expired_at": expired_at, "kid": kid,
            "kty": "EC", "use": "sig", "x": base64url(&point[1..33]), "y": base64url(&point[33..]),
        })
    }
}

/// A CA: its certificate (PEM) and what it needs to issue more.
pub struct TestCa {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Self { pem, issuer: Issuer::new(params, key) }
    }

    /// A signing certificate for `key`, valid from a day ago for `valid_for` (negative: expired that long ago).
    pub fn signing_certificate(&self, key: &RsaKey, name: &str, valid_from_now_s: i64) -> String {
        let mut params = CertificateParams::new(vec![name.to_owned()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        let now = rcgen::date_time_ymd(2000, 1, 1)
            + (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock")
                - Duration::from_secs(946_684_800));
        params.not_before = now - Duration::from_secs(86_400 * 2);
        params.not_after = if valid_from_now_s >= 0 {
            now + Duration::from_secs(valid_from_now_s as u64)
        } else {
            now - Duration::from_secs(valid_from_now_s.unsigned_abs())
        };
        params.signed_by(&key.key_pair(), &self.issuer).expect("signing certificate").pem()
    }

    /// The TLS certificate and key of a server answering for `names`.
    fn server_identity(&self, names: &[&str]) -> (rustls::pki_types::CertificateDer<'static>, KeyPair) {
        let key = KeyPair::generate().expect("server key");
        let params =
            CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>()).expect("params");
        (params.signed_by(&key, &self.issuer).expect("server certificate").der().clone(), key)
    }
}

/// What the key server answers at a path.
#[derive(Debug, Clone)]
pub enum Served {
    Pem(String),
    /// A JSON document (a JSON Web Key Set).
    Json(String),
    /// Accepts the request and never answers.
    Hang,
    /// 10 MB, streamed without a `Content-Length`.
    Huge,
    /// 200 with a small body (SNS's `ConfirmSubscription`).
    Ok,
    /// Plaid's `/webhook_verification_key/get`: a `POST` whose JSON names `client_id`, `secret` and `key_id`;
    /// with these credentials and a known key id, 200 `{"key": <jwk>, "request_id": ..}`, else 400 with Plaid's
    /// error shape.
    PlaidKeys {
        client_id: String,
        secret: String,
        keys: Vec<(String, serde_json::Value)>,
    },
    /// PayPal's REST API at `/v1/`: `POST /v1/oauth2/token` with HTTP Basic `client_id:secret` and the form
    /// `grant_type=client_credentials` answers an access token; `GET /v1/notifications/webhooks-events/{id}` with
    /// that token answers the event of that id (as PayPal formats it: the JSON given here) or 404; anything
    /// without the right credential 401.
    PayPalApi {
        client_id: String,
        secret: String,
        events: Vec<(String, String)>,
    },
}

/// The key server.
#[derive(Debug)]
pub struct KeyServer {
    pub addr: SocketAddr,
    pub ca: Arc<TestCa>,
    routes: Arc<Mutex<Vec<(String, Served)>>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl KeyServer {
    /// Starts serving `routes` (path prefix → answer; anything else 404) for the pinned names.
    pub async fn start(ca: Arc<TestCa>) -> Self {
        let (certificate, key) = ca.server_identity(&HOSTS);
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(vec![certificate], key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let routes: Arc<Mutex<Vec<(String, Served)>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let (served, seen) = (routes.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, served, seen) = (acceptor.clone(), served.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (served, seen) = (served.clone(), seen.clone());
                        async move { Ok::<_, std::convert::Infallible>(answer(&served, &seen, request).await) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        Self { addr, ca, routes, requests }
    }

    pub fn serve(&self, path: &str, served: Served) {
        self.routes.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((path.to_owned(), served));
    }

    /// Every request target asked for so far, in order (a Plaid key request: the target, ` key_id=` and the id).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub fn requests_for(&self, path: &str) -> usize {
        self.requests().iter().filter(|target| target.starts_with(path)).count()
    }

    /// The gateway's `[key_fetch]` for this server: its CA trusted, both pinned names resolved to it.
    pub fn key_fetch_config(&self) -> KeyFetchConfig {
        KeyFetchConfig {
            fetch_timeout_ms: 1_000,
            failure_hold_s: 1,
            cache_max_entries: 4,
            // The tests fetch a dozen keys per source at most; the miss budget has tests of its own.
            misses_per_source: 100,
            test_only: Some(KeyFetchTestOnly {
                roots_pem: self.ca.pem.clone().into_bytes(),
                resolve: HOSTS.iter().map(|host| ((*host).to_owned(), self.addr)).collect(),
            }),
            ..KeyFetchConfig::default()
        }
    }
}

type Answer = Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>;

async fn answer(
    routes: &Mutex<Vec<(String, Served)>>,
    seen: &Mutex<Vec<String>>,
    request: Request<Incoming>,
) -> Answer {
    let target = request.uri().path_and_query().map(|target| target.as_str().to_owned()).unwrap_or_default();
    let method = request.method().clone();
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let logged = match asked.get("key_id").and_then(serde_json::Value::as_str) {
        Some(kid) => format!("{target} key_id={kid}"),
        None => target.clone(),
    };
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(logged);
    let served = routes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
        .find(|(path, _)| target.starts_with(path.as_str()))
        .map(|(_, served)| served.clone());
    let full = |status: StatusCode, body: Bytes| {
        let mut response = Response::new(Full::new(body).boxed());
        *response.status_mut() = status;
        response
    };
    match served {
        None => full(StatusCode::NOT_FOUND, Bytes::from_static(b"not found")),
        Some(Served::Pem(pem) | Served::Json(pem)) => full(StatusCode::OK, Bytes::from(pem)),
        Some(Served::Ok) => full(StatusCode::OK, Bytes::from_static(b"<ConfirmSubscriptionResponse/>")),
        Some(Served::PlaidKeys { client_id, secret, keys }) => {
            let text = |name: &str| asked.get(name).and_then(serde_json::Value::as_str);
            let plaid_error = |code: &str| {
                let error =
                    serde_json::json!({ "error_type": "INVALID_REQUEST", "error_code": code, "request_id": "t" });
                full(StatusCode::BAD_REQUEST, Bytes::from(error.to_string()))
            };
            if method != http::Method::POST {
                return plaid_error("INVALID_HTTP_METHOD");
            }
            if text("client_id") != Some(client_id.as_str()) || text("secret") != Some(secret.as_str()) {
                return plaid_error("INVALID_API_KEYS");
            }
            match keys.iter().find(|(kid, _)| Some(kid.as_str()) == text("key_id")) {
                Some((_, jwk)) => {
                    let answer = serde_json::json!({ "key": jwk, "request_id": "t" });
                    full(StatusCode::OK, Bytes::from(answer.to_string()))
                }
                None => plaid_error("INVALID_FIELD"),
            }
        }
        Some(Served::PayPalApi { client_id, secret, events }) => {
            let unauthorized = || full(StatusCode::UNAUTHORIZED, Bytes::from_static(br#"{"error":"invalid_client"}"#));
            if target == "/v1/oauth2/token" {
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:{secret}"));
                if method != http::Method::POST
                    || authorization != format!("Basic {basic}")
                    || body.as_ref() != b"grant_type=client_credentials"
                {
                    return unauthorized();
                }
                let token = serde_json::json!({
                    "scope": "https://uri.paypal.com/services/applications/webhooks", "access_token": PAYPAL_ACCESS_TOKEN,
                    "token_type": "Bearer", "app_id": "APP-80W284485P519543T", "expires_in": 32_400, "nonce": "t",
                });
                return full(StatusCode::OK, Bytes::from(token.to_string()));
            }
            if method != http::Method::GET || authorization != format!("Bearer {PAYPAL_ACCESS_TOKEN}") {
                return unauthorized();
            }
            let id = target.strip_prefix("/v1/notifications/webhooks-events/").unwrap_or_default();
            match events.iter().find(|(known, _)| known == id) {
                Some((_, event)) => full(StatusCode::OK, Bytes::from(event.clone())),
                None => full(StatusCode::NOT_FOUND, Bytes::from_static(br#"{"name":"INVALID_RESOURCE_ID"}"#)),
            }
        }
        Some(Served::Hang) => {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            full(StatusCode::OK, Bytes::new())
        }
        Some(Served::Huge) => {
            let chunk = Bytes::from(vec![b'A'; 64 * 1024]);
            let chunks = (0..160).map(move |_| Ok::<_, std::convert::Infallible>(Frame::data(chunk.clone())));
            Response::new(StreamBody::new(futures_util::stream::iter(chunks)).boxed())
        }
    }
}
