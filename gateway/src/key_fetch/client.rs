//! One https request to a pinned host: resolve (DNS, or a test's fixed address), connect, TLS verified against
//! the trust roots with the pinned host's name, one HTTP/1.1 request, a response read within a byte cap. The
//! whole exchange runs under one deadline, so a host that accepts and then says nothing costs that much and no
//! more. No connection is kept: keys are fetched rarely.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use hookline_signature::fetched::{KeyUrl, TrustRoots};
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Either, Empty, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

use crate::error::KeyFetchBuildError;

/// Why a fetch failed (the label of `hookline_gateway_key_fetches_total`'s `outcome`).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no answer within the fetch timeout")]
    Timeout,
    #[error("the response is larger than max_response_bytes")]
    TooLarge,
    #[error("the host answered {0}")]
    Status(StatusCode),
    #[error("cannot reach the host: {0}")]
    Connect(String),
    #[error("the response is not the key document expected (a PEM certificate, a JSON Web Key Set)")]
    Unparsable,
}

impl FetchError {
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::TooLarge => "too_large",
            Self::Status(_) => "status",
            Self::Connect(_) => "unreachable",
            Self::Unparsable => "unparsable",
        }
    }
}

/// What a call of a provider's API adds to a request: its credential, and its form body if it posts one.
struct ApiCall {
    authorization: HeaderValue,
    form: Option<&'static str>,
}

/// What a fetch returned: the body and the certificates the host presented over TLS (leaf first).
pub struct Fetched {
    pub body: Bytes,
    pub presented: Vec<CertificateDer<'static>>,
}

#[derive(Debug)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
    /// Host name → address instead of DNS (tests only: loopback addresses, checked when built).
    resolve: Vec<(String, SocketAddr)>,
    timeout: Duration,
    max_response_bytes: usize,
}

impl Client {
    pub fn new(
        roots: &TrustRoots,
        resolve: Vec<(String, SocketAddr)>,
        timeout: Duration,
        max_response_bytes: usize,
    ) -> Result<Self, KeyFetchBuildError> {
        if let Some((host, addr)) = resolve.iter().find(|(_, addr)| !addr.ip().is_loopback()) {
            return Err(KeyFetchBuildError::NotLoopback { host: host.clone(), addr: *addr });
        }
        let store = rustls::RootCertStore { roots: roots.anchors().to_vec() };
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(KeyFetchBuildError::Tls)?
            .with_root_certificates(store)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { tls: Arc::new(tls), resolve, timeout, max_response_bytes })
    }

    /// `GET url` (or `POST` of its JSON body, for a key asked for with a credential: Plaid's), expecting a 200 of
    /// at most `max_response_bytes`.
    pub async fn get(&self, url: &KeyUrl) -> Result<Fetched, FetchError> {
        tokio::time::timeout(self.timeout, self.exchange(url, None)).await.map_err(|_| FetchError::Timeout)?
    }

    /// A call of a provider's API at `url` (already pinned) with `authorization` (a credential: marked sensitive,
    /// never logged): `POST` of the form `form` if given, else `GET`; expecting a 200 as [`Self::get`] does.
    pub async fn call(
        &self,
        url: &KeyUrl,
        authorization: &HeaderValue,
        form: Option<&'static str>,
    ) -> Result<Fetched, FetchError> {
        let mut authorization = authorization.clone();
        authorization.set_sensitive(true);
        let call = Some(ApiCall { authorization, form });
        tokio::time::timeout(self.timeout, self.exchange(url, call)).await.map_err(|_| FetchError::Timeout)?
    }

    async fn exchange(&self, url: &KeyUrl, call: Option<ApiCall>) -> Result<Fetched, FetchError> {
        let connect = |error: &dyn std::fmt::Display| FetchError::Connect(error.to_string());
        let addresses: Vec<SocketAddr> = match self.resolve.iter().find(|(host, _)| host == url.host()) {
            Some((_, addr)) => vec![*addr],
            None => tokio::net::lookup_host((url.host(), 443)).await.map_err(|error| connect(&error))?.collect(),
        };
        let mut stream = None;
        let mut last_error = FetchError::Connect("the name resolves to no address".to_owned());
        for addr in addresses {
            match TcpStream::connect(addr).await {
                Ok(connected) => {
                    stream = Some(connected);
                    break;
                }
                Err(error) => last_error = connect(&error),
            }
        }
        let stream = stream.ok_or(last_error)?;
        let name = ServerName::try_from(url.host().to_owned()).map_err(|error| connect(&error))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await
            .map_err(|error| connect(&error))?;
        let presented =
            tls.get_ref().1.peer_certificates().map(|chain| chain.iter().map(|der| der.clone().into_owned()).collect());
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|error| connect(&error))?;
        let driver = tokio::spawn(connection);
        let request = Request::builder()
            .uri(url.path())
            .header(header::HOST, url.host())
            .header(header::USER_AGENT, concat!("hookline-gateway/", env!("CARGO_PKG_VERSION")))
            .header(header::ACCEPT, "*/*");
        let request = match (url.post_body(), call) {
            (_, Some(ApiCall { authorization, form: None })) => request
                .method(http::Method::GET)
                .header(header::AUTHORIZATION, authorization)
                .body(Either::Left(Empty::<Bytes>::new())),
            (_, Some(ApiCall { authorization, form: Some(form) })) => request
                .method(http::Method::POST)
                .header(header::AUTHORIZATION, authorization)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Either::Right(Full::new(Bytes::from_static(form.as_bytes())))),
            (None, None) => request.method(http::Method::GET).body(Either::Left(Empty::<Bytes>::new())),
            (Some(body), None) => request
                .method(http::Method::POST)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Either::Right(Full::new(Bytes::copy_from_slice(body)))),
        }
        .map_err(|error| connect(&error))?;
        let result = async {
            let response = sender.send_request(request).await.map_err(|error| connect(&error))?;
            if response.status() != StatusCode::OK {
                return Err(FetchError::Status(response.status()));
            }
            let declared = response
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<u64>().ok());
            if declared.is_some_and(|length| length > self.max_response_bytes as u64) {
                return Err(FetchError::TooLarge);
            }
            let body = Limited::new(response.into_body(), self.max_response_bytes).collect().await.map_err(
                |error| match error.downcast::<http_body_util::LengthLimitError>() {
                    Ok(_) => FetchError::TooLarge,
                    Err(error) => connect(&error),
                },
            )?;
            Ok(Fetched { body: body.to_bytes(), presented: presented.unwrap_or_default() })
        }
        .await;
        driver.abort();
        result
    }
}
