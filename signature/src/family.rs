//! Signature constructions that several providers share, each written once and parametrised by what differs
//! between the providers (header names, prefix, encoding, hash, separators), so that a provider's module keeps
//! only what is its own: names, identity rule, handshake, documentation.
//!
//! - [`BodyHmac`]: an HMAC of the raw body in one header, hex or base64, with an optional prefix (GitHub,
//!   Shopify, WooCommerce, Typeform, Intercom, Linear); `body_hmac_provider!` declares a provider that is
//!   nothing more.
//! - [`VersionedHmac`]: `v0=<hex>` over `"v0:<timestamp>:" + body` (Slack, Zoom).
//! - [`TimestampedList`]: a `t=<unix s>,v1=<hex>,...` header over `"<t><separator>" + body` (Stripe, Paddle).
//! - [`TimestampedPublicKey`]: a public-key signature over `timestamp header + [separator] + body`, freshness
//!   first (Discord, SendGrid, Telnyx).

use base64::Engine;

use super::{
    Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    generic::Encoding,
    support::{
        Algorithm, BASE64, BASE64_LENIENT, ParsedKeys, Tolerance, check_seconds, check_timestamp_header,
        first_hmac_match, hex_of_len, hmac, parse_unix, required_header,
    },
};
use crate::SecretError;

/// An HMAC of the raw body, written `<prefix><hex or base64>` in one header. The header is looked up
/// case-insensitively and named as the provider spells it in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyHmac {
    name: &'static str,
    header: &'static str,
    prefix: &'static str,
    encoding: Encoding,
    algorithm: Algorithm,
}

impl BodyHmac {
    /// Scheme `name`: hex HMAC-SHA256 in `header`, no prefix.
    pub const fn hex(name: &'static str, header: &'static str) -> Self {
        Self { name, header, prefix: "", encoding: Encoding::Hex, algorithm: Algorithm::Sha256 }
    }

    /// Scheme `name`: base64 HMAC-SHA256 in `header`, no prefix.
    pub const fn base64(name: &'static str, header: &'static str) -> Self {
        Self { encoding: Encoding::Base64, ..Self::hex(name, header) }
    }

    /// The signature follows `prefix` (`sha256=`), which must be present.
    pub const fn prefixed(self, prefix: &'static str) -> Self {
        Self { prefix, ..self }
    }

    /// The HMAC's hash is `algorithm` instead of SHA-256.
    pub const fn hashed_with(self, algorithm: Algorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// The scheme's config name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The first of `secrets` whose HMAC of the body is the header's signature (constant-time comparison).
    pub(crate) fn verify(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
    ) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, self.header, self.header)?;
        let signature = value
            .trim()
            .strip_prefix(self.prefix)
            .and_then(|encoded| self.decode(encoded))
            .ok_or(VerifyError::malformed(self.header))?;
        first_hmac_match(self.algorithm, secrets, &[request.body.as_ref()], &[signature])
    }

    /// The header value the provider sends for `body` signed with `key`.
    pub fn sign(&self, key: &[u8], body: &[u8]) -> String {
        let mac = hmac(self.algorithm, key, &[body]);
        let encoded = match self.encoding {
            Encoding::Hex => hex::encode(mac),
            Encoding::Base64 => BASE64.encode(mac),
        };
        format!("{}{encoded}", self.prefix)
    }

    fn decode(&self, encoded: &str) -> Option<Vec<u8>> {
        let len = self.algorithm.digest_len();
        match self.encoding {
            Encoding::Hex => hex_of_len(encoded, len),
            Encoding::Base64 => BASE64_LENIENT.decode(encoded).ok().filter(|bytes| bytes.len() == len),
        }
    }
}

/// Declares a provider whose whole scheme is a [`BodyHmac`]: a unit struct (with the attributes and doc comment
/// given) whose [`Scheme`](super::Scheme) checks that signature and reads the event's identity with the rule
/// given, and the module's `sign` function. Its `SIGNATURE` constant is the one place the provider's header and
/// encoding are written.
macro_rules! body_hmac_provider {
    ($(#[$attribute:meta])* $provider:ident = $signature:expr, identity = $identity:expr $(,)?) => {
        $(#[$attribute])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $provider;

        impl $provider {
            /// This provider's signature: scheme name, header, prefix, encoding and hash.
            pub const SIGNATURE: $crate::family::BodyHmac = $signature;
        }

        impl $crate::Scheme for $provider {
            fn name(&self) -> &'static str {
                Self::SIGNATURE.name()
            }

            fn verify(
                &self,
                request: &$crate::UnverifiedRequest<'_>,
                secrets: &[&$crate::Secret],
            ) -> Result<$crate::SignatureMatch, $crate::VerifyError> {
                Self::SIGNATURE.verify(request, secrets)
            }

            fn identity(&self) -> $crate::IdentityRule {
                $identity
            }
        }

        /// The signature header's value for `body` under `key`, as the provider would send it: for tests, demos
        /// and the load generator.
        pub fn sign(key: &[u8], body: &[u8]) -> String {
            $provider::SIGNATURE.sign(key, body)
        }
    };
}
pub(crate) use body_hmac_provider;

/// Slack's construction, which Zoom copied byte for byte: `<signature header>: v0=<hex>`, HMAC-SHA256 over
/// `"v0:" + <timestamp header> + ":" + body`, the timestamp in Unix seconds; signature first, freshness second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionedHmac {
    /// The signature header, as the provider spells it.
    pub signature: &'static str,
    /// The timestamp header, as the provider spells it.
    pub timestamp: &'static str,
}

