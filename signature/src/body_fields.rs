//! The body-fields family: the signature and the signed values travel *inside* the body (a JSON pointer or a form
//! field), and the signed string is built from named fields joined by a separator. Mailgun (`timestamp` +
//! `token`, body not covered) and Adyen (eight fields of a notification item) are presets of it.
//!
//! ```toml
//! [sources.body_fields]
//! format = "json"                     # or "form" (application/x-www-form-urlencoded); fields are then names
//! signature = "/signature/signature"  # where the signature is
//! signed_fields = ["/signature/timestamp", "/signature/token"]   # in signing order
//! separator = ""                      # between the signed values; default none
//! timestamp = "/signature/timestamp"  # optional; one of signed_fields; checked against tolerance_s (default 300)
//! timestamp_unit = "seconds"          # or "milliseconds", "rfc3339"
//! event_type = "/eventCode"           # optional; one of signed_fields
//! prefix = ""                         # stripped from the signature before decoding
//! encoding = "hex"                    # or "base64"
//! algorithm = "sha256"                # or "sha1", "sha512"
//! secret_encoding = "utf8"            # or "base64", "hex" (Adyen's keys are hex)
//! missing_fields_as_empty = false     # true: an absent signed field signs as "" (Adyen's rule)
//! single_item = "/notificationItems"  # optional: a JSON array that must hold exactly one element
//! ```
//!
//! What it proves is less than a body signature: only the named fields are the provider's, every other byte of
//! the body could have been changed by whoever captured one request. The raw body still is what reaches Kafka,
//! but the event id is `sha256:<hex>` of the signed string (so a captured request re-sent with other unsigned
//! content is a duplicate of the first), and the event type only a signed field (see [`super::Coverage`]).
//! Reading the fields means parsing the body before the signature matched, so the family runs on the costly
//! verification budget.

use std::borrow::Cow;

use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{
    IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    generic::{Encoding, SecretEncoding, TimestampUnit, decode_with},
    support::{Algorithm, BASE64_LENIENT, Tolerance, first_hmac_match, hex_of_len},
};
use crate::{BuildError, SecretError};

/// Default window (seconds) when a timestamp field is configured.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

/// How the body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    /// Fields are RFC 6901 JSON pointers.
    #[default]
    Json,
    /// Fields are names in an `application/x-www-form-urlencoded` body (the first value of each).
    Form,
}

/// `[sources.body_fields]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BodyFieldsOptions {
    #[serde(default)]
    pub format: BodyFormat,
    pub signature: String,
    pub signed_fields: Vec<String>,
    #[serde(default)]
    pub separator: String,
    pub timestamp: Option<String>,
    #[serde(default)]
    pub timestamp_unit: TimestampUnit,
    pub event_type: Option<String>,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub encoding: Encoding,
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub secret_encoding: SecretEncoding,
    #[serde(default)]
    pub missing_fields_as_empty: bool,
    pub single_item: Option<String>,
}

fn default_algorithm() -> Algorithm {
    Algorithm::Sha256
}

/// A configured body-fields scheme.
#[derive(Debug, Clone)]
pub struct BodyFields {
    name: &'static str,
    options: BodyFieldsOptions,
    tolerance: Option<Tolerance>,
}

/// A body parsed once for the field lookups.
enum Parsed {
    Json(serde_json::Value),
    Form(Vec<(String, String)>),
}

impl Parsed {
    fn get(&self, field: &str) -> Option<String> {
        match self {
            Self::Json(value) => match value.pointer(field)? {
                serde_json::Value::String(text) => Some(text.clone()),
                serde_json::Value::Number(number) => Some(number.to_string()),
                serde_json::Value::Bool(flag) => Some(flag.to_string()),
                _ => None,
            },
            Self::Form(pairs) => pairs.iter().find(|(key, _)| key == field).map(|(_, value)| value.clone()),
        }
    }
}

