//! Signature schemes: each proves that a request's raw body bytes came from the provider holding a secret.
//!
//! A scheme decides authenticity from the raw bytes, the request headers and, for the few providers that sign
//! them, the method and the public URL; it never parses the body before the signature matched, and no field inside
//! a payload is ever proof of origin. (Linear's timestamp lives in its signed body, so it is read after the
//! signature matched.) Comparisons are constant-time (`Mac::verify_slice` or `subtle`).
//!
//! Each source has a list of secrets (rotation): a request is authentic when any *active* secret matches
//! (`not_before`/`not_after`, see [`Secret::with_validity`]), and the id of the one that matched is reported so
//! operators can see when a retiring secret stops being used. For the HMAC schemes, signature first, freshness
//! second: a stale or future timestamp is only reported for a request that was genuinely signed, so the reason
//! tells clock skew or replay apart from forgery. The asymmetric schemes (Discord, SendGrid) judge freshness first:
//! a public-key verification costs 5 to 20 HMACs, and a forged flood should not get one for free.
//!
//! One module per provider or family; [`build`] maps a config name to a scheme. The configurable families
//! (`hmac`, `structured`, `body_fields`, `token`, `jwt`) make most providers configuration, and [`presets`] names them
//! with fixed settings (`scheme = "calendly"`); [`handshake`] holds the subscription checks several share.

pub mod body_fields;
pub mod discord;
mod error;
pub mod family;
pub mod fetched;
pub mod generic;
pub mod github;
pub mod gitlab;
pub mod handshake;
pub mod hubspot;
pub mod identity;
pub mod intercom;
pub mod jwt;
pub mod linear;
pub mod paddle;
pub mod pagerduty;
pub mod presets;
mod registry;
pub mod sendgrid;
pub mod shopify;
pub mod slack;
pub mod square;
pub mod standard_webhooks;
pub mod stripe;
pub mod structured;
mod support;
pub mod telnyx;
pub mod token;
pub mod twilio;
pub mod twitch;
pub mod typeform;
pub mod unsigned;
pub mod woocommerce;
pub mod zoom;

use std::{borrow::Cow, fmt};

use bytes::Bytes;
use http::{HeaderMap, Method};
use secrecy::{ExposeSecret, SecretSlice};

pub use error::{BuildError, SecretError, TrustRootsError, VerifyError};
pub use fetched::verify_fetched;
pub use generic::GenericHmacOptions;
pub use github::GitHub;
pub use identity::{FieldSource, HeaderType, Identity, IdentityRule, SignedIdentity};
pub use registry::{SCHEME_NAMES, SchemeOptions, all_names, build, scheme_by_name};

/// A configured secret: an id (for rotation and telemetry), the key bytes (never printed), and the window in which
/// it is accepted.
pub struct Secret {
    pub id: String,
    key: SecretSlice<u8>,
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
}

impl Secret {
    /// A secret accepted at any time. `key` is what the scheme uses: for most providers the secret string's
    /// UTF-8 bytes, see [`Scheme::decode_secret`].
    pub fn new(id: impl Into<String>, key: impl Into<Vec<u8>>) -> Self {
        Self { id: id.into(), key: SecretSlice::from(key.into()), not_before_ms: None, not_after_ms: None }
    }

    /// Accepted only from `not_before_ms` and up to and including `not_after_ms` (ms since the Unix epoch), so
    /// that a rotation's overlap window can be planned and a retired secret stops working by itself.
    pub fn with_validity(mut self, not_before_ms: Option<i64>, not_after_ms: Option<i64>) -> Self {
        self.not_before_ms = not_before_ms;
        self.not_after_ms = not_after_ms;
        self
    }

    pub fn is_active_at(&self, now_ms: i64) -> bool {
        self.not_before_ms.is_none_or(|start| now_ms >= start) && self.not_after_ms.is_none_or(|end| now_ms <= end)
    }

    pub(crate) fn key(&self) -> &[u8] {
        self.key.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("id", &self.id)
            .field("not_before_ms", &self.not_before_ms)
            .field("not_after_ms", &self.not_after_ms)
            .finish_non_exhaustive()
    }
}

