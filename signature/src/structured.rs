//! The structured-header family, so a Stripe-like provider is configuration: one header holding key/value entries,
//! a timestamp entry and one or more signature entries (several during a secret rotation), the HMAC over a
//! template of the timestamp and the body. Calendly (`t=<s>,v1=<hex>`), WorkOS (`t=<ms>, v1=<hex>`), Mux,
//! ElevenLabs (`t=,v0=`), Buildkite (`timestamp=,signature=`) and CircleCI (`v1=`, no timestamp) are presets of it.
//!
//! ```toml
//! [sources.structured]
//! header = "Calendly-Webhook-Signature"
//! entry_separator = ","               # between entries; default ","; spaces around entries are ignored
//! pair_separator = "="                # between an entry's key and value; default "="
//! timestamp_key = "t"                 # omit for a provider that signs no time
//! signature_key = "v1"                # every entry with this key is a candidate (rotation); default "v1"
//! signed_content = "{timestamp}.{body}"   # default "{timestamp}.{body}", or "{body}" without a timestamp_key
//! timestamp_unit = "seconds"          # or "milliseconds", "rfc3339"
//! encoding = "hex"                    # or "base64"
//! algorithm = "sha256"                # or "sha1", "sha512"
//! secret_encoding = "utf8"            # or "base64", "hex"
//! ```
//!
//! Unknown entries are ignored (Stripe-style test entries such as `v0=`); exactly one timestamp entry is required;
//! signature entries that do not decode are skipped, and a header with none at all is malformed.

use std::borrow::Cow;

use base64::Engine;
use serde::Deserialize;

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    generic::{Encoding, Part, SecretEncoding, TimestampUnit, parse_template_for},
    support::{Algorithm, BASE64_LENIENT, Tolerance, first_hmac_match, hex_of_len},
};
use crate::{BuildError, SecretError};

/// Default window (seconds) when a timestamp entry is configured.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

/// `[sources.structured]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StructuredOptions {
    pub header: String,
    #[serde(default = "default_entry_separator")]
    pub entry_separator: String,
    #[serde(default = "default_pair_separator")]
    pub pair_separator: String,
    pub timestamp_key: Option<String>,
    #[serde(default = "default_signature_key")]
    pub signature_key: String,
    pub signed_content: Option<String>,
    #[serde(default)]
    pub timestamp_unit: TimestampUnit,
    #[serde(default)]
    pub encoding: Encoding,
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub secret_encoding: SecretEncoding,
}

fn default_entry_separator() -> String {
    ",".to_owned()
}

fn default_pair_separator() -> String {
    "=".to_owned()
}

fn default_signature_key() -> String {
    "v1".to_owned()
}

fn default_algorithm() -> Algorithm {
    Algorithm::Sha256
}

impl StructuredOptions {
    /// Options for `header` with the defaults: `t=` (Unix seconds) and `v1=` hex HMAC-SHA256 of `"<t>.<body>"`.
    pub fn new(header: &str) -> Self {
        Self {
            header: header.to_owned(),
            entry_separator: default_entry_separator(),
            pair_separator: default_pair_separator(),
            timestamp_key: Some("t".to_owned()),
            signature_key: default_signature_key(),
            signed_content: None,
            timestamp_unit: TimestampUnit::Seconds,
            encoding: Encoding::Hex,
            algorithm: Algorithm::Sha256,
            secret_encoding: SecretEncoding::Utf8,
        }
    }
}

/// A configured structured-header scheme.
#[derive(Debug, Clone)]
pub struct Structured {
    name: &'static str,
    header: http::HeaderName,
    options: StructuredOptions,
    template: Vec<Part>,
    tolerance: Option<Tolerance>,
}