impl BodyFields {
    pub fn new(options: &BodyFieldsOptions, tolerance: Option<Tolerance>) -> Result<Self, BuildError> {
        if options.signed_fields.is_empty() {
            return Err("body_fields.signed_fields must name at least one field".into());
        }
        let fields = options.signed_fields.iter().chain([&options.signature]).chain(&options.timestamp);
        for field in fields.chain(&options.event_type).chain(&options.single_item) {
            if options.format == BodyFormat::Json && !field.starts_with('/') {
                return Err(format!("body_fields: JSON pointer `{field}` must start with `/`").into());
            }
        }
        if options.signed_fields.contains(&options.signature) {
            return Err("body_fields.signature cannot also be a signed field".into());
        }
        for (key, value) in [("timestamp", &options.timestamp), ("event_type", &options.event_type)] {
            if let Some(field) = value.as_ref().filter(|field| !options.signed_fields.contains(field)) {
                return Err(format!(
                    "body_fields.{key} `{field}` is not one of signed_fields: an unsigned value proves nothing"
                )
                .into());
            }
        }
        if options.single_item.is_some() && options.format != BodyFormat::Json {
            return Err("body_fields.single_item needs format = \"json\"".into());
        }
        if tolerance.is_some() && options.timestamp.is_none() {
            return Err("tolerance_s needs body_fields.timestamp".into());
        }
        let tolerance =
            options.timestamp.as_ref().map(|_| tolerance.unwrap_or(Tolerance::seconds(DEFAULT_TOLERANCE_S)));
        Ok(Self { name: "body_fields", options: options.clone(), tolerance })
    }

    fn malformed(&self, field: &str) -> VerifyError {
        VerifyError::MalformedSignature(Cow::Owned(format!("body {field}")))
    }

    fn parse(&self, body: &[u8]) -> Result<Parsed, VerifyError> {
        match self.options.format {
            BodyFormat::Json => {
                let value: serde_json::Value = serde_json::from_slice(body)
                    .map_err(|_| VerifyError::UnsupportedContentType("application/json"))?;
                if let Some(array) = &self.options.single_item {
                    let items = value.pointer(array).and_then(serde_json::Value::as_array);
                    if items.is_none_or(|items| items.len() != 1) {
                        return Err(self.malformed(array));
                    }
                }
                Ok(Parsed::Json(value))
            }
            BodyFormat::Form => Ok(Parsed::Form(form_urlencoded::parse(body).into_owned().collect())),
        }
    }

    /// The signed string: the signed fields' values joined by the separator.
    fn signed_string(&self, parsed: &Parsed) -> Result<Vec<u8>, VerifyError> {
        let mut values = Vec::with_capacity(self.options.signed_fields.len());
        for field in &self.options.signed_fields {
            match parsed.get(field) {
                Some(value) => values.push(value),
                None if self.options.missing_fields_as_empty => values.push(String::new()),
                None => return Err(VerifyError::MissingSignature(Cow::Owned(format!("body {field}")))),
            }
        }
        Ok(values.join(&self.options.separator).into_bytes())
    }

    fn decode(&self, text: &str) -> Option<Vec<u8>> {
        let encoded = text.trim().strip_prefix(self.options.prefix.as_str())?;
        let len = self.options.algorithm.digest_len();
        match self.options.encoding {
            Encoding::Hex => hex_of_len(encoded, len),
            Encoding::Base64 => BASE64_LENIENT.decode(encoded).ok().filter(|bytes| bytes.len() == len),
        }
    }
}

