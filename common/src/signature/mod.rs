//! Signature schemes: each proves that a request's raw body bytes came from the provider holding a secret.
//!
//! A scheme only ever looks at the raw bytes and the request headers; it never parses the body to decide
//! authenticity, and no field inside a payload is ever proof of origin. Comparisons are constant-time
//! (`Mac::verify_slice`). Each source has a list of secrets (rotation): a request is authentic when any matches,
//! and the id of the one that matched is reported so operators can see when a retiring secret stops being used.

pub mod github;

use std::fmt;

use http::HeaderMap;
use secrecy::{ExposeSecret, SecretSlice};

pub use github::GitHub;

/// A configured secret: an id (for rotation and telemetry) and the key bytes, which are never printed.
pub struct Secret {
    pub id: String,
    key: SecretSlice<u8>,
}

impl Secret {
    pub fn new(id: impl Into<String>, key: impl Into<Vec<u8>>) -> Self {
        Self { id: id.into(), key: SecretSlice::from(key.into()) }
    }

    pub(crate) fn key(&self) -> &[u8] {
        self.key.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret").field("id", &self.id).finish_non_exhaustive()
    }
}

/// A request as it came off the socket: nothing in it is trusted yet.
#[derive(Debug)]
pub struct UnverifiedRequest<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// Proof that a request verified: which secret matched. Only a scheme can make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    secret_id: String,
}

impl Verified {
    fn by(secret: &Secret) -> Self {
        Self { secret_id: secret.id.clone() }
    }

    pub fn secret_id(&self) -> &str {
        &self.secret_id
    }
}

/// Why a request is not authentic. Every variant is the sender's problem (4xx), never ours.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("signature header `{0}` is missing")]
    MissingSignature(&'static str),
    #[error("signature header `{0}` is malformed")]
    MalformedSignature(&'static str),
    #[error("no configured secret produces this signature")]
    Mismatch,
}

/// Where the event id and type of a request come from, as the scheme knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub event_id: Option<String>,
    pub event_type: Option<String>,
}

/// One provider's signature scheme.
pub trait Scheme: Send + Sync + fmt::Debug {
    /// The scheme's config name (`scheme = "..."`).
    fn name(&self) -> &'static str;

    /// Checks the signature over the raw body against each secret, in constant time per comparison.
    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[Secret]) -> Result<Verified, VerifyError>;

    /// The event id and type, read from a request that has already verified.
    fn identify(&self, request: &UnverifiedRequest<'_>) -> Identity;
}

/// The scheme registered under a config name, if any.
pub fn scheme_by_name(name: &str) -> Option<Box<dyn Scheme>> {
    match name {
        "github" => Some(Box::new(GitHub)),
        _ => None,
    }
}

/// The names [`scheme_by_name`] knows, for config validation messages.
pub const SCHEME_NAMES: &[&str] = &["github"];

fn header_value<'a>(headers: &'a HeaderMap, name: &'static str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}