impl VersionedHmac {
    pub(crate) fn verify(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        tolerance: Option<Tolerance>,
    ) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, self.signature, self.signature)?;
        let timestamp_text = required_header(request.headers, self.timestamp, self.timestamp)?;
        let signature = value
            .strip_prefix("v0=")
            .and_then(|digest| hex_of_len(digest, 32))
            .ok_or(VerifyError::malformed(self.signature))?;
        let timestamp = parse_unix(timestamp_text).ok_or(VerifyError::malformed(self.timestamp))?;
        let parts: [&[u8]; 4] = [b"v0:", timestamp_text.as_bytes(), b":", request.body];
        let matched = first_hmac_match(Algorithm::Sha256, secrets, &parts, &[signature])?;
        check_seconds(tolerance, timestamp, request.now_ms)?;
        Ok(matched)
    }

    /// The signature header's value for `body` sent at `timestamp` (Unix seconds).
    pub fn sign(key: &[u8], body: &[u8], timestamp: i64) -> String {
        let t = timestamp.to_string();
        format!("v0={}", hex::encode(hmac(Algorithm::Sha256, key, &[b"v0:", t.as_bytes(), b":", body])))
    }
}

/// Stripe's header shape, which Paddle shares with other letters: `t=<unix s>,v1=<hex>[,v1=<hex>...]` (Paddle:
/// `ts=...;h1=...`), one signature entry per active secret during a rotation, HMAC-SHA256 over
/// `"<t>" + separator + body`. Unknown entries are ignored, and so are signature entries that do not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampedList {
    /// The header, as the provider spells it.
    pub header: &'static str,
    /// Between entries: `,` or `;`.
    pub entry_separator: char,
    /// The timestamp entry's key (`t`, `ts`).
    pub timestamp_key: &'static str,
    /// The signature entries' key (`v1`, `h1`).
    pub signature_key: &'static str,
    /// Between the timestamp and the body in the signed content: `.` or `:`.
    pub signed_separator: &'static [u8],
}

/// A parsed [`TimestampedList`] header.
#[derive(Debug, PartialEq, Eq)]
pub struct TimestampedSignatures<'a> {
    /// The single timestamp entry, digits only.
    pub timestamp: &'a str,
    /// Every signature entry that decodes, in header order.
    pub signatures: Vec<Vec<u8>>,
    /// Whether the header had any signature entry, decodable or not.
    pub any_signature_entry: bool,
}

impl TimestampedList {
    /// The timestamp and signatures of `value`; `None` without exactly one valid timestamp.
    pub fn parse<'a>(&self, value: &'a str) -> Option<TimestampedSignatures<'a>> {
        let mut timestamp = None;
        let mut signatures = Vec::new();
        let mut any_signature_entry = false;
        for item in value.split(self.entry_separator) {
            let Some((key, entry)) = item.trim().split_once('=') else { continue };
            if key == self.timestamp_key {
                if timestamp.replace(entry).is_some() {
                    return None;
                }
            } else if key == self.signature_key {
                any_signature_entry = true;
                signatures.extend(hex_of_len(entry, 32));
            }
        }
        let timestamp = timestamp.filter(|t| parse_unix(t).is_some())?;
        Some(TimestampedSignatures { timestamp, signatures, any_signature_entry })
    }

    /// Signature first, freshness second. `parsed` is this header's value as the provider's own rule accepts it.
    pub(crate) fn verify(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        parsed: Option<TimestampedSignatures<'_>>,
        tolerance: Option<Tolerance>,
    ) -> Result<SignatureMatch, VerifyError> {
        let parsed = parsed.ok_or(VerifyError::malformed(self.header))?;
        let parts: [&[u8]; 3] = [parsed.timestamp.as_bytes(), self.signed_separator, request.body];
        let matched = first_hmac_match(Algorithm::Sha256, secrets, &parts, &parsed.signatures)?;
        let timestamp = parse_unix(parsed.timestamp).ok_or(VerifyError::malformed(self.header))?;
        check_seconds(tolerance, timestamp, request.now_ms)?;
        Ok(matched)
    }

    /// The header's value for `body` at `timestamp` (Unix seconds), with one signature.
    pub fn sign(&self, key: &[u8], body: &[u8], timestamp: i64) -> String {
        let t = timestamp.to_string();
        let mac = hmac(Algorithm::Sha256, key, &[t.as_bytes(), self.signed_separator, body]);
        format!("{}={t}{}{}={}", self.timestamp_key, self.entry_separator, self.signature_key, hex::encode(mac))
    }
}