impl Scheme for BodyFields {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        decode_with(self.options.secret_encoding, raw)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let parsed = self.parse(request.body)?;
        let signature_field = &self.options.signature;
        let signature = parsed
            .get(signature_field)
            .ok_or_else(|| VerifyError::MissingSignature(Cow::Owned(format!("body {signature_field}"))))?;
        let signature = self.decode(&signature).ok_or_else(|| self.malformed(signature_field))?;
        let signed = self.signed_string(&parsed)?;
        let timestamp_ms = match &self.options.timestamp {
            Some(field) => {
                let text = parsed.get(field).unwrap_or_default();
                Some(self.options.timestamp_unit.to_ms(&text).ok_or_else(|| self.malformed(field))?)
            }
            None => None,
        };
        let matched = first_hmac_match(self.options.algorithm, secrets, &[&signed], &[signature])?;
        if let (Some(tolerance), Some(timestamp_ms)) = (self.tolerance, timestamp_ms) {
            tolerance.check(timestamp_ms, request.now_ms)?;
        }
        let event_id = format!("sha256:{}", hex::encode(Sha256::digest(&signed)));
        let event_type = self.options.event_type.as_ref().and_then(|field| parsed.get(field));
        Ok(matched.of_fields(event_id, event_type))
    }

    /// The proof carries the identity (see [`super::Coverage::SignedFields`]); nothing else is read.
    fn identity(&self) -> IdentityRule {
        IdentityRule::default()
    }

    fn covers_whole_body(&self) -> bool {
        false
    }

    fn is_costly(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Coverage,
        support::hmac,
        tests::{check, headers},
        verify,
    };

    fn options(text: &str) -> BodyFieldsOptions {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn form_fields_and_the_identity_come_from_signed_values_only() {
        let scheme = BodyFields::new(
            &options("format = \"form\"\nsignature = \"sig\"\nsigned_fields = [\"ts\", \"nonce\"]\nseparator = \":\"\ntimestamp = \"ts\"\n"),
            None,
        )
        .unwrap();
        let signature = hex::encode(hmac(Algorithm::Sha256, b"k", &[b"1700000000:n1"]));
        let body = format!("ts=1700000000&nonce=n1&sig={signature}&other=x");
        let secrets = [Secret::new("a", b"k".to_vec())];
        let empty = headers(&[]);
        let bytes = bytes::Bytes::from(body.clone());
        let proof = verify(&scheme, &UnverifiedRequest::new(&empty, &bytes, 1_700_000_000_000), &secrets).unwrap();
        let expected_id = format!("sha256:{}", hex::encode(Sha256::digest(b"1700000000:n1")));
        assert_eq!(proof.coverage(), &Coverage::SignedFields { event_id: expected_id, event_type: None });
        let changed_unsigned = body.replace("other=x", "other=y");
        assert!(check(&scheme, &empty, changed_unsigned.as_bytes(), &[("a", "k")], 1_700_000_000_000).is_ok());
        let changed_signed = body.replace("nonce=n1", "nonce=n2");
        assert_eq!(
            check(&scheme, &empty, changed_signed.as_bytes(), &[("a", "k")], 1_700_000_000_000),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(&scheme, &empty, body.as_bytes(), &[("a", "k")], 1_700_000_301_000),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
    }

    #[test]
    fn options_are_validated() {
        assert!(BodyFields::new(&options("signature = \"/s\"\nsigned_fields = []\n"), None).is_err());
        assert!(BodyFields::new(&options("signature = \"s\"\nsigned_fields = [\"/a\"]\n"), None).is_err());
        let unsigned_time = options("signature = \"/s\"\nsigned_fields = [\"/a\"]\ntimestamp = \"/t\"\n");
        assert!(BodyFields::new(&unsigned_time, None).unwrap_err().to_string().contains("not one of signed_fields"));
        assert!(
            BodyFields::new(&options("signature = \"/s\"\nsigned_fields = [\"/a\"]\n"), Some(Tolerance::seconds(1)))
                .is_err()
        );
    }

    #[test]
    fn a_body_that_is_not_json_or_holds_several_items_is_refused() {
        let scheme = BodyFields::new(
            &options("signature = \"/items/0/s\"\nsigned_fields = [\"/items/0/a\"]\nsingle_item = \"/items\"\n"),
            None,
        )
        .unwrap();
        let empty = headers(&[]);
        assert_eq!(
            check(&scheme, &empty, b"not json", &[("a", "k")], 0),
            Err(VerifyError::UnsupportedContentType("application/json"))
        );
        assert_eq!(
            check(&scheme, &empty, br#"{"items":[{"a":"1","s":"00"},{"a":"2","s":"00"}]}"#, &[("a", "k")], 0),
            Err(VerifyError::MalformedSignature("body /items".into()))
        );
        assert_eq!(
            check(&scheme, &empty, br#"{"items":[{"a":"1"}]}"#, &[("a", "k")], 0),
            Err(VerifyError::MissingSignature("body /items/0/s".into()))
        );
    }
}
