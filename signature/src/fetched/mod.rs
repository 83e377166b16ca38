//! Public-key schemes whose key is fetched from the provider: AWS SNS (signature versions 1 and 2) and PayPal sign
//! with the private key of an X.509 certificate that the request names by URL; Google Pub/Sub push sends an OIDC
//! token signed with a key of Google's published key set ([`jwt`]); Plaid an ES256 JWT whose key is asked for by
//! a `POST` with the source's API credentials ([`plaid`]).
//!
//! Verification is split in three so that the gateway can fetch between the steps without holding a blocking
//! thread: [`FetchedKeyScheme::locate`] does the cheap checks (headers present, timestamp fresh) and returns the
//! certificate's URL, refused unless it is https on one of the scheme's pinned hosts and paths ([`pin`]); the
//! gateway fetches it (cached, bounded, off the request path where it can); then [`verify_fetched`] checks
//! the certificate's chain against the trust roots at the request's time ([`x509`]) and the scheme's signature
//! with its key. Nothing a request says can make the gateway connect anywhere but a pinned host.
//!
//! The source's secrets bind the signature to *this* receiver, since anyone can have SNS or PayPal sign a message
//! to any URL: for SNS they are the topic ARNs accepted, for PayPal the webhook ids (PayPal signs the id).

pub mod google_pubsub;
pub mod jwt;
pub mod paypal;
pub mod pin;
pub mod plaid;
pub mod sns;
pub mod x509;

use std::fmt;

use super::{Secret, SignatureMatch, UnverifiedRequest, Verified, VerifyError, active_secrets};
use crate::SecretError;
pub use pin::{KeyPost, KeyUrl};
pub use x509::{FetchedCertificate, TrustRoots};

/// Verifies `request` with a fetched-key `scheme` and the key fetched from the URL its
/// [`FetchedKeyScheme::locate`] returned: a certificate's chain is checked against `roots` at the
/// request's time, then the signature with its key. The only way to a proof for such a scheme.
pub fn verify_fetched(
    scheme: &dyn FetchedKeyScheme,
    request: &UnverifiedRequest<'_>,
    secrets: &[Secret],
    key: &FetchedKey,
    roots: &TrustRoots,
) -> Result<Verified, VerifyError> {
    let checked = match key {
        FetchedKey::Certificate(certificate) => {
            CheckedKey::Leaf(certificate.check(roots, request.now_ms).map_err(|_| VerifyError::CertificateUntrusted)?)
        }
        FetchedKey::JwkSet(keys) => CheckedKey::JwkSet(keys),
    };
    let active: Vec<&Secret> = active_secrets(secrets, request.now_ms).collect();
    let matched = scheme.verify_with(request, &active, &checked)?;
    Ok(Verified::signed(matched, request.body.clone()))
}

/// `Scheme::verify` of a fetched-key scheme, reached only without the gateway's fetcher (`hookline-gateway verify`
/// offline): the request is checked as far as it can be without the key, which is not at hand.
pub(crate) fn verify_offline(
    scheme: &dyn FetchedKeyScheme,
    request: &UnverifiedRequest<'_>,
    secrets: &[&Secret],
) -> Result<SignatureMatch, VerifyError> {
    scheme.locate(request, secrets)?;
    Err(VerifyError::KeyNotFetched)
}

/// A secret that is text (an account, an ARN, credentials): UTF-8, surrounding whitespace trimmed; `what` names it
/// in the error.
pub(crate) fn secret_text<'a>(raw: &'a [u8], what: &'static str) -> Result<&'a str, SecretError> {
    Ok(std::str::from_utf8(raw).map_err(|_| SecretError::NotUtf8 { what })?.trim())
}

/// A scheme whose verification needs a certificate fetched from the provider.
pub trait FetchedKeyScheme: Send + Sync + fmt::Debug {
    /// The cheap checks (signature headers present and well-formed, timestamp fresh), then the URL of the
    /// certificate that signed the request, already checked against the scheme's pins. `secrets` (the active
    /// ones) are for a scheme whose key is asked for with a credential (Plaid's `POST` with its API keys).
    fn locate(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<KeyUrl, VerifyError>;

    /// What the URL serves: a PEM certificate (the default) or a JSON Web Key Set.
    fn key_format(&self) -> KeyFormat {
        KeyFormat::Certificate
    }

    /// Checks the request's signature with `key` (a certificate whose chain [`verify_fetched`] has
    /// checked, or a key set), and that it was meant for one of `secrets` (a topic ARN, a webhook id, a service
    /// account).
    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        key: &CheckedKey<'_>,
    ) -> Result<SignatureMatch, VerifyError>;

    /// What a verified request asks besides being produced: SNS's subscription confirmation (a `GET` of its
    /// `SubscribeURL`, on a pinned host too) or its unsubscribe confirmation, both answered 200 and never produced.
    fn confirmation(&self, _request: &UnverifiedRequest<'_>) -> Result<Option<Confirmation>, VerifyError> {
        Ok(None)
    }
}

/// What a key URL serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    Certificate,
    JwkSet,
}

/// A fetched key document, parsed (nothing trusted yet): what the gateway's cache keeps.
#[derive(Debug, Clone)]
pub enum FetchedKey {
    Certificate(FetchedCertificate),
    JwkSet(jwt::JwkSet),
}

impl FetchedKey {
    /// `body` as `format`; `presented` is the key host's TLS chain (extra intermediates for a certificate).
    pub fn parse(
        format: KeyFormat,
        body: &[u8],
        presented: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Option<Self> {
        match format {
            KeyFormat::Certificate => FetchedCertificate::from_pem(body, presented).ok().map(Self::Certificate),
            KeyFormat::JwkSet => jwt::JwkSet::parse(body).map(Self::JwkSet),
        }
    }

    /// Bytes held in memory, for the cache's bound.
    pub fn size_bytes(&self) -> usize {
        match self {
            Self::Certificate(certificate) => certificate.size_bytes(),
            Self::JwkSet(keys) => keys.size_bytes(),
        }
    }
}

/// A fetched key a scheme may use: a certificate whose chain was checked, or a key set (whose https host vouches
/// for it).
#[derive(Debug)]
// Made once per request and only borrowed: boxing the larger variant would buy nothing but an allocation.
#[allow(clippy::large_enum_variant)]
pub enum CheckedKey<'a> {
    Leaf(x509::CheckedLeaf<'a>),
    JwkSet(&'a jwt::JwkSet),
}

impl CheckedKey<'_> {
    /// The certificate, for a scheme that fetched one (anything else cannot verify it).
    pub fn leaf(&self) -> Result<&x509::CheckedLeaf<'_>, VerifyError> {
        match self {
            Self::Leaf(leaf) => Ok(leaf),
            Self::JwkSet(_) => Err(VerifyError::CertificateUntrusted),
        }
    }

    pub fn jwk_set(&self) -> Result<&jwt::JwkSet, VerifyError> {
        match self {
            Self::JwkSet(keys) => Ok(keys),
            Self::Leaf(_) => Err(VerifyError::KeyNotFetched),
        }
    }
}

/// A verified request that is a subscription message, not an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Confirm by a `GET` of this URL (SNS `SubscriptionConfirmation`), then answer 200.
    Visit { kind: &'static str, url: KeyUrl },
    /// Answer 200 and do nothing else (SNS `UnsubscribeConfirmation`).
    Acknowledge { kind: &'static str },
}

impl Confirmation {
    /// The handshake's name, as counted and logged.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Visit { kind, .. } | Self::Acknowledge { kind } => kind,
        }
    }
}