/// A request as it came off the socket: nothing in it is trusted yet.
#[derive(Debug, Clone, Copy)]
pub struct UnverifiedRequest<'a> {
    pub method: &'a Method,
    /// The URL the provider sent the request to, as the provider saw it (the source's configured `public_url`
    /// plus the request's query string). Only Twilio, Square and HubSpot sign it; `None` when not configured.
    pub url: Option<&'a str>,
    /// The request's raw query string (after `?`, not decoded), for the schemes and handshakes that read one
    /// (a token in the URL, Meta's `hub.challenge`); `None` when the request had none.
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// The raw body as received. A `Bytes` so that [`verify`] can hand the very same bytes (a reference-counted
    /// clone, not a copy) to the [`Verified`] proof it returns.
    pub body: &'a Bytes,
    /// The gateway's clock when the request arrived, ms since the Unix epoch: timestamps are judged against it.
    pub now_ms: i64,
}

impl<'a> UnverifiedRequest<'a> {
    /// A `POST` without a public URL, received at `now_ms`.
    pub fn new(headers: &'a HeaderMap, body: &'a Bytes, now_ms: i64) -> Self {
        Self { method: &Method::POST, url: None, query: None, headers, body, now_ms }
    }

    pub fn with_url(self, url: &'a str) -> Self {
        Self { url: Some(url), ..self }
    }

    pub fn with_method(self, method: &'a Method) -> Self {
        Self { method, ..self }
    }

    pub fn with_query(self, query: Option<&'a str>) -> Self {
        Self { query, ..self }
    }

    /// The first value of query parameter `name`, percent-decoded.
    pub fn query_parameter(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query?.as_bytes()).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
    }
}

/// What a scheme's own [`Scheme::verify`] reports when a request's signature matched: which secret matched and
/// which request headers the signature covered (besides the body). Only this module and its schemes can make one
/// (no public constructor, private fields), and only [`verify`] turns one into a [`Verified`] proof, binding it
/// to the body the scheme was given. A match alone cannot reach the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureMatch {
    secret_id: String,
    signed_headers: Vec<Cow<'static, str>>,
    coverage: Coverage,
}

/// What of the body a scheme's signature vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Every byte of the body (almost every provider).
    WholeBody,
    /// Only some fields of the body (Mailgun's timestamp and token, Adyen's eight fields, SNS's message fields):
    /// the event's identity is then computed from those fields alone, and nothing else in the body may decide it.
    /// `event_id` is `sha256:<hex>` of the signed string (or a signed id field: SNS's `MessageId`), `event_type` a
    /// signed field's value when the scheme names one.
    SignedFields { event_id: String, event_type: Option<String> },
    /// Nothing: the request presented a shared token (or HTTP Basic credentials), which proves who sent it but
    /// not what was sent. The body is as trustworthy as whoever holds the token.
    Token,
    /// Only a checksum of the body (PayPal's CRC32, which anyone can match with a body of their choosing) is
    /// signed: the signature proves that the provider sent *a* delivery with the signed headers, not this body,
    /// its id or its amount. Accepted only where a source opted in (`[sources.paypal] allow_crc_only`).
    BodyChecksum,
}

impl SignatureMatch {
    fn by(secret: &Secret) -> Self {
        Self { secret_id: secret.id.clone(), signed_headers: Vec::new(), coverage: Coverage::WholeBody }
    }

    /// The signature covered only these body fields, not the whole body.
    fn of_fields(mut self, event_id: String, event_type: Option<String>) -> Self {
        self.coverage = Coverage::SignedFields { event_id, event_type };
        self
    }

    /// The signature binds the body only by a non-cryptographic checksum.
    fn by_checksum(mut self) -> Self {
        self.coverage = Coverage::BodyChecksum;
        self
    }

    /// The request was authenticated by a token, not a signature.
    fn by_token(mut self) -> Self {
        self.coverage = Coverage::Token;
        self
    }

    /// The signature also covered these headers (lowercase names), so their values are as trustworthy as the body.
    fn covering(mut self, names: impl IntoIterator<Item = Cow<'static, str>>) -> Self {
        self.signed_headers.extend(names);
        self
    }

    pub fn secret_id(&self) -> &str {
        &self.secret_id
    }
}

