//! Why a request is not authentic: [`VerifyError`], one variant per way a scheme refuses, each with the stable
//! reason code the gateway reports.

use std::borrow::Cow;

/// Why a request is not authentic. Every variant is the sender's problem (4xx), never ours.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// A header the scheme needs (signature, timestamp or message id) is absent.
    #[error("signature header `{0}` is missing")]
    MissingSignature(Cow<'static, str>),
    /// A header the scheme needs is present but cannot be parsed.
    #[error("signature header `{0}` is malformed")]
    MalformedSignature(Cow<'static, str>),
    #[error("no configured secret produces this signature")]
    Mismatch,
    /// The signed timestamp is older than the tolerance allows (a replay, or a very late retry). `skew_ms` is the
    /// signed timestamp minus the gateway's clock when the request arrived (negative here), so an operator can
    /// tell a replay from days ago from a sender whose clock is a few minutes behind.
    #[error("the signed timestamp is too old")]
    TimestampStale { skew_ms: i64 },
    /// The signed timestamp is further in the future than the tolerance allows (clock skew, or a forged clock).
    /// `skew_ms` as for [`Self::TimestampStale`] (positive here).
    #[error("the signed timestamp is in the future")]
    TimestampFuture { skew_ms: i64 },
    /// The scheme signs a timestamp that this request does not carry where it should (Linear: in the body).
    #[error("the signed timestamp `{0}` is missing")]
    MissingTimestamp(&'static str),
    /// The scheme can only verify requests of a content type this one is not (Twilio: form-encoded, or JSON
    /// with a `bodySHA256` query parameter).
    #[error("this source needs a `{0}` body")]
    UnsupportedContentType(&'static str),
    /// A form too large to verify at the cost of what it sends (Twilio signs sorted form parameters, so a forged
    /// form costs its parse and sort before its signature can be found wrong).
    #[error("a signed form may hold at most {max_bytes} bytes and {max_params} parameters")]
    FormTooLarge { max_bytes: usize, max_params: usize },
    /// The URL a fetched-key scheme was told to fetch its key (or confirm a subscription) from is not https on one
    /// of the provider's pinned hosts and paths; nothing was fetched.
    #[error("`{0}` is not on a host and path pinned for this provider")]
    KeyUrlNotPinned(&'static str),
    /// The fetched certificate does not chain to a trusted root, or was not valid when the request arrived.
    #[error("the provider's certificate is not trusted")]
    CertificateUntrusted,
    /// A fetched-key scheme was asked to verify without its key (offline, without the gateway's fetcher).
    #[error("this scheme's key is fetched from the provider and was not fetched here")]
    KeyNotFetched,
    /// The provider's own API, asked with the operator's credential, does not hold the event this body claims to
    /// be, or holds it with other contents (PayPal, whose signature binds the body only by a CRC32).
    #[error("the provider's API does not confirm this event")]
    NotConfirmed,
}

impl VerifyError {
    /// Stable reason, used as the error code and the `reason` metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingSignature(_) => "signature_missing",
            Self::MalformedSignature(_) => "signature_malformed",
            Self::Mismatch => "signature_mismatch",
            Self::TimestampStale { .. } => "timestamp_stale",
            Self::TimestampFuture { .. } => "timestamp_future",
            Self::MissingTimestamp(_) => "timestamp_missing",
            Self::UnsupportedContentType(_) => "content_type_unsupported",
            Self::FormTooLarge { .. } => "form_too_large",
            Self::KeyUrlNotPinned(_) => "key_url_not_pinned",
            Self::CertificateUntrusted => "certificate_untrusted",
            Self::KeyNotFetched => "key_not_fetched",
            Self::NotConfirmed => "not_confirmed",
        }
    }

    /// Every value [`Self::reason`] can return.
    pub fn reasons() -> Vec<&'static str> {
        // A new variant fails to compile here until it is listed in `each` too.
        let listed = |error: &Self| match error {
            Self::MissingSignature(_)
            | Self::MalformedSignature(_)
            | Self::Mismatch
            | Self::TimestampStale { .. }
            | Self::TimestampFuture { .. }
            | Self::MissingTimestamp(_)
            | Self::UnsupportedContentType(_)
            | Self::FormTooLarge { .. }
            | Self::KeyUrlNotPinned(_)
            | Self::CertificateUntrusted
            | Self::KeyNotFetched
            | Self::NotConfirmed => error.reason(),
        };
        let each = [
            Self::missing("h"),
            Self::malformed("h"),
            Self::Mismatch,
            Self::TimestampStale { skew_ms: 0 },
            Self::TimestampFuture { skew_ms: 0 },
            Self::MissingTimestamp("t"),
            Self::UnsupportedContentType("c"),
            Self::FormTooLarge { max_bytes: 0, max_params: 0 },
            Self::KeyUrlNotPinned("u"),
            Self::CertificateUntrusted,
            Self::KeyNotFetched,
            Self::NotConfirmed,
        ];
        each.iter().map(listed).collect()
    }

    /// How far the signed timestamp was from the gateway's clock (timestamp minus clock, ms) when that is why the
    /// request was refused; `None` for every other reason.
    pub fn skew_ms(&self) -> Option<i64> {
        match self {
            Self::TimestampStale { skew_ms } | Self::TimestampFuture { skew_ms } => Some(*skew_ms),
            _ => None,
        }
    }

    pub(crate) fn missing(header: &'static str) -> Self {
        Self::MissingSignature(Cow::Borrowed(header))
    }

    pub(crate) fn malformed(header: &'static str) -> Self {
        Self::MalformedSignature(Cow::Borrowed(header))
    }
}

/// Why a scheme cannot be built from a source's configuration: one line of the operator's problem list (the
/// gateway prefixes it with the source). Built at start-up or on reload, never per request.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// No scheme and no preset has this name.
    #[error("unknown scheme `{name}` (known: {known}, and the {presets} presets listed in docs/providers.md)")]
    UnknownScheme { name: String, known: String, presets: usize },
    /// The scheme signs no timestamp, so a tolerance cannot apply to it.
    #[error(
        "scheme `{0}` signs no timestamp, so tolerance_s cannot apply: remove it (docs/configuration/gateway.md, 'What each scheme signs')"
    )]
    ToleranceWithoutTimestamp(String),
    /// The scheme's options are missing, contradict each other, or would let a captured request be accepted as
    /// another event; the text names the option and why.
    #[error("{0}")]
    Options(Cow<'static, str>),
}

