//! The replayer's identity records. Both are written only by the replayer, under its record MAC, and read back only
//! when authentic ([`crate::mac::RecordKind::Identity`]).
//!
//! - The API token ([`ApiTokenRecord`], the compacted tokens topic): key `api-token:<id>` ([`api_token_key`]);
//!   body: the token's name, scope, the SHA-256 of the token (never the token) and its revocation, as JSON. Compaction
//!   keeps the latest per token, which is its state; a revocation is final (a reader never un-revokes a token).
//! - The audit record ([`AuditRecord`], the audit topic, deleted by retention): key the subject; body: who (a
//!   verified subject), what, when and the outcome, as JSON. One per mutating action, not per entry it touched.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Outgoing, table::HeaderTable};

/// Key prefix of an API token record.
pub const API_TOKEN_KEY_PREFIX: &str = "api-token:";

/// The record key of token `id`'s state.
pub fn api_token_key(id: &str) -> String {
    format!("{API_TOKEN_KEY_PREFIX}{id}")
}

/// One API token as the tokens topic holds it: everything but the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiTokenRecord {
    /// Random, public: the token carries it, so a presented token is found by id and its hash compared once.
    pub id: String,
    /// Who holds it, as the audit trail names them (unique among the tokens not revoked).
    pub name: String,
    /// `read`, `operate` or `admin`.
    pub scope: String,
    /// The SHA-256 of the whole token, lowercase hex.
    pub sha256: String,
    pub created_at_ms: i64,
    /// The verified subject that created it.
    pub created_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
}

impl ApiTokenRecord {
    pub fn key(&self) -> String {
        api_token_key(&self.id)
    }

    /// The token record of this state, to `topic`.
    pub fn encode(&self, topic: &str) -> Outgoing {
        // Strings and integers: serialising cannot fail.
        let value = serde_json::to_vec(self).expect("a token record serialises");
        Outgoing::new(topic, Some(Bytes::from(self.key())), Some(value.into()), HeaderTable::new())
    }

    /// Decodes a token record; `None` when it is not one (another kind, damaged), or when its key does not name the
    /// id its value names (a record moved under another key).
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let key = std::str::from_utf8(key).ok()?;
        if !key.starts_with(API_TOKEN_KEY_PREFIX) {
            return None;
        }
        let token: Self = serde_json::from_slice(value).ok()?;
        (token.key() == key).then_some(token)
    }
}

/// One mutating action, as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// Who: a verified subject (`token:<name>`, `oidc:<subject>`), or what the CLI was told (`cli:<user>`).
    pub subject: String,
    /// What: `replay`, `discard`, `pause`, `resume`, `reprocess`, `token.create`, `token.revoke`.
    pub action: String,
    /// What it was done to, and how it ended (ids, counts, the route, the token's name): the action's own fields.
    pub detail: serde_json::Value,
}

impl AuditRecord {
    /// The audit record to `topic`, keyed by its subject.
    pub fn encode(&self, topic: &str) -> Outgoing {
        // Strings, an integer and a JSON value: serialising cannot fail.
        let value = serde_json::to_vec(self).expect("an audit record serialises");
        Outgoing::new(topic, Some(Bytes::from(self.subject.clone())), Some(value.into()), HeaderTable::new())
    }

    /// Decodes an audit record; `None` when it is not one, or when its key is not its subject.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let audit: Self = serde_json::from_slice(value).ok()?;
        (audit.subject.as_bytes() == key).then_some(audit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> ApiTokenRecord {
        ApiTokenRecord {
            id: "0123456789abcdef".to_owned(),
            name: "alice".to_owned(),
            scope: "operate".to_owned(),
            sha256: "00".repeat(32),
            created_at_ms: 1,
            created_by: "token:root".to_owned(),
            revoked_at_ms: None,
            revoked_by: None,
        }
    }

    #[test]
    fn a_token_decodes_only_under_its_own_key() {
        let record = token().encode("tokens");
        let (key, body) = (record.key.unwrap(), record.body.unwrap());
        assert_eq!(&key[..], b"api-token:0123456789abcdef");
        assert_eq!(ApiTokenRecord::decode(&key, &body), Some(token()));
        assert_eq!(ApiTokenRecord::decode(b"api-token:fedcba9876543210", &body), None);
        assert_eq!(ApiTokenRecord::decode(b"route-pause:a:b", &body), None);
    }

    #[test]
    fn an_audit_record_decodes_only_under_its_subject() {
        let audit = AuditRecord {
            at_ms: 5,
            subject: "token:alice".to_owned(),
            action: "replay".to_owned(),
            detail: serde_json::json!({"done": 1}),
        };
        let record = audit.encode("audit");
        let (key, body) = (record.key.unwrap(), record.body.unwrap());
        assert_eq!(AuditRecord::decode(&key, &body), Some(audit));
        assert_eq!(AuditRecord::decode(b"token:mallory", &body), None);
    }
}
