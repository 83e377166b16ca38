//! Secret references: where a credential is read from (an environment variable or a file), never the value.

use serde::{Deserialize, Serialize};

/// Where a secret's value comes from. Secrets are never written inline in a config file, so printing a
/// `SecretRef` (an id, a variable name, a path) shows no secret.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub id: String,
    /// Name of an environment variable holding the secret.
    pub env: Option<String>,
    /// Path of a file holding the secret (trailing newline stripped).
    pub file: Option<String>,
    /// RFC 3339 time (`2026-06-01T00:00:00Z`) before which the secret is not accepted yet: lets a rotation be
    /// configured ahead of the provider's switch.
    #[serde(default)]
    pub not_before: Option<String>,
    /// RFC 3339 time after which the secret is no longer accepted: a retiring secret stops working by itself.
    #[serde(default)]
    pub not_after: Option<String>,
}

impl SecretRef {
    /// A secret read from a file, valid at any time.
    pub fn from_file(id: impl Into<String>, path: impl Into<String>) -> Self {
        Self { id: id.into(), file: Some(path.into()), ..Self::default() }
    }

    /// A secret read from an environment variable, valid at any time.
    pub fn from_env(id: impl Into<String>, var: impl Into<String>) -> Self {
        Self { id: id.into(), env: Some(var.into()), ..Self::default() }
    }

    /// `not_before` and `not_after` as ms since the Unix epoch, or why they cannot be read.
    pub fn validity_ms(&self) -> Result<(Option<i64>, Option<i64>), ValidityError> {
        let parse = |key: &'static str, value: &Option<String>| -> Result<Option<i64>, ValidityError> {
            let Some(text) = value else { return Ok(None) };
            let ms = crate::time::parse_rfc3339_ms(text.trim()).map_err(|source| ValidityError::NotATime {
                id: self.id.clone(),
                key,
                text: text.clone(),
                source,
            })?;
            Ok(Some(ms))
        };
        let not_before = parse("not_before", &self.not_before)?;
        let not_after = parse("not_after", &self.not_after)?;
        if let (Some(start), Some(end)) = (not_before, not_after) {
            if start > end {
                return Err(ValidityError::Reversed { id: self.id.clone() });
            }
        }
        Ok((not_before, not_after))
    }

    /// Reads the secret's bytes, or says why it cannot.
    pub fn load(&self) -> Result<Vec<u8>, SecretError> {
        let id = || self.id.clone();
        let value = match (&self.env, &self.file) {
            (Some(var), None) => {
                std::env::var(var).map_err(|source| SecretError::EnvNotSet { id: id(), var: var.clone(), source })?
            }
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|source| SecretError::Read { id: id(), path: path.clone(), source })?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
            _ => return Err(SecretError::NotOneSource { id: id() }),
        };
        if value.is_empty() {
            return Err(SecretError::Empty { id: id() });
        }
        Ok(value.into_bytes())
    }
}

/// Why a secret's value cannot be read. Said as one line naming the secret, after the key that refers to it.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret `{id}`: environment variable {var} is not set")]
    EnvNotSet {
        id: String,
        var: String,
        #[source]
        source: std::env::VarError,
    },
    #[error("secret `{id}`: cannot read {path}: {source}")]
    Read {
        id: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("secret `{id}`: give exactly one of `env` or `file`")]
    NotOneSource { id: String },
    #[error("secret `{id}` is empty")]
    Empty { id: String },
}

/// Why a secret's validity window (`not_before`, `not_after`) cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidityError {
    #[error("secret `{id}`: {key} `{text}` is not an RFC 3339 UTC time like 2026-06-01T00:00:00Z")]
    NotATime {
        id: String,
        key: &'static str,
        text: String,
        #[source]
        source: crate::time::ParseError,
    },
    #[error("secret `{id}`: not_before is after not_after")]
    Reversed { id: String },
}
