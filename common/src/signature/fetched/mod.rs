//! Public-key schemes whose key is fetched from the provider: AWS SNS (signature versions 1 and 2) and PayPal sign
//! with the private key of an X.509 certificate that the request names by URL.
//!
//! Verification is split in three so that the gateway can fetch between the steps without holding a blocking
//! thread: [`FetchedKeyScheme::locate`] does the cheap checks (headers present, timestamp fresh) and returns the
//! certificate's URL, refused unless it is https on one of the scheme's pinned hosts and paths ([`pin`]); the
//! gateway fetches it (cached, bounded, off the request path where it can); then [`super::verify_fetched`] checks
//! the certificate's chain against the trust roots at the request's time ([`x509`]) and the scheme's signature
//! with its key. Nothing a request says can make the gateway connect anywhere but a pinned host.
//!
//! The source's secrets bind the signature to *this* receiver, since anyone can have SNS or PayPal sign a message
//! to any URL: for SNS they are the topic ARNs accepted, for PayPal the webhook ids (PayPal signs the id).

pub mod paypal;
pub mod pin;
pub mod sns;
pub mod x509;

use std::fmt;

use super::{Secret, SignatureMatch, UnverifiedRequest, VerifyError};
pub use pin::KeyUrl;
pub use x509::{FetchedCertificate, TrustRoots};

/// A scheme whose verification needs a certificate fetched from the provider.
pub trait FetchedKeyScheme: Send + Sync + fmt::Debug {
    /// The cheap checks (signature headers present and well-formed, timestamp fresh), then the URL of the
    /// certificate that signed the request, already checked against the scheme's pins.
    fn locate(&self, request: &UnverifiedRequest<'_>) -> Result<KeyUrl, VerifyError>;

    /// Checks the request's signature with `certificate`, whose chain [`super::verify_fetched`] has checked,
    /// and that it was meant for one of `secrets` (a topic ARN, a webhook id).
    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        certificate: &x509::CheckedLeaf<'_>,
    ) -> Result<SignatureMatch, VerifyError>;

    /// What a verified request asks besides being produced: SNS's subscription confirmation (a `GET` of its
    /// `SubscribeURL`, on a pinned host too) or its unsubscribe confirmation, both answered 200 and never produced.
    fn confirmation(&self, _request: &UnverifiedRequest<'_>) -> Result<Option<Confirmation>, VerifyError> {
        Ok(None)
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
