//! Who is asking: every caller of the API and the console is a [`Principal`], a verified subject with a [`Scope`],
//! and every mutating action is recorded under that subject (in the status and control records it writes, and in
//! the audit trail, [`audit`]), never under a name the caller sends.
//!
//! - Scoped API tokens ([`tokens`]): created and revoked by an admin (API or CLI), shown once at creation, kept as a
//!   SHA-256 only, in a compacted topic under the replayer's record MAC. Every instance tails that topic, so a token
//!   created or revoked on one is known to all within about a second, and a restart reads it back.
//! - The shared `api_token` of the configuration: one admin token for everyone, subject `shared-token`, for a local
//!   demo only (a warning at start; docs/security.md, F14).
//!
//! Why Kafka and not a database: the replayer keeps all its state in Kafka already (fates, pauses), so the tokens
//! need no new store, every instance sees the same set, a restart loses nothing, and the record MAC means only a
//! holder of the replayer's record key can write a token (the same trust as a pause or a re-drive).

pub mod audit;
pub mod oidc;
pub mod tokens;

use serde::{Deserialize, Serialize};

/// What a principal may do. Each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// List, show, search, look up, read the audit trail.
    Read,
    /// Besides reading: replay, discard, pause, resume, reprocess.
    Operate,
    /// Besides operating: create and revoke tokens.
    Admin,
}

impl Scope {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "operate" => Some(Self::Operate),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
            Self::Admin => "admin",
        }
    }

    /// Whether this scope may do what `needed` guards.
    pub fn allows(self, needed: Self) -> bool {
        self >= needed
    }
}

/// A verified caller: the subject its actions are recorded under, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `token:<name>` for an API token, `oidc:<subject>` for a console login, `shared-token` for the demo token.
    pub subject: String,
    pub scope: Scope,
}

/// The subject of the shared `api_token` (local demo only).
pub const SHARED_TOKEN_SUBJECT: &str = "shared-token";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_includes_the_ones_before_it() {
        assert!(Scope::Admin.allows(Scope::Operate) && Scope::Admin.allows(Scope::Read));
        assert!(Scope::Operate.allows(Scope::Read) && !Scope::Operate.allows(Scope::Admin));
        assert!(!Scope::Read.allows(Scope::Operate));
        for scope in [Scope::Read, Scope::Operate, Scope::Admin] {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
        assert_eq!(Scope::parse("root"), None);
    }
}
