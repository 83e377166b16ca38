//! JSON Web Tokens signed with a key from a fetched JSON Web Key Set (RFC 7515, 7517, 7518): the compact form
//! `header.claims.signature` (base64url, no padding), RS256 (RSA PKCS#1 v1.5 with SHA-256, keys of 2048 to 8192
//! bits, by ring) and ES256 (ECDSA P-256, the signature as `r || s`, by p256). A key set is parsed once when
//! fetched and kept; only keys for `use: sig` (or no `use`) with an algorithm this module knows are kept.
//!
//! [`Jwt`] is also the parser of the JWT family (`scheme = "jwt"`, [`crate::jwt`]), whose tokens are
//! HMACs under the source's secrets: one parser for every JWT the gateway reads.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use p256::ecdsa::{Signature, VerifyingKey, signature::Verifier};

use super::super::VerifyError;

/// One key of a set, by its id.
#[derive(Debug, Clone)]
enum Key {
    Rs256 { n: Vec<u8>, e: Vec<u8> },
    Es256(VerifyingKey),
}

/// A fetched key set: what the cache keeps for a JWT scheme.
#[derive(Debug, Clone)]
pub struct JwkSet {
    keys: Vec<(String, Key)>,
    size_bytes: usize,
}

impl JwkSet {
    /// `{"keys":[...]}` as Google's certs endpoint serves it, or a single key object (Plaid's `key`).
    pub fn parse(body: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        let listed = match value.get("keys").and_then(serde_json::Value::as_array) {
            Some(keys) => keys.clone(),
            None => vec![value.get("key").cloned().unwrap_or(value)],
        };
        let decode = |key: &serde_json::Value, name: &str| URL_SAFE_NO_PAD.decode(key.get(name)?.as_str()?).ok();
        let mut keys = Vec::new();
        // A document whose only keys are retired is still the provider's answer (the key is refused, not missing).
        let mut retired = false;
        for key in &listed {
            let Some(kid) = key.get("kid").and_then(serde_json::Value::as_str) else { continue };
            if key.get("use").and_then(serde_json::Value::as_str).is_some_and(|usage| usage != "sig") {
                continue;
            }
            // Plaid marks a retired key with its `expired_at` (its documented check refuses such a key).
            if key.get("expired_at").is_some_and(|at| !at.is_null()) {
                retired = true;
                continue;
            }
            let parsed = match key.get("kty").and_then(serde_json::Value::as_str) {
                Some("RSA") => decode(key, "n").zip(decode(key, "e")).map(|(n, e)| Key::Rs256 { n, e }),
                Some("EC") if key.get("crv").and_then(serde_json::Value::as_str) == Some("P-256") => {
                    decode(key, "x").zip(decode(key, "y")).and_then(|(x, y)| {
                        let point = [&[0x04], x.as_slice(), y.as_slice()].concat();
                        VerifyingKey::from_sec1_bytes(&point).ok().map(Key::Es256)
                    })
                }
                _ => None,
            };
            keys.extend(parsed.map(|parsed| (kid.to_owned(), parsed)));
        }
        (!keys.is_empty() || retired).then_some(Self { keys, size_bytes: body.len() })
    }

    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    fn key(&self, kid: &str) -> Option<&Key> {
        self.keys.iter().find(|(id, _)| id == kid).map(|(_, key)| key)
    }
}

/// A compact JWT, split and decoded, nothing checked yet.
#[derive(Debug)]
pub struct Jwt {
    pub algorithm: String,
    /// The header's `kid`, which a fetched key set needs (an HMAC-signed token may have none).
    pub kid: Option<String>,
    pub claims: serde_json::Map<String, serde_json::Value>,
    signing_input: String,
    signature: Vec<u8>,
}

impl Jwt {
    /// `token`, or why it is not a JWT (reported as `display` malformed).
    pub fn parse(token: &str, display: &'static str) -> Result<Self, VerifyError> {
        let malformed = || VerifyError::malformed(display);
        let mut parts = token.trim().split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let json = |part: &str| -> Option<serde_json::Map<String, serde_json::Value>> {
            match serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()? {
                serde_json::Value::Object(map) => Some(map),
                _ => None,
            }
        };
        let header_fields = json(header).ok_or_else(malformed)?;
        // `crit` names extensions that must be understood (RFC 7515 4.1.11, RFC 7797's unencoded payload): none is.
        if header_fields.contains_key("crit") {
            return Err(malformed());
        }
        let text = |name: &str| header_fields.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
        Ok(Self {
            algorithm: text("alg").ok_or_else(malformed)?,
            kid: text("kid"),
            claims: json(claims).ok_or_else(malformed)?,
            signing_input: format!("{header}.{claims}"),
            signature: URL_SAFE_NO_PAD.decode(signature).map_err(|_| malformed())?,
        })
    }

    /// Whether the token's signature verifies with its `kid`'s key in `keys`, by the algorithm the key allows
    /// (never the one the token's header asks for: `alg` must match the key's).
    pub fn verifies_with(&self, keys: &JwkSet) -> bool {
        let Some(kid) = &self.kid else { return false };
        match (keys.key(kid), self.algorithm.as_str()) {
            (Some(Key::Rs256 { n, e }), "RS256") => ring::signature::RsaPublicKeyComponents { n, e }
                .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, self.signing_input.as_bytes(), &self.signature)
                .is_ok(),
            (Some(Key::Es256(key)), "ES256") => Signature::from_slice(&self.signature)
                .is_ok_and(|signature| key.verify(self.signing_input.as_bytes(), &signature).is_ok()),
            _ => false,
        }
    }

    /// `header.claims`, the bytes the signature covers.
    pub(crate) fn signing_input(&self) -> &[u8] {
        self.signing_input.as_bytes()
    }

    /// The signature, decoded.
    pub(crate) fn signature(&self) -> &[u8] {
        &self.signature
    }

    pub fn claim(&self, name: &str) -> Option<&str> {
        self.claims.get(name).and_then(serde_json::Value::as_str)
    }

    /// A NumericDate claim (seconds) as ms.
    pub fn time_claim_ms(&self, name: &str) -> Option<i64> {
        self.claims.get(name).and_then(serde_json::Value::as_i64).map(|seconds| seconds.saturating_mul(1000))
    }
}