impl From<String> for BuildError {
    fn from(problem: String) -> Self {
        Self::Options(problem.into())
    }
}

impl From<&'static str> for BuildError {
    fn from(problem: &'static str) -> Self {
        Self::Options(problem.into())
    }
}

/// Why a configured secret is not a key its scheme can use: one line of the operator's problem list (the gateway
/// prefixes it with the secret's id). It never holds the secret or a decoder's own error, which would name the
/// offending byte of the secret.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The secret (a key, a public key, an ARN, credentials: `what`) is not UTF-8 text.
    #[error("{what} is not UTF-8")]
    NotUtf8 { what: &'static str },
    /// The text is not in the encoding the scheme reads it in.
    #[error("{what} is not {encoding}")]
    NotEncoded { what: &'static str, encoding: &'static str },
    /// It decodes, but not to a key the scheme can use; the text says what one looks like.
    #[error("{0}")]
    Invalid(Cow<'static, str>),
}

impl From<String> for SecretError {
    fn from(problem: String) -> Self {
        Self::Invalid(problem.into())
    }
}

impl From<&'static str> for SecretError {
    fn from(problem: &'static str) -> Self {
        Self::Invalid(problem.into())
    }
}

/// Why a PEM file of CA certificates cannot be the trust roots of fetched keys.
#[derive(Debug, thiserror::Error)]
pub enum TrustRootsError {
    #[error("a CA certificate does not parse")]
    Pem(#[source] rustls_pki_types::pem::Error),
    #[error("a CA certificate is not usable as a root")]
    NotARoot(#[source] webpki::Error),
    #[error("no CA certificate found")]
    Empty,
}