/// Proof that an event is authentic, and of what kind, carrying the exact bytes it vouches for.
///
/// A [`Provenance::Signature`] proof says which secret matched and which request headers the signature covered
/// (besides the body); only [`verify`] (and [`verify_fetched`] for a fetched-key scheme) makes one, from a scheme's
/// [`SignatureMatch`] and the body that scheme checked. A [`Provenance::ProviderApi`] proof says the bytes were fetched from the provider's own API over TLS
/// with our credential (the reconciler's missed events); it covers no request header and is never a signature.
///
/// Compile-level guarantee: the fields are private and the only constructors are [`verify`], [`verify_fetched`] and
/// [`Verified::fetched_from_provider_api`], each of which takes the body and keeps it (a `Bytes` clone shares the
/// allocation, nothing is copied). Whoever holds a proof therefore holds the bytes it verified and no others:
/// [`Verified::body`] is the only way to the payload, so a proof cannot be paired with a different body.
///
/// ```compile_fail
/// // Outside this module a proof cannot be assembled by hand.
/// let forged = hookline_signature::Verified {
///     secret_id: String::new(),
///     signed_headers: Vec::new(),
///     provenance: hookline_signature::Provenance::Signature,
///     body: bytes::Bytes::from_static(b"unverified"),
/// };
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Verified {
    secret_id: String,
    signed_headers: Vec<Cow<'static, str>>,
    coverage: Coverage,
    provenance: Provenance,
    body: Bytes,
}

/// Where a [`Verified`] proof comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// A scheme checked the provider's signature over the raw request (or, for `none`, chose not to).
    Signature,
    /// Fetched from the provider's API over an authenticated TLS connection with our API credential: the
    /// provider itself answered for these bytes.
    ProviderApi,
}

impl Verified {
    /// The proof for `body`, which a scheme matched as `matched`.
    fn signed(matched: SignatureMatch, body: Bytes) -> Self {
        let SignatureMatch { secret_id, signed_headers, coverage } = matched;
        Self { secret_id, signed_headers, coverage, provenance: Provenance::Signature, body }
    }

    /// The proof for `body`, an event the reconciler fetched from the provider's API with the credential
    /// `credential_id` (its `secret_id` reads `api:<credential_id>`). Only code that fetched these bytes from the
    /// provider over TLS with that credential may make one; nothing in a request can lead here.
    pub fn fetched_from_provider_api(credential_id: &str, body: Bytes) -> Self {
        Self {
            secret_id: format!("api:{credential_id}"),
            signed_headers: Vec::new(),
            coverage: Coverage::WholeBody,
            provenance: Provenance::ProviderApi,
            body,
        }
    }

    pub fn provenance(&self) -> Provenance {
        self.provenance
    }

    /// What of the body the proof vouches for.
    pub fn coverage(&self) -> &Coverage {
        &self.coverage
    }

    pub fn secret_id(&self) -> &str {
        &self.secret_id
    }

    /// The bytes this proof vouches for: the body the scheme verified (or the provider's API returned).
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Whether the signature covered header `name` (case-insensitive). Every other header of the request could
    /// have been changed by whoever relayed or captured it.
    pub fn signs_header(&self, name: &str) -> bool {
        self.signed_headers.iter().any(|signed| signed.eq_ignore_ascii_case(name))
    }
}

/// Never prints the body (it may carry personal data); its length is enough to tell proofs apart.
impl fmt::Debug for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { secret_id, signed_headers, coverage, provenance, body } = self;
        let body_len = body.len();
        let coverage = match coverage {
            Coverage::WholeBody => "the whole body",
            Coverage::SignedFields { .. } => "signed body fields",
            Coverage::Token => "a token",
            Coverage::BodyChecksum => "a checksum of the body",
        };
        write!(
            f,
            "Verified {{ {provenance:?} by {secret_id:?}, covering {signed_headers:?} and {coverage}, {body_len} body bytes }}"
        )
    }
}

/// A reply some providers require before they deliver anything (Slack `url_verification`, Zoom
/// `endpoint.url_validation`, Twitch `webhook_callback_verification`, Discord PING). Answered with 200 only after
/// the request verified, and never produced to Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Handshake {
    fn json(value: &serde_json::Value) -> Self {
        Self { content_type: "application/json", body: value.to_string().into_bytes() }
    }

    fn text(value: impl Into<Vec<u8>>) -> Self {
        Self { content_type: "text/plain; charset=utf-8", body: value.into() }
    }
}

/// The answer to an accepted (verified and acknowledged) request, when a provider needs a particular one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedReply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// One provider's signature scheme, configured for one source.
pub trait Scheme: Send + Sync + fmt::Debug {
    /// The scheme's config name (`scheme = "..."`).
    fn name(&self) -> &'static str;

