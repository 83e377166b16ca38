//! `[kafka.record_auth]`: the internal keys that sign and verify every record hookline writes, and the transition
//! window for records written before records were signed. Reading the keys, signing and verifying is
//! [`crate::record_auth`]'s.

use serde::{Deserialize, Serialize};

use super::{Problems, SecretRef};

/// The shortest record key accepted: 256 bits, the HMAC-SHA256 block of security.
pub const MIN_RECORD_KEY_BYTES: usize = 32;

/// How far ahead `accept_unsigned_until` may end, from the time the config is checked: the window is for draining
/// the backlog of an upgrade (inbound and retry retention), not a way to turn the record MAC off.
pub const MAX_UNSIGNED_WINDOW_DAYS: i64 = 30;

/// `[kafka.record_auth]`: the internal keys that sign and verify records, and the transition for records
/// written before records were signed.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordAuthConfig {
    /// Secret references (`{ id, env | file, not_before?, not_after? }`): the first one valid now signs, all of
    /// them verify until their `not_after`. Ids are letters, digits, `.`, `_`, `-`.
    pub keys: Vec<SecretRef>,
    /// RFC 3339 time until which a reader accepts a record that carries no MAC at all (written before the
    /// upgrade), counted as `unsigned_accepted`. Unset: unsigned records are refused. At most
    /// [`MAX_UNSIGNED_WINDOW_DAYS`] ahead when a service starts; every start inside it logs a warning.
    pub accept_unsigned_until: Option<String>,
    /// Ids of keys (of `keys`) that may sign inbound records only: the internet-facing gateway's own key. A record
    /// signed with one that is not an inbound record (it carries a re-drive, re-processing, service, retry, origin
    /// or DLQ header, or lacks the source and event id: a status record) is refused by every reader
    /// (`kind_not_allowed`), and a writer never signs one with it. The gateway holds only its key; the other
    /// services hold theirs (first, so they sign with it) and the gateway's, listed here. Empty: every key may sign
    /// every record (one key shared by all, as before).
    pub inbound_only_keys: Vec<String>,
}

impl RecordAuthConfig {
    /// The settings' problems, without reading a key: `--print-config` (and `scripts/check-deploy`) run it where
    /// the secrets are not available. The keys themselves are read, and checked for length, when a service builds
    /// its producer or reader ([`crate::record_auth::RecordKeys::load`], which starts with this), so a missing one
    /// still stops the service at start. One line per problem, never a key's value.
    pub fn validate(&self, problems: &mut Problems) {
        if self.keys.is_empty() {
            problems.push(format!(
                "kafka.record_auth.keys is empty: every record hookline writes is signed with an internal key and \
                 every reader refuses records without it; give at least one key of {MIN_RECORD_KEY_BYTES}+ bytes \
                 from a secret (`keys = [{{ id = \"k1\", env = \"HOOKLINE_RECORD_KEY_K1\" }}]`, e.g. `openssl rand \
                 -base64 48`; see docs/security.md)"
            ));
        }
        for secret in &self.keys {
            let id = &secret.id;
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
                problems.push(format!(
                    "kafka.record_auth.keys: key id `{id}` must be letters, digits, `.`, `_` or `-` (it is written \
                     into every record's MAC)"
                ));
            }
            if self.keys.iter().filter(|other| other.id == *id).count() > 1 {
                problems.push(format!("kafka.record_auth.keys: key id `{id}` is given more than once"));
            }
            if secret.env.is_some() == secret.file.is_some() {
                problems.push(format!("kafka.record_auth.keys: secret `{id}`: give exactly one of `env` or `file`"));
            }
            if let Err(problem) = secret.validity_ms() {
                problems.push(format!("kafka.record_auth.keys: {problem}"));
            }
        }
        for id in &self.inbound_only_keys {
            if !self.keys.iter().any(|key| key.id == *id) {
                problems.push(format!(
                    "kafka.record_auth.inbound_only_keys: `{id}` names no key of kafka.record_auth.keys (a typo here \
                     would leave the gateway's key allowed to sign re-drives)"
                ));
            }
        }
        match self.accept_unsigned_until_ms() {
            Err(problem) => problems.push(problem.to_string()),
            Ok(Some(until_ms)) if until_ms > crate::wire::now_ms() + MAX_UNSIGNED_WINDOW_DAYS * 86_400_000 => {
                problems.push(format!(
                    "kafka.record_auth.accept_unsigned_until ends more than {MAX_UNSIGNED_WINDOW_DAYS} days from now: \
                     until then every reader accepts records without a MAC, which is the record key turned off; \
                     give the time the pre-upgrade backlog will have drained (see docs/security.md)"
                ));
            }
            Ok(_) => {}
        }
    }

    /// `accept_unsigned_until` as ms since the Unix epoch (`None`: unsigned records are refused), or why it cannot
    /// be read.
    pub fn accept_unsigned_until_ms(&self) -> Result<Option<i64>, AcceptUnsignedUntilError> {
        let Some(text) = &self.accept_unsigned_until else { return Ok(None) };
        let ms = crate::time::parse_rfc3339_ms(text.trim())
            .map_err(|source| AcceptUnsignedUntilError::NotATime { text: text.clone(), source })?;
        Ok(Some(ms))
    }
}

/// Why `kafka.record_auth.accept_unsigned_until` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptUnsignedUntilError {
    #[error("kafka.record_auth.accept_unsigned_until `{text}` is not an RFC 3339 UTC time like 2026-06-01T00:00:00Z")]
    NotATime {
        text: String,
        #[source]
        source: crate::time::ParseError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(until: String) -> Vec<String> {
        let config = RecordAuthConfig {
            keys: vec![SecretRef::from_file("k1", "/nonexistent")],
            accept_unsigned_until: Some(until),
            inbound_only_keys: Vec::new(),
        };
        let mut problems = Problems::default();
        config.validate(&mut problems);
        problems.into_lines()
    }

    fn in_days(days: i64) -> String {
        crate::time::format_rfc3339_seconds(crate::wire::now_ms() + days * 86_400_000)
    }

    #[test]
    fn an_unsigned_window_is_bounded() {
        assert!(window(in_days(7)).is_empty(), "{:?}", window(in_days(7)));
        let far = window("2099-01-01T00:00:00Z".to_owned());
        assert!(far.iter().any(|line| line.contains("more than 30 days")), "{far:?}");
        assert!(!window(in_days(31)).is_empty());
    }

    #[test]
    fn an_unreadable_window_says_why_and_keeps_the_cause() {
        let config = RecordAuthConfig { accept_unsigned_until: Some("next week".to_owned()), ..Default::default() };
        let error = config.accept_unsigned_until_ms().expect_err("not a time");
        assert_eq!(
            error.to_string(),
            "kafka.record_auth.accept_unsigned_until `next week` is not an RFC 3339 UTC time like 2026-06-01T00:00:00Z"
        );
        assert_eq!(
            std::error::Error::source(&error).map(ToString::to_string),
            Some(crate::time::ParseError::Shape.to_string())
        );
        assert!(window("next week".to_owned()).iter().any(|line| *line == error.to_string()));
        let padded = RecordAuthConfig { accept_unsigned_until: Some(" 2026-06-01T00:00:00Z ".to_owned()), ..config };
        assert_eq!(padded.accept_unsigned_until_ms(), Ok(Some(1_780_272_000_000)));
    }
}