impl Structured {
    /// Validates `options`; `tolerance` overrides [`DEFAULT_TOLERANCE_S`] (refused without a timestamp key).
    pub fn new(options: &StructuredOptions, tolerance: Option<Tolerance>) -> Result<Self, BuildError> {
        let header = http::HeaderName::from_bytes(options.header.as_bytes())
            .map_err(|_| format!("structured.header `{}` is not a valid header name", options.header))?;
        if options.entry_separator.is_empty() || options.pair_separator.is_empty() {
            return Err("structured.entry_separator and structured.pair_separator must not be empty".into());
        }
        if options.entry_separator.contains(&options.pair_separator)
            || options.pair_separator.contains(&options.entry_separator)
        {
            return Err("structured.entry_separator and structured.pair_separator must differ".into());
        }
        let default_template = if options.timestamp_key.is_some() { "{timestamp}.{body}" } else { "{body}" };
        let text = options.signed_content.as_deref().unwrap_or(default_template);
        let template = parse_template_for(text, options.timestamp_unit)?;
        if template.contains(&Part::Id) {
            return Err(format!("structured.signed_content `{text}`: {{id}} is not available in this family").into());
        }
        match (&options.timestamp_key, template.contains(&Part::Timestamp)) {
            (Some(_), false) => {
                return Err("structured.timestamp_key is set but structured.signed_content has no {timestamp}: \
                            an unsigned timestamp cannot stop a replay"
                    .into());
            }
            (None, true) => {
                return Err("structured.signed_content uses {timestamp} but structured.timestamp_key is not set".into());
            }
            _ => {}
        }
        if tolerance.is_some() && options.timestamp_key.is_none() {
            return Err("tolerance_s needs structured.timestamp_key".into());
        }
        let tolerance =
            options.timestamp_key.as_ref().map(|_| tolerance.unwrap_or(Tolerance::seconds(DEFAULT_TOLERANCE_S)));
        Ok(Self { name: "structured", header, options: options.clone(), template, tolerance })
    }

    fn malformed(&self) -> VerifyError {
        VerifyError::MalformedSignature(Cow::Owned(self.header.as_str().to_owned()))
    }

    fn decode(&self, text: &str) -> Option<Vec<u8>> {
        let len = self.options.algorithm.digest_len();
        match self.options.encoding {
            Encoding::Hex => hex_of_len(text, len),
            Encoding::Base64 => BASE64_LENIENT.decode(text).ok().filter(|bytes| bytes.len() == len),
        }
    }

    /// The single timestamp entry (if the scheme has a key for it) and every decodable signature entry.
    fn parse<'a>(&self, value: &'a str) -> Result<(Option<&'a str>, Vec<Vec<u8>>), VerifyError> {
        let mut timestamp = None;
        let mut signatures = Vec::new();
        let mut any_signature_entry = false;
        for entry in value.split(self.options.entry_separator.as_str()) {
            let Some((key, entry_value)) = entry.trim().split_once(self.options.pair_separator.as_str()) else {
                continue;
            };
            let (key, entry_value) = (key.trim(), entry_value.trim());
            if self.options.timestamp_key.as_deref() == Some(key) {
                if timestamp.replace(entry_value).is_some() {
                    return Err(self.malformed());
                }
            } else if key == self.options.signature_key {
                any_signature_entry = true;
                signatures.extend(self.decode(entry_value));
            }
        }
        if !any_signature_entry || (self.options.timestamp_key.is_some() && timestamp.is_none()) {
            return Err(self.malformed());
        }
        Ok((timestamp, signatures))
    }

    /// The header's value for `body` at `timestamp` (written in the configured unit), for tests and demos.
    pub fn sign(&self, key: &[u8], body: &[u8], timestamp: &str) -> String {
        let parts = self.parts(timestamp, body);
        let mac = super::support::hmac(self.options.algorithm, key, &parts);
        let encoded = match self.options.encoding {
            Encoding::Hex => hex::encode(mac),
            Encoding::Base64 => super::support::BASE64.encode(mac),
        };
        let signature = format!("{}{}{encoded}", self.options.signature_key, self.options.pair_separator);
        match &self.options.timestamp_key {
            Some(key) => {
                format!("{key}{}{timestamp}{}{signature}", self.options.pair_separator, self.options.entry_separator)
            }
            None => signature,
        }
    }

    fn parts<'a>(&'a self, timestamp: &'a str, body: &'a [u8]) -> Vec<&'a [u8]> {
        self.template
            .iter()
            .map(|part| match part {
                Part::Literal(bytes) => bytes.as_slice(),
                Part::Timestamp => timestamp.as_bytes(),
                Part::Body => body,
                Part::Id => &[],
            })
            .collect()
    }
}

