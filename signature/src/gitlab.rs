//! GitLab with a secret token: `X-Gitlab-Token: <token>`, the configured token itself (no signature over the body).
//! Compared in constant time on SHA-256 digests, so neither the content nor the length of the token leaks.
//! Event id from `Idempotency-Key` (stable across GitLab's retries), then `X-Gitlab-Event-UUID`; type from
//! `X-Gitlab-Event`. GitLab's signing tokens are the `gitlab_signing` scheme (Standard Webhooks).

use sha2::{Digest, Sha256};

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{equal, required_header},
};

const HEADER: &str = "X-Gitlab-Token";

#[derive(Debug, Clone, Copy, Default)]
pub struct GitLabToken;

impl Scheme for GitLabToken {
    fn name(&self) -> &'static str {
        "gitlab"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let token = required_header(request.headers, "x-gitlab-token", HEADER)?;
        let presented = Sha256::digest(token.as_bytes());
        secrets
            .iter()
            .find(|secret| equal(&Sha256::digest(secret.key()), &presented))
            .map(|secret| SignatureMatch::by(secret))
            .ok_or(VerifyError::Mismatch)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(
            vec![FieldSource::header("idempotency-key"), FieldSource::header("x-gitlab-event-uuid")],
            vec![FieldSource::pointer("/object_kind"), FieldSource::header("x-gitlab-event")],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check, headers};

    fn run(token: &str, secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        check(&GitLabToken, &headers(&[(HEADER, token)]), b"{}", secrets, 0)
    }

    #[test]
    fn the_token_itself_verifies_and_nothing_else_does() {
        assert_eq!(run("glpat-secret-token", &[("a", "glpat-secret-token")]), Ok("a".to_owned()));
        assert_eq!(run("glpat-secret-toke", &[("a", "glpat-secret-token")]), Err(VerifyError::Mismatch));
        assert_eq!(run("glpat-secret-token ", &[("a", "glpat-secret-token")]), Err(VerifyError::Mismatch));
        assert_eq!(run("", &[("a", "glpat-secret-token")]), Err(VerifyError::Mismatch));
    }

    #[test]
    fn rotation_and_missing() {
        assert_eq!(run("old", &[("new", "new"), ("old", "old")]), Ok("old".to_owned()));
        assert_eq!(check(&GitLabToken, &headers(&[]), b"{}", &[("a", "t")], 0), Err(VerifyError::missing(HEADER)));
    }

    #[test]
    fn identity_prefers_the_idempotency_key() {
        let headers = headers(&[
            ("X-Gitlab-Event-UUID", "uuid-1"),
            ("Idempotency-Key", "idem-1"),
            ("X-Gitlab-Event", "Push Hook"),
        ]);
        let identity = GitLabToken.identity().identify(&headers, b"{}");
        assert_eq!((identity.event_id.as_deref(), identity.event_type.as_deref()), (Some("idem-1"), Some("Push Hook")));
    }
}
