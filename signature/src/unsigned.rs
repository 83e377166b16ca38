//! `scheme = "none"`: no signature at all, for trusted internal senders only. Opt-in per source, takes no secrets,
//! and the gateway logs a warning for it at every (re)load; each request it accepts is attributed to the secret id
//! [`UNSIGNED_SECRET_ID`] so it stands out in metrics and Kafka headers. Event id from `Idempotency-Key`, else the
//! body's SHA-256.

use super::{Coverage, FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError};

/// The secret id an unsigned request is attributed to.
pub const UNSIGNED_SECRET_ID: &str = "none";

#[derive(Debug, Clone, Copy, Default)]
pub struct Unsigned;

impl Scheme for Unsigned {
    fn name(&self) -> &'static str {
        "none"
    }

    fn verify(&self, _request: &UnverifiedRequest<'_>, _secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        Ok(SignatureMatch {
            secret_id: UNSIGNED_SECRET_ID.to_owned(),
            signed_headers: Vec::new(),
            coverage: Coverage::WholeBody,
        })
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::header("idempotency-key"), FieldSource::BodySha256], vec![])
    }

    fn is_verifying(&self) -> bool {
        false
    }
}
