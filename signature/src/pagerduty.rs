//! PagerDuty v3: `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 of the raw body keyed with the
//! subscription's secret as UTF-8 (it looks like base64 but is used verbatim). One `v1` per active secret during a
//! rotation. Event id from `X-Webhook-Id`, type from the body's `event.event_type`.

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, first_hmac_match, hex_of_len, hmac, required_header},
};

const HEADER: &str = "X-PagerDuty-Signature";

#[derive(Debug, Clone, Copy, Default)]
pub struct PagerDuty;

/// Every decodable `v1` signature; `None` when the header has no `v1=` entry at all.
pub fn parse_header(value: &str) -> Option<Vec<Vec<u8>>> {
    let entries: Vec<&str> = value.split(',').filter_map(|item| item.trim().strip_prefix("v1=")).collect();
    (!entries.is_empty()).then(|| entries.into_iter().filter_map(|entry| hex_of_len(entry, 32)).collect())
}

impl Scheme for PagerDuty {
    fn name(&self) -> &'static str {
        "pagerduty"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, "x-pagerduty-signature", HEADER)?;
        let signatures = parse_header(value).ok_or(VerifyError::malformed(HEADER))?;
        first_hmac_match(Algorithm::Sha256, secrets, &[request.body], &signatures)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            vec![FieldSource::header("x-webhook-id"), FieldSource::pointer("/event/id")],
            vec![FieldSource::pointer("/event/event_type")],
        )
    }
}

/// The `X-PagerDuty-Signature` value for `body`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    format!("v1={}", hex::encode(hmac(Algorithm::Sha256, key, &[body])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    const SECRET: &str = "lDQHScfUeXUKaQRNF+8XIiDKZ7XX3itBAYzwU0TARw8lJqRnkKl2iB1anSb0Z+IK";
    const BODY: &[u8] = include_bytes!("testdata/pagerduty_incident.json");
    const VECTOR: &str = "v1=0c0b9495b893a39e70d1fea2fe11fbe0a825f88b9f67846f6cc07dd2bc5476cd";
    const SDK_MISMATCH: &str = "v1=7020c8a7ec668a9b7012bc3dd82e483394b038f4230acc6785efbf2a7d8bcaf5";

    fn run(value: &str, body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&PagerDuty, &headers(&[(HEADER, value)]), body, secrets, 0)
    }

    #[test]
    fn sdk_vectors() {
        assert_eq!(run(VECTOR, BODY, &[("a", SECRET)]), Ok("a".to_owned()));
        assert_eq!(run(SDK_MISMATCH, BODY, &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(sign(SECRET.as_bytes(), BODY), VECTOR);
        let identity = PagerDuty.identity().identify(&headers(&[]), BODY);
        assert_eq!(identity.event_type.as_deref(), Some("incident.priority_updated"));
    }

    #[test]
    fn multiple_signatures_tampered_wrong_secret_rotation() {
        let both = format!("{SDK_MISMATCH}, {VECTOR}");
        assert_eq!(run(&both, BODY, &[("a", SECRET)]), Ok("a".to_owned()));
        assert_eq!(run(VECTOR, &BODY[1..], &[("a", SECRET)]), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, BODY, &[("a", "other")]), Err(VerifyError::Mismatch));
        assert_eq!(run(VECTOR, BODY, &[("n", "other"), ("o", SECRET)]), Ok("o".to_owned()));
    }

    #[test]
    fn malformed_header() {
        for value in ["", "0c0b9495", "v2=00"] {
            assert_eq!(run(value, BODY, &[("a", SECRET)]), Err(VerifyError::malformed(HEADER)), "{value:?}");
        }
        assert_eq!(run("v1=nothex", BODY, &[("a", SECRET)]), Err(VerifyError::Mismatch));
    }
}
