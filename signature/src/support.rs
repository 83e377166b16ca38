//! What the schemes share: header access, HMAC with constant-time comparison, lenient base64, timestamp windows.

use base64::{
    Engine, alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
};
use hmac::{Hmac, Mac};
use http::HeaderMap;
use subtle::ConstantTimeEq;

use super::{Secret, SignatureMatch, VerifyError};

/// Standard-alphabet base64 that accepts padded and unpadded input (unpadded secrets and signatures occur).
pub(crate) const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Standard base64 with padding, as providers send it.
pub(crate) const BASE64: GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The value of header `name` (lowercase) as text; `None` when absent or not visible ASCII.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// The value of a header the scheme cannot do without; `display` names it in the error.
pub(crate) fn required_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    display: &'static str,
) -> Result<&'a str, VerifyError> {
    match headers.get(name) {
        None => Err(VerifyError::missing(display)),
        Some(value) => value.to_str().map_err(|_| VerifyError::malformed(display)),
    }
}

/// The hash under an HMAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    /// The length of the hash's output, and so of an HMAC under it, in bytes.
    pub const fn digest_len(self) -> usize {
        match self {
            Self::Sha1 => 20,
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }
}

/// HMAC of the concatenation of `parts` under `key`.
pub(crate) fn hmac(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        #[allow(clippy::expect_used)] // HMAC accepts keys of any length; this cannot fail.
        let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }
    match algorithm {
        Algorithm::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
        Algorithm::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        Algorithm::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
    }
}