    /// Turns a configured secret's bytes into the key the scheme uses, or says why they cannot be one: the Standard
    /// Webhooks family strips `whsec_` and base64-decodes, Discord and SendGrid take public keys. Called when the
    /// config is loaded, so a bad key fails validation instead of every request.
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        Ok(raw.to_vec())
    }

    /// Checks the signature against each of `secrets` (already filtered to the active ones, in configured order),
    /// in constant time per comparison, then the timestamp if the scheme signs one. The match it returns becomes
    /// a [`Verified`] proof only through [`verify`], which binds it to `request.body`.
    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError>;

    /// Where this provider puts the event id and type; a source's config may override either.
    fn identity(&self) -> IdentityRule;

    /// The handshake reply this verified request asks for, if it is one. `secret` is the one that verified it.
    fn handshake(&self, _request: &UnverifiedRequest<'_>, _secret: &Secret) -> Option<Handshake> {
        None
    }

    /// The answer a verified, produced request gets instead of the default `202 {"status":"accepted",...}`, for
    /// providers that need another one: Discord wants an interaction response body, Zoom a 200 or 204.
    fn accepted_reply(&self, _request: &UnverifiedRequest<'_>) -> Option<AcceptedReply> {
        None
    }

    /// The request headers (lowercase names) this scheme's signature can cover besides the body: the only headers
    /// whose values may decide anything about an event (its id, its ordering key). Empty for most providers.
    fn signable_headers(&self) -> Vec<Cow<'static, str>> {
        Vec::new()
    }

    /// Whether the scheme signs the URL, so the source must configure `public_url`.
    fn signs_url(&self) -> bool {
        false
    }

    /// Whether verification costs more than one HMAC over the body, enough to run on the blocking pool under a
    /// per-source budget: public-key cryptography (Discord, SendGrid), form parsing and sorting (Twilio), and the
    /// URL variants a URL-signing scheme tries (Square, HubSpot).
    fn is_costly(&self) -> bool {
        self.signs_url()
    }

    /// Whether the scheme checks a signature at all. Only `none` says no.
    fn is_verifying(&self) -> bool {
        true
    }

    /// Whether the request presents a shared token instead of a signature (the token family): a source must opt
    /// in to such a scheme (`allow_token`), since it proves less.
    fn is_token(&self) -> bool {
        false
    }

    /// Whether the signature covers every byte of the body. The body-fields family signs only some fields; its
    /// proofs then carry the event's identity ([`Coverage::SignedFields`]) and a source may not choose another.
    fn covers_whole_body(&self) -> bool {
        true
    }

    /// Whether every signature the scheme accepts carries a time it checks against a window, so that a captured
    /// request stops verifying by itself: `false` for the schemes that sign no timestamp (GitHub, Shopify, Meta,
    /// the token family, ...), for a family configured without one (`hmac` without `timestamp_header`, `jwt`
    /// without `require_iat` or `require_exp`) and for Zoom without `tolerance_s`. A scheme says `true` only where
    /// it checks; the default is the cautious answer. A source must opt in to forward such a signature into Kafka
    /// (`forward_untimed_signature`), and `tolerance_s` is refused for it.
    fn signs_timestamp(&self) -> bool {
        false
    }

    /// Whether the scheme refuses every body that is not a JSON object (the `x` preset): only such a source may
    /// answer X's CRC handshake, an HMAC with the source's secret of a caller-chosen token that can never start
    /// with `{`, so never the signature of a body this source accepts.
    fn refuses_non_object_bodies(&self) -> bool {
        false
    }

    /// The handshakes this provider needs answered (a preset's); a source may add others.
    fn handshakes(&self) -> &'static [handshake::Challenge] {
        &[]
    }

    /// For a scheme whose key is fetched from the provider (SNS, PayPal): its fetched-key steps, which the gateway
    /// runs instead of [`Scheme::verify`] (that one can only say the key is not at hand).
    fn fetched_key(&self) -> Option<&dyn fetched::FetchedKeyScheme> {
        None
    }
}

/// Verifies `request` with `scheme` against those of `secrets` that are active at `request.now_ms`. The only way
/// to a [`Provenance::Signature`] proof: it owns a clone of `request.body`, the bytes the scheme just checked.
pub fn verify(
    scheme: &dyn Scheme,
    request: &UnverifiedRequest<'_>,
    secrets: &[Secret],
) -> Result<Verified, VerifyError> {
    let active: Vec<&Secret> = active_secrets(secrets, request.now_ms).collect();
    let matched = scheme.verify(request, &active)?;
    Ok(Verified::signed(matched, request.body.clone()))
}

/// Those of `secrets` active at `now_ms`, in configured order: the ones [`verify`] hands the scheme to try.
pub fn active_secrets(secrets: &[Secret], now_ms: i64) -> impl Iterator<Item = &Secret> {
    secrets.iter().filter(move |secret| secret.is_active_at(now_ms))
}

#[cfg(test)]
mod tests;
