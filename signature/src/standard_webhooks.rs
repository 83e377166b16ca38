//! Standard Webhooks, and the providers that send it under their own header names: Svix (and Clerk and Resend,
//! which deliver through Svix) and GitLab with a signing token.
//!
//! Headers `<p>-id`, `<p>-timestamp` (Unix seconds), `<p>-signature: v1,<base64> [v1,<base64> ...]`; HMAC-SHA256
//! of `"<id>.<timestamp>." + body`, keyed with the base64-decoded secret minus its `whsec_` prefix (decoded
//! leniently: unpadded secrets occur). Several signatures are how a rotation looks; entries of other versions
//! (`v1a,` Ed25519) are ignored. Timestamps within 5 minutes either way.

use std::borrow::Cow;

use base64::Engine;

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, BASE64_LENIENT, Tolerance, check_seconds, first_hmac_match, hmac, parse_unix},
};
use crate::SecretError;

/// The three header names of one spelling of the scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderNames {
    pub id: &'static str,
    pub timestamp: &'static str,
    pub signature: &'static str,
}

pub const STANDARD: HeaderNames =
    HeaderNames { id: "webhook-id", timestamp: "webhook-timestamp", signature: "webhook-signature" };
pub const SVIX: HeaderNames = HeaderNames { id: "svix-id", timestamp: "svix-timestamp", signature: "svix-signature" };

#[derive(Debug, Clone)]
pub struct StandardWebhooks {
    name: &'static str,
    /// Spellings tried in order: the first whose signature header is present is used.
    spellings: &'static [HeaderNames],
    identity: fn() -> IdentityRule,
    tolerance: Option<Tolerance>,
}

impl StandardWebhooks {
    pub fn standard(tolerance: Option<Tolerance>) -> Self {
        Self { name: "standard_webhooks", spellings: &[STANDARD], identity: standard_identity, tolerance }
    }

    /// Svix and the providers built on it (`svix`, `clerk`, `resend`). Svix also sends the unbranded
    /// `webhook-*` spelling, which is accepted too.
    pub fn svix(name: &str, tolerance: Option<Tolerance>) -> Self {
        let name = match name {
            "clerk" => "clerk",
            "resend" => "resend",
            _ => "svix",
        };
        Self { name, spellings: &[SVIX, STANDARD], identity: svix_identity, tolerance }
    }

    /// GitLab with a signing token: Standard Webhooks headers, event id from `Idempotency-Key` (stable across
    /// GitLab's retries), type from `X-Gitlab-Event`.
    pub fn gitlab(tolerance: Option<Tolerance>) -> Self {
        Self { name: "gitlab_signing", spellings: &[STANDARD], identity: gitlab_identity, tolerance }
    }
}

fn standard_identity() -> IdentityRule {
    IdentityRule::new(vec![FieldSource::header(STANDARD.id)], vec![FieldSource::pointer("/type")])
}

fn svix_identity() -> IdentityRule {
    IdentityRule::new(
        vec![FieldSource::header(SVIX.id), FieldSource::header(STANDARD.id)],
        vec![FieldSource::pointer("/type")],
    )
}

/// `Idempotency-Key` is GitLab's stable id across retries but is not signed, so the dedupe id is the body's
/// SHA-256 (a retry's body is the same) and the key is kept as the provider's id.
fn gitlab_identity() -> IdentityRule {
    IdentityRule::new(
        vec![FieldSource::header("idempotency-key"), FieldSource::BodySha256],
        vec![FieldSource::pointer("/object_kind"), FieldSource::header("x-gitlab-event")],
    )
}

/// Decodes a Standard Webhooks secret: `whsec_` prefix optional, base64 with or without padding.
pub fn decode_secret(raw: &[u8]) -> Result<Vec<u8>, SecretError> {
    let what = "the secret";
    let text = std::str::from_utf8(raw).map_err(|_| SecretError::NotUtf8 { what })?;
    let encoded = text.strip_prefix("whsec_").unwrap_or(text);
    let key = BASE64_LENIENT
        .decode(encoded)
        .map_err(|_| SecretError::NotEncoded { what, encoding: "base64 after `whsec_`" })?;
    if key.is_empty() {
        return Err(SecretError::Invalid("the secret decodes to no bytes".into()));
    }
    Ok(key)
}

/// The `v1` signatures in a signature header; `None` when no entry has the `<version>,<signature>` form.
pub fn parse_signatures(value: &str) -> Option<Vec<Vec<u8>>> {
    let mut any_entry = false;
    let mut v1 = Vec::new();
    for entry in value.split_ascii_whitespace() {
        let Some((version, signature)) = entry.split_once(',') else { continue };
        any_entry = true;
        if version == "v1" {
            v1.extend(BASE64_LENIENT.decode(signature).ok().filter(|bytes| bytes.len() == 32));
        }
    }
    any_entry.then_some(v1)
}

