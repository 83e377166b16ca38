//! Stripe: `Stripe-Signature: t=<unix s>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 of `"<t>." + body` keyed with the
//! endpoint secret's UTF-8 bytes, `whsec_` prefix included. During a secret roll Stripe sends one `v1` per active
//! secret; test mode adds a `v0` that is ignored, like any other unknown entry. Event id and type from the body
//! (`id` = `evt_...`, `type`).

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    family::TimestampedList,
    support::{Tolerance, required_header},
};

/// The Stripe SDKs' default tolerance (seconds).
pub const DEFAULT_TOLERANCE_S: u64 = 300;
const HEADER: &str = "Stripe-Signature";
const SIGNED: TimestampedList = TimestampedList {
    header: HEADER,
    entry_separator: ',',
    timestamp_key: "t",
    signature_key: "v1",
    signed_separator: b".",
};

/// Stripe's scheme, with the timestamp window it was configured with.
#[derive(Debug, Clone, Copy)]
pub struct Stripe {
    tolerance: Option<Tolerance>,
}

impl Stripe {
    pub fn new(tolerance: Option<Tolerance>) -> Self {
        Self { tolerance }
    }
}

/// A parsed `Stripe-Signature` header: its timestamp and every `v1` signature that decodes.
#[derive(Debug, PartialEq, Eq)]
pub struct SignatureHeader<'a> {
    pub timestamp: &'a str,
    pub v1: Vec<Vec<u8>>,
}

/// Parses the header; `None` when it has no single valid `t` or no decodable `v1` entry.
pub fn parse_header(value: &str) -> Option<SignatureHeader<'_>> {
    let parsed = SIGNED.parse(value)?;
    (!parsed.signatures.is_empty()).then_some(SignatureHeader { timestamp: parsed.timestamp, v1: parsed.signatures })
}

impl Scheme for Stripe {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        "stripe"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, HEADER, HEADER)?;
        let parsed = SIGNED.parse(value).filter(|parsed| !parsed.signatures.is_empty());
        SIGNED.verify(request, secrets, parsed, self.tolerance)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/id")], vec![FieldSource::pointer("/type")])
    }
}

/// The `Stripe-Signature` value Stripe would send for `body` at `timestamp`.
pub fn sign(key: &[u8], body: &[u8], timestamp: i64) -> String {
    SIGNED.sign(key, body, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{PROVIDERS_MD_BODY as BODY, PROVIDERS_MD_SECRET as SECRET, check, headers};

    const T: i64 = 1_700_000_000;
    const VECTOR: &str = "t=1700000000,v1=3f17948b4d858184fd0a7e1ffa6d419597780d249ce7cb6132cb8569a7c61f43";

    fn stripe() -> Stripe {
        Stripe::new(Some(Tolerance::seconds(DEFAULT_TOLERANCE_S)))
    }

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)], now_s: i64) -> Result<String, VerifyError> {
        check(&stripe(), &headers(&[("Stripe-Signature", value)]), body, secrets, now_s * 1000)
    }

    #[test]
    fn providers_md_vector_verifies_and_sign_reproduces_it() {
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T), Ok("a".to_owned()));
        assert_eq!(sign(SECRET.as_bytes(), BODY, T), VECTOR);
    }

    #[test]
    fn tampered_body_and_wrong_secret_are_mismatches() {
        assert_eq!(
            run(VECTOR, br#"{"id":"evt_2","type":"test.event"}"#, &[("a", SECRET)], T),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(run(VECTOR, BODY, &[("a", "whsec_other")], T), Err(VerifyError::Mismatch));
    }

    #[test]
    fn stale_and_future_timestamps_are_refused_after_the_signature_matched() {
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)], T + 300), Ok("a".to_owned()));
        assert_eq!(
            run(VECTOR, BODY, &[("a", SECRET)], T + 301),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(
            run(VECTOR, BODY, &[("a", SECRET)], T - 301),
            Err(VerifyError::TimestampFuture { skew_ms: 301_000 })
        );
        // A forged request with an old timestamp is a mismatch, not "stale".
        assert_eq!(run(VECTOR, BODY, &[("a", "forger")], T + 10_000), Err(VerifyError::Mismatch));
    }

    #[test]
    fn any_v1_of_several_matches_and_v0_and_unknown_entries_are_ignored() {
        let other = sign(b"whsec_rolled", BODY, T);
        let other_v1 = other.split_once(",v1=").map(|(_, sig)| sig).unwrap_or_default();
        let vector_v1 = VECTOR.split_once(",v1=").map(|(_, sig)| sig).unwrap_or_default();
        let value = format!("t={T}, v0=deadbeef, v1={other_v1}, x=1, v1={vector_v1}, v1=nothex");
        assert_eq!(run(&value, BODY, &[("old", SECRET)], T), Ok("old".to_owned()));
        assert_eq!(run(&value, BODY, &[("new", "whsec_rolled"), ("old", SECRET)], T), Ok("new".to_owned()));
    }

    #[test]
    fn rotation_tries_every_secret_in_order() {
        assert_eq!(run(VECTOR, BODY, &[("new", "whsec_new"), ("old", SECRET)], T), Ok("old".to_owned()));
    }

    #[test]
    fn malformed_headers_are_400_material() {
        for value in ["", "v1=abc", "t=1700000000", "t=abc,v1=3f17", "t=1,t=2,v1=00", "t=-5,v1=3f17948b4d85"] {
            assert_eq!(run(value, BODY, &[("a", SECRET)], T), Err(VerifyError::malformed(HEADER)), "{value:?}");
        }
        assert_eq!(check(&stripe(), &headers(&[]), BODY, &[("a", SECRET)], T), Err(VerifyError::missing(HEADER)));
    }
}
