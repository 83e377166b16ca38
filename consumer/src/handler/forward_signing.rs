//! Signing the `http` handler's forwards per the Standard Webhooks specification, so the downstream verifies
//! each one with the official `standardwebhooks` library of its language: `webhook-id` (the event id),
//! `webhook-timestamp` (now, in seconds, fresh on every attempt) and `webhook-signature`, one `v1,<base64>` entry
//! per secret valid now. A rotation overlaps: configure the new secret beside the old one (`not_before` when the
//! downstream will know it, `not_after` on the old one), and during the overlap both sign, so a downstream that
//! knows either verifies. The string to sign is the one the gateway verifies inbound Standard Webhooks with
//! ([`standard_webhooks::sign`]).

use hookline_common::config::SecretRef;
use hookline_signature::standard_webhooks;

/// Request header names of the scheme.
pub mod header_name {
    pub const ID: &str = "webhook-id";
    pub const TIMESTAMP: &str = "webhook-timestamp";
    pub const SIGNATURE: &str = "webhook-signature";
}

/// A route's signing secrets, decoded, with their validity windows.
pub struct SigningKeys {
    keys: Vec<SigningKey>,
}

struct SigningKey {
    id: String,
    key: Vec<u8>,
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
}

impl SigningKey {
    fn is_valid_at(&self, now_ms: i64) -> bool {
        self.not_before_ms.is_none_or(|start| now_ms >= start) && self.not_after_ms.is_none_or(|end| now_ms <= end)
    }
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.keys.iter().map(|key| &key.id)).finish()
    }
}

/// None of the route's secrets is valid at the time of a forward: nothing can sign it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no signing secret of this route is valid now (ids: {0}): check not_before / not_after")]
pub struct NoValidKey(String);

impl SigningKeys {
    /// Reads and decodes every secret (`whsec_` + base64, as the standard's libraries take them); every problem
    /// is reported. `now_ms` is start-up time: secrets none of which is valid then are refused, since the route
    /// could sign nothing.
    pub fn load(secrets: &[SecretRef], now_ms: i64) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut keys: Vec<SigningKey> = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for secret in secrets {
            if secret.id.is_empty() {
                problems.push("a signing secret has an empty id".to_owned());
            } else if !ids.insert(secret.id.as_str()) {
                problems.push(format!("signing secret id `{}` is used twice", secret.id));
            }
            let validity = secret.validity_ms().map_err(|problem| problems.push(problem.to_string())).ok();
            let key = secret.load().map_err(|problem| problems.push(problem.to_string())).ok().and_then(|raw| {
                standard_webhooks::decode_secret(&raw)
                    .map_err(|problem| problems.push(format!("signing secret `{}`: {problem}", secret.id)))
                    .ok()
            });
            if let (Some((not_before_ms, not_after_ms)), Some(key)) = (validity, key) {
                keys.push(SigningKey { id: secret.id.clone(), key, not_before_ms, not_after_ms });
            }
        }
        if problems.is_empty() && !keys.is_empty() && !keys.iter().any(|key| key.is_valid_at(now_ms)) {
            problems.push("no signing secret is valid now (not_before / not_after)".to_owned());
        }
        if problems.is_empty() { Ok(Self { keys }) } else { Err(problems) }
    }

    /// The `webhook-signature` value for one message at `now_ms`: a `v1,<base64>` entry per secret valid then,
    /// space-separated, in configured order.
    pub fn signature(&self, id: &str, timestamp_s: i64, body: &[u8], now_ms: i64) -> Result<String, NoValidKey> {
        let entries: Vec<String> = self
            .keys
            .iter()
            .filter(|key| key.is_valid_at(now_ms))
            .map(|key| standard_webhooks::sign(&key.key, id, timestamp_s, body))
            .collect();
        if entries.is_empty() {
            let ids: Vec<&str> = self.keys.iter().map(|key| key.id.as_str()).collect();
            return Err(NoValidKey(ids.join(", ")));
        }
        Ok(entries.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own test vector (also in the gateway's verifier tests).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const OTHER: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const T: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret_file(value: &str) -> String {
        let path = std::env::temp_dir().join(format!("hookline-signing-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, value).expect("write secret");
        path.display().to_string()
    }

    fn secret(id: &str, value: &str, not_before: Option<&str>, not_after: Option<&str>) -> SecretRef {
        SecretRef {
            not_before: not_before.map(str::to_owned),
            not_after: not_after.map(str::to_owned),
            ..SecretRef::from_file(id, secret_file(value))
        }
    }

    #[test]
    fn signs_the_specifications_vector() {
        let keys = SigningKeys::load(&[secret("a", SECRET, None, None)], T * 1000).unwrap();
        assert_eq!(keys.signature(ID, T, BODY, T * 1000), Ok(SIGNATURE.to_owned()));
    }

    #[test]
    fn every_secret_valid_now_signs_and_the_others_do_not() {
        // 2021-02-25T15:02:10Z is T; the old secret retires an hour later, the new one starts an hour before.
        let old = secret("old", SECRET, None, Some("2021-02-25T16:00:00Z"));
        let new = secret("new", OTHER, Some("2021-02-25T14:00:00Z"), None);
        let keys = SigningKeys::load(&[old, new], T * 1000).unwrap();
        let both = keys.signature(ID, T, BODY, T * 1000).unwrap();
        let entries: Vec<&str> = both.split(' ').collect();
        assert_eq!(entries.len(), 2, "{both}");
        assert_eq!(entries[0], SIGNATURE);
        let hour_ms = 3_600_000;
        let after_overlap = keys.signature(ID, T, BODY, (T * 1000) + 2 * hour_ms).unwrap();
        assert_eq!(after_overlap, entries[1], "only the new secret signs once the old one retired");
        let before_overlap = keys.signature(ID, T, BODY, (T * 1000) - 2 * hour_ms).unwrap();
        assert_eq!(before_overlap, SIGNATURE, "only the old secret signs before the new one starts");
    }

    #[test]
    fn no_valid_secret_is_an_error_at_start_and_at_send() {
        let retired = secret("old", SECRET, None, Some("2021-02-25T16:00:00Z"));
        assert!(SigningKeys::load(std::slice::from_ref(&retired), (T + 7200) * 1000).is_err());
        let keys = SigningKeys::load(&[retired], T * 1000).unwrap();
        assert!(keys.signature(ID, T, BODY, (T + 7200) * 1000).is_err_and(|error| error.to_string().contains("old")));
    }

    #[test]
    fn bad_secrets_are_all_reported_without_their_value() {
        let problems = SigningKeys::load(
            &[
                secret("a", "whsec_not*base64", None, None),
                secret("a", SECRET, Some("yesterday"), None),
                SecretRef::from_env("b", "HOOKLINE_TEST_UNSET_SIGNING_SECRET"),
            ],
            T * 1000,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().all(|problem| !problem.contains("not*base64")), "{problems:?}");
        let printed = format!("{:?}", SigningKeys::load(&[secret("a", SECRET, None, None)], 0).unwrap());
        assert_eq!(printed, r#"["a"]"#);
    }
}