impl Scheme for StandardWebhooks {
    fn signs_timestamp(&self) -> bool {
        self.tolerance.is_some()
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        decode_secret(raw)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let names = self
            .spellings
            .iter()
            .find(|names| request.headers.contains_key(names.signature))
            .ok_or(VerifyError::missing(self.spellings[0].signature))?;
        let text = |name: &'static str| match request.headers.get(name) {
            None => Err(VerifyError::missing(name)),
            Some(value) => value.to_str().map_err(|_| VerifyError::malformed(name)),
        };
        let signature_value = text(names.signature)?;
        let id = text(names.id)?;
        let timestamp_text = text(names.timestamp)?;
        let timestamp = parse_unix(timestamp_text).ok_or(VerifyError::malformed(names.timestamp))?;
        let signatures = parse_signatures(signature_value).ok_or(VerifyError::malformed(names.signature))?;
        let parts = signed_parts(id, timestamp_text, request.body);
        let verified = first_hmac_match(Algorithm::Sha256, secrets, &parts, &signatures)?
            .covering([Cow::Borrowed(names.id), Cow::Borrowed(names.timestamp)]);
        check_seconds(self.tolerance, timestamp, request.now_ms)?;
        Ok(verified)
    }

    fn identity(&self) -> IdentityRule {
        (self.identity)()
    }

    fn signable_headers(&self) -> Vec<Cow<'static, str>> {
        self.spellings.iter().flat_map(|names| [Cow::Borrowed(names.id), Cow::Borrowed(names.timestamp)]).collect()
    }
}

/// What a signature covers: `"<id>.<timestamp>." + body`, the timestamp as sent (decimal seconds). The one
/// definition of the string to sign, for verifying inbound webhooks and signing the consumer's forwards.
fn signed_parts<'a>(id: &'a str, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [id.as_bytes(), b".", timestamp.as_bytes(), b".", body]
}