impl Scheme for Structured {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        super::generic::decode_with(self.options.secret_encoding, raw)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = match request.headers.get(&self.header) {
            None => return Err(VerifyError::MissingSignature(Cow::Owned(self.header.as_str().to_owned()))),
            Some(value) => value.to_str().map_err(|_| self.malformed())?,
        };
        let (timestamp, signatures) = self.parse(value)?;
        let timestamp_ms = match timestamp {
            Some(text) => Some(self.options.timestamp_unit.to_ms(text).ok_or_else(|| self.malformed())?),
            None => None,
        };
        let parts = self.parts(timestamp.unwrap_or_default(), request.body);
        let matched = first_hmac_match(self.options.algorithm, secrets, &parts, &signatures)?;
        if let (Some(tolerance), Some(timestamp_ms)) = (self.tolerance, timestamp_ms) {
            tolerance.check(timestamp_ms, request.now_ms)?;
        }
        Ok(matched)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        support::hmac,
        tests::{check, headers},
    };

    fn workos_like() -> Structured {
        let options =
            StructuredOptions { timestamp_unit: TimestampUnit::Milliseconds, ..StructuredOptions::new("X-Sig") };
        Structured::new(&options, None).unwrap()
    }

    #[test]
    fn entries_with_spaces_and_several_signatures_rotate() {
        let scheme = workos_like();
        let body = br#"{"id":"evt_1"}"#;
        let genuine = hex::encode(hmac(Algorithm::Sha256, b"new", &[b"1700000000000", b".", body]));
        let value = format!("t=1700000000000, v0=zz, v1={}, v1={genuine}", "ab".repeat(32));
        let now = 1_700_000_000_000;
        assert_eq!(
            check(&scheme, &headers(&[("x-sig", &value)]), body, &[("o", "old"), ("n", "new")], now),
            Ok("n".into())
        );
        assert_eq!(
            check(&scheme, &headers(&[("x-sig", &value)]), body, &[("n", "new")], now + 301_000),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(
            check(&scheme, &headers(&[("x-sig", &value)]), b"{}", &[("n", "new")], now),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn two_timestamps_or_no_signature_entry_are_malformed() {
        let scheme = workos_like();
        for bad in ["t=1,t=2,v1=00", "t=1", "v1=00", "", "t=abc,v1=00"] {
            assert_eq!(
                check(&scheme, &headers(&[("x-sig", bad)]), b"b", &[("a", "k")], 0),
                Err(VerifyError::MalformedSignature("x-sig".into())),
                "{bad}"
            );
        }
        assert_eq!(
            check(&scheme, &headers(&[]), b"b", &[("a", "k")], 0),
            Err(VerifyError::MissingSignature("x-sig".into()))
        );
    }

    #[test]
    fn options_are_validated() {
        let untimed = StructuredOptions { timestamp_key: None, ..StructuredOptions::new("x") };
        assert!(Structured::new(&untimed, None).is_ok());
        assert!(Structured::new(&untimed, Some(Tolerance::seconds(5))).is_err());
        let unsigned_time = StructuredOptions { signed_content: Some("{body}".into()), ..StructuredOptions::new("x") };
        assert!(Structured::new(&unsigned_time, None).unwrap_err().to_string().contains("unsigned timestamp"));
        let same = StructuredOptions { entry_separator: "=".into(), ..StructuredOptions::new("x") };
        assert!(Structured::new(&same, None).is_err());
        let with_id =
            StructuredOptions { signed_content: Some("{id}.{timestamp}.{body}".into()), ..StructuredOptions::new("x") };
        assert!(Structured::new(&with_id, None).is_err());
    }

    #[test]
    fn sign_round_trips() {
        let scheme = workos_like();
        let value = scheme.sign(b"k", b"body", "1700000000000");
        assert_eq!(
            check(&scheme, &headers(&[("x-sig", &value)]), b"body", &[("a", "k")], 1_700_000_000_000),
            Ok("a".into())
        );
    }
}