/// A public-key signature over `<timestamp header> + body` (Discord: Ed25519, SendGrid: ECDSA P-256). The
/// timestamp is judged before any signature work, so a stale, future or unparsable one costs no public-key
/// operation; keys are parsed once and looked up by their configured bytes.
#[derive(Debug)]
pub(crate) struct TimestampedPublicKey<K> {
    /// The signature header, as the provider spells it.
    pub signature: &'static str,
    /// The timestamp header, as the provider spells it.
    pub timestamp: &'static str,
    pub tolerance: Tolerance,
    pub keys: ParsedKeys<K>,
    /// Between the timestamp and the body in the signed message: none for Discord and SendGrid, `|` for Telnyx.
    pub separator: &'static [u8],
}

impl<K: Clone> TimestampedPublicKey<K> {
    pub(crate) fn new(signature: &'static str, timestamp: &'static str, tolerance: Tolerance) -> Self {
        Self { signature, timestamp, tolerance, keys: ParsedKeys::default(), separator: b"" }
    }

    /// The signed message puts `separator` between the timestamp and the body.
    pub(crate) fn separated_by(self, separator: &'static [u8]) -> Self {
        Self { separator, ..self }
    }

    /// The first of `secrets` whose key (parsed by `parse_key`) accepts the signature, which `parse_signature`
    /// reads from the header's text; `accepts` is the scheme's verification.
    pub(crate) fn verify<S>(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        parse_key: impl Fn(&[u8]) -> Option<K>,
        parse_signature: impl FnOnce(&str) -> Option<S>,
        accepts: impl Fn(&K, &[u8], &S) -> bool,
    ) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, self.signature, self.signature)?;
        let timestamp = required_header(request.headers, self.timestamp, self.timestamp)?;
        check_timestamp_header(self.tolerance, timestamp, self.timestamp, request.now_ms)?;
        let signature = parse_signature(value).ok_or(VerifyError::malformed(self.signature))?;
        let message = [timestamp.as_bytes(), self.separator, request.body].concat();
        secrets
            .iter()
            .find(|secret| {
                self.keys.get_or_parse(secret.key(), &parse_key).is_some_and(|key| accepts(&key, &message, &signature))
            })
            .map(|secret| SignatureMatch::by(secret))
            .ok_or(VerifyError::Mismatch)
    }
}

/// Ed25519 over `timestamp [separator] body` (Discord, Telnyx): keys and signatures in the provider's text encoding
/// (`decode(text, length)`: hex for Discord, base64 for Telnyx), verified strictly (no malleable or small-order
/// signatures).
impl TimestampedPublicKey<ed25519_dalek::VerifyingKey> {
    /// A configured public key (32 bytes in the provider's encoding; `expected` says how it must look), parsed and
    /// remembered; its bytes.
    pub(crate) fn decode_ed25519_key(
        &self,
        raw: &[u8],
        decode: fn(&str, usize) -> Option<Vec<u8>>,
        expected: &'static str,
    ) -> Result<Vec<u8>, SecretError> {
        let text = std::str::from_utf8(raw).map_err(|_| SecretError::NotUtf8 { what: "the public key" })?;
        let bytes = decode(text.trim(), 32).ok_or(expected)?;
        let key = ed25519_key(&bytes).ok_or("the public key is not a valid Ed25519 point")?;
        self.keys.remember(&bytes, key);
        Ok(bytes)
    }

    /// The first of `secrets` whose key verifies the signature (64 bytes in the provider's encoding).
    pub(crate) fn verify_ed25519(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        decode: fn(&str, usize) -> Option<Vec<u8>>,
    ) -> Result<SignatureMatch, VerifyError> {
        self.verify(
            request,
            secrets,
            ed25519_key,
            |value| ed25519_dalek::Signature::from_slice(&decode(value, 64)?).ok(),
            |key, message, signature| key.verify_strict(message, signature).is_ok(),
        )
    }
}

fn ed25519_key(bytes: &[u8]) -> Option<ed25519_dalek::VerifyingKey> {
    ed25519_dalek::VerifyingKey::from_bytes(bytes.try_into().ok()?).ok()
}