/// The signature header entry (`v1,<base64>`) for one message, keyed with an already decoded secret
/// ([`decode_secret`]). Several entries, space-separated, make the header of a message signed with several
/// secrets during a rotation.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let mac = hmac(Algorithm::Sha256, key, &signed_parts(id, &t, body));
    format!("v1,{}", BASE64.encode(mac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    const SECRET_1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID_1: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const T_1: i64 = 1_614_265_330;
    const BODY_1: &[u8] = br#"{"test": 2432232314}"#;
    const SIG_1: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    const SECRET_2: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID_2: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const T_2: i64 = 1_649_367_553;
    const BODY_2: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const SIG_2: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn scheme() -> StandardWebhooks {
        StandardWebhooks::standard(Some(Tolerance::seconds(300)))
    }

    fn run_with(
        scheme: &StandardWebhooks,
        names: HeaderNames,
        (id, t, signature): (&str, i64, &str),
        body: &[u8],
        secrets: &[(&str, &str)],
        now_s: i64,
    ) -> Result<String, VerifyError> {
        let t = t.to_string();
        let headers = headers(&[(names.id, id), (names.timestamp, &t), (names.signature, signature)]);
        check(scheme, &headers, body, secrets, now_s * 1000)
    }

    fn run(
        message: (&str, i64, &str),
        body: &[u8],
        secrets: &[(&str, &str)],
        now_s: i64,
    ) -> Result<String, VerifyError> {
        run_with(&scheme(), STANDARD, message, body, secrets, now_s)
    }

    #[test]
    fn official_vectors_verify_and_sign_reproduces_them() {
        assert_eq!(run((ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1), Ok("a".to_owned()));
        assert_eq!(run((ID_2, T_2, SIG_2), BODY_2, &[("a", SECRET_2)], T_2), Ok("a".to_owned()));
        let key = decode_secret(SECRET_1.as_bytes()).unwrap();
        assert_eq!(sign(&key, ID_1, T_1, BODY_1), SIG_1);
    }

    #[test]
    fn official_vector_with_last_character_changed_fails() {
        let broken = format!("{}A", &SIG_1[..SIG_1.len() - 1]);
        assert_eq!(run((ID_1, T_1, &broken), BODY_1, &[("a", SECRET_1)], T_1), Err(VerifyError::Mismatch));
    }

    #[test]
    fn tampered_body_id_and_wrong_secret_are_mismatches() {
        assert_eq!(
            run((ID_1, T_1, SIG_1), br#"{"test": 2432232315}"#, &[("a", SECRET_1)], T_1),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(run(("msg_other", T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1), Err(VerifyError::Mismatch));
        assert_eq!(run((ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_2)], T_1), Err(VerifyError::Mismatch));
    }

    #[test]
    fn stale_and_future_timestamps() {
        assert_eq!(
            run((ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1 + 301),
            Err(VerifyError::TimestampStale { skew_ms: -301_000 })
        );
        assert_eq!(
            run((ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1 - 301),
            Err(VerifyError::TimestampFuture { skew_ms: 301_000 })
        );
    }

    #[test]
    fn multiple_signatures_rotation_and_v1a_entries() {
        let list = format!("v1a,ZWQyNTUxOQ== v1,{} {SIG_1}", "A".repeat(44));
        assert_eq!(run((ID_1, T_1, &list), BODY_1, &[("a", SECRET_1)], T_1), Ok("a".to_owned()));
        let secrets = [("new", SECRET_2), ("old", SECRET_1)];
        assert_eq!(run((ID_1, T_1, SIG_1), BODY_1, &secrets, T_1), Ok("old".to_owned()));
        assert_eq!(run((ID_1, T_1, "v1a,ZWQ="), BODY_1, &[("a", SECRET_1)], T_1), Err(VerifyError::Mismatch));
    }

    #[test]
    fn secrets_decode_with_or_without_prefix_and_padding() {
        let unprefixed = SECRET_1.trim_start_matches("whsec_");
        assert_eq!(run((ID_1, T_1, SIG_1), BODY_1, &[("a", unprefixed)], T_1), Ok("a".to_owned()));
        assert_eq!(decode_secret(b"whsec_YWI"), Ok(b"ab".to_vec()));
        assert!(decode_secret(b"whsec_not*base64").is_err());
        assert!(decode_secret(b"whsec_").is_err());
    }

    #[test]
    fn malformed_and_missing_headers() {
        let secrets = [("a", SECRET_1)];
        assert_eq!(run((ID_1, T_1, "garbage"), BODY_1, &secrets, T_1), Err(VerifyError::malformed(STANDARD.signature)));
        let headers_without_id = headers(&[(STANDARD.timestamp, "1614265330"), (STANDARD.signature, SIG_1)]);
        assert_eq!(
            check(&scheme(), &headers_without_id, BODY_1, &secrets, T_1 * 1000),
            Err(VerifyError::missing("webhook-id"))
        );
        let bad_time =
            headers(&[(STANDARD.id, ID_1), (STANDARD.timestamp, "1614265330.5"), (STANDARD.signature, SIG_1)]);
        assert_eq!(
            check(&scheme(), &bad_time, BODY_1, &secrets, T_1 * 1000),
            Err(VerifyError::malformed("webhook-timestamp"))
        );
        assert_eq!(
            check(&scheme(), &headers(&[]), BODY_1, &secrets, 0),
            Err(VerifyError::missing("webhook-signature"))
        );
    }

    #[test]
    fn svix_spelling_and_its_fallback() {
        let svix = StandardWebhooks::svix("clerk", Some(Tolerance::seconds(300)));
        assert_eq!(svix.name(), "clerk");
        assert_eq!(run_with(&svix, SVIX, (ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1), Ok("a".to_owned()));
        assert_eq!(run_with(&svix, STANDARD, (ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1), Ok("a".to_owned()));
        assert_eq!(
            run_with(&svix, SVIX, (ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1 + 400),
            Err(VerifyError::TimestampStale { skew_ms: -400_000 })
        );
        let svix_headers = headers(&[(SVIX.id, ID_1)]);
        assert_eq!(svix.identity().identify(&svix_headers, BODY_1).event_id.as_deref(), Some(ID_1));
    }

    #[test]
    fn gitlab_signing_takes_its_id_from_idempotency_key() {
        let gitlab = StandardWebhooks::gitlab(Some(Tolerance::seconds(300)));
        assert_eq!(
            run_with(&gitlab, STANDARD, (ID_1, T_1, SIG_1), BODY_1, &[("a", SECRET_1)], T_1),
            Ok("a".to_owned())
        );
        let headers = headers(&[(STANDARD.id, ID_1), ("Idempotency-Key", "idem-1"), ("X-Gitlab-Event", "Push Hook")]);
        let identity = gitlab.identity().identify(&headers, b"{}");
        assert_eq!((identity.event_id.as_deref(), identity.event_type.as_deref()), (Some("idem-1"), Some("Push Hook")));
    }
}