/// Constant-time equality of two byte strings (the length is not secret: every provider's is public).
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// The first secret whose HMAC over `parts` equals any of `candidates`, compared in constant time.
/// Several candidates are how providers sign with more than one secret at once (Stripe, Paddle, Standard Webhooks).
pub(crate) fn first_hmac_match(
    algorithm: Algorithm,
    secrets: &[&Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Result<SignatureMatch, VerifyError> {
    secrets
        .iter()
        .find(|secret| {
            let expected = hmac(algorithm, secret.key(), parts);
            candidates.iter().any(|candidate| equal(&expected, candidate))
        })
        .map(|secret| SignatureMatch::by(secret))
        .ok_or(VerifyError::Mismatch)
}

/// How far a signed timestamp may be from the gateway's clock, in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance {
    past_ms: i64,
    future_ms: i64,
}

impl Tolerance {
    /// The same window in both directions. A symmetric window is our choice for every scheme, including those
    /// whose SDK checks only the past (Stripe, HubSpot): a genuine future timestamp only arises from clock skew,
    /// which the window covers, and accepting any future time would let a captured request replay for ever.
    pub fn seconds(seconds: u64) -> Self {
        let ms = i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        Self { past_ms: ms, future_ms: ms }
    }

    /// Whether a timestamp (ms since the epoch) is fresh at `now_ms`.
    /// When it is not, the error carries the skew (timestamp minus `now_ms`), saturated to `i64`.
    pub(crate) fn check(&self, timestamp_ms: i64, now_ms: i64) -> Result<(), VerifyError> {
        let age_ms = i128::from(now_ms) - i128::from(timestamp_ms);
        let skew_ms = timestamp_ms.saturating_sub(now_ms);
        if age_ms > i128::from(self.past_ms) {
            Err(VerifyError::TimestampStale { skew_ms })
        } else if -age_ms > i128::from(self.future_ms) {
            Err(VerifyError::TimestampFuture { skew_ms })
        } else {
            Ok(())
        }
    }
}

/// Checks a timestamp in seconds when a tolerance is configured.
pub(crate) fn check_seconds(tolerance: Option<Tolerance>, timestamp_s: i64, now_ms: i64) -> Result<(), VerifyError> {
    match tolerance {
        Some(tolerance) => tolerance.check(timestamp_s.saturating_mul(1000), now_ms),
        None => Ok(()),
    }
}

/// Checks a signed timestamp header (decimal Unix seconds) before any signature work: the asymmetric schemes
/// refuse a stale, future or unparsable timestamp without spending a public-key verification on it. The
/// timestamp is part of the signed message, so a request whose timestamp passes here still fails on a mismatch
/// if it was altered.
pub(crate) fn check_timestamp_header(
    tolerance: Tolerance,
    text: &str,
    display: &'static str,
    now_ms: i64,
) -> Result<(), VerifyError> {
    let timestamp_s = parse_unix(text.trim()).ok_or(VerifyError::malformed(display))?;
    tolerance.check(timestamp_s.saturating_mul(1000), now_ms)
}

/// Public keys parsed once, when the source's secrets are decoded, and looked up by their configured bytes on
/// every request: parsing a key (point decompression, DER) costs about as much as a verification.
#[derive(Debug)]
pub(crate) struct ParsedKeys<K> {
    keys: std::sync::RwLock<Vec<(Vec<u8>, K)>>,
}

impl<K> Default for ParsedKeys<K> {
    fn default() -> Self {
        Self { keys: std::sync::RwLock::new(Vec::new()) }
    }
}

impl<K: Clone> ParsedKeys<K> {
    pub(crate) fn remember(&self, bytes: &[u8], key: K) {
        let mut keys = self.keys.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !keys.iter().any(|(known, _)| known == bytes) {
            keys.push((bytes.to_vec(), key));
        }
    }

    /// The key parsed from `bytes`, parsing (and remembering) it now if it was not decoded through this scheme.
    pub(crate) fn get_or_parse(&self, bytes: &[u8], parse: impl FnOnce(&[u8]) -> Option<K>) -> Option<K> {
        {
            let keys = self.keys.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((_, key)) = keys.iter().find(|(known, _)| known == bytes) {
                return Some(key.clone());
            }
        }
        let key = parse(bytes)?;
        self.remember(bytes, key.clone());
        Some(key)
    }
}

/// A decimal Unix timestamp as providers send it: ASCII digits only (no sign, no spaces, no `+`).
pub(crate) fn parse_unix(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// An RFC 3339 UTC timestamp (`2019-11-16T10:11:12.634234626Z`) as ms since the epoch. The trailing `Z` is
/// required, so such a timestamp ends where it ends: a template may put `{body}` right after it.
///
/// The same texts as the runtime's machine form (`hookline_common::time::parse_rfc3339_ms`) that end in `Z`: a `T`
/// between date and time of day (the `time` crate alone takes any byte there), any number of fraction digits
/// truncated to the ms, nothing before 1970. Written here on the `time` crate, so the schemes need nothing of the
/// runtime; the suite's `signature_time` module holds the two to the same answers.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    use time::{OffsetDateTime, format_description::well_known::Rfc3339};
    if !text.ends_with('Z') || text.as_bytes().get(10) != Some(&b'T') {
        return None;
    }
    let nanos = OffsetDateTime::parse(text, &Rfc3339).ok()?.unix_timestamp_nanos();
    if nanos < 0 {
        return None;
    }
    // `time` reads years up to 9999: well inside i64 ms.
    i64::try_from(nanos / 1_000_000).ok()
}

/// Constant-time equality of two secrets of any length: their SHA-256 digests are compared, so neither the
/// position of the first difference nor the configured token's length shows in the time taken.
pub(crate) fn digest_equal(presented: &[u8], expected: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    equal(&Sha256::digest(presented), &Sha256::digest(expected))
}

/// Decodes hex (either case) of exactly `len` bytes.
pub(crate) fn hex_of_len(text: &str, len: usize) -> Option<Vec<u8>> {
    hex::decode(text).ok().filter(|bytes| bytes.len() == len)
}

/// Decodes base64 (padded or not) of exactly `len` bytes.
pub(crate) fn base64_of_len(text: &str, len: usize) -> Option<Vec<u8>> {
    BASE64_LENIENT.decode(text.trim()).ok().filter(|bytes| bytes.len() == len)
}

/// The first string at a JSON pointer in `body`, for the few schemes that must read their signed body after
/// verification (handshakes, Linear's timestamp). Never used to decide authenticity.
pub(crate) fn json_field(body: &[u8], pointer: &str) -> Option<serde_json::Value> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.pointer(pointer).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_is_symmetric_and_inclusive() {
        let tolerance = Tolerance::seconds(300);
        let now = 1_700_000_000_000;
        assert_eq!(tolerance.check(now - 300_000, now), Ok(()));
        assert_eq!(tolerance.check(now + 300_000, now), Ok(()));
        assert_eq!(tolerance.check(now - 300_001, now), Err(VerifyError::TimestampStale { skew_ms: -300_001 }));
        assert_eq!(tolerance.check(now + 300_001, now), Err(VerifyError::TimestampFuture { skew_ms: 300_001 }));
        assert_eq!(tolerance.check(i64::MIN, i64::MAX), Err(VerifyError::TimestampStale { skew_ms: i64::MIN }));
        assert_eq!(tolerance.check(i64::MAX, i64::MIN), Err(VerifyError::TimestampFuture { skew_ms: i64::MAX }));
    }

    #[test]
    fn unix_timestamps_are_digits_only() {
        assert_eq!(parse_unix("1614265330"), Some(1_614_265_330));
        for bad in ["", "+1", "-1", " 1", "1 ", "1e9", "99999999999999999999", "0x10"] {
            assert_eq!(parse_unix(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_reads_utc_times_ending_in_z() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("2019-11-16T10:11:12.634234626Z"), Some(1_573_899_072_634));
        // Digits past the nanosecond are read and dropped; ms are truncated, not rounded.
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00.999999999999Z"), Some(999));
        assert_eq!(parse_rfc3339_ms("2024-02-29T00:00:00Z"), Some(1_709_164_800_000));
        assert_eq!(parse_rfc3339_ms("9999-12-31T23:59:59.999Z"), Some(253_402_300_799_999));
        for bad in [
            "",
            "2019-11-16 10:11:12Z",
            "2019-11-16x10:11:12Z",
            "2019-11-16t10:11:12Z",
            "2019-11-16T10:11:12z",
            "2019-11-16T10:11:12+00:00",
            "2019-11-16T10:11:12.Z",
            "2019-11-16T24:00:00Z",
            "2023-02-29T00:00:00Z",
            "2019-11-16T10:11:12ZZ",
            "12019-11-16T10:11:12Z",
            " 2019-11-16T10:11:12Z",
            "1969-12-31T23:59:59.999Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lenient_base64_accepts_missing_padding() {
        assert_eq!(BASE64_LENIENT.decode("YWI=").ok(), Some(b"ab".to_vec()));
        assert_eq!(BASE64_LENIENT.decode("YWI").ok(), Some(b"ab".to_vec()));
    }
}
