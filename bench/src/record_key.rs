//! One record key per bench run: every service a bench starts signs and verifies with it, and the records the
//! bench produces itself (the Kafka ceiling's, the consumer bench's fill) are signed with it as the gateway signs
//! its own, so the consumer bench measures the real path including the MAC check
//! ([`hookline_common::record_auth`]).
//!
//! The key is 48 random bytes, base64 (the form `openssl rand -base64 48` gives), in a fresh temporary file of
//! mode 0600 that is removed when the last clone is dropped.

use std::{io::Write, os::unix::fs::OpenOptionsExt, path::PathBuf, sync::Arc};

use base64::Engine as _;
use hookline_common::{
    config::SecretRef,
    record_auth::{RecordAuthConfig, RecordKeys},
};
use rand::RngCore;

/// The id of the bench's key in `kafka.record_auth.keys`.
pub const BENCH_KEY_ID: &str = "bench";

struct KeyFile(PathBuf);

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A generated record key: its secret reference (for service configs), and the loaded key set (for signing).
/// Cheap to clone; the file is removed when the last clone is dropped.
#[derive(Clone)]
pub struct BenchRecordKey {
    file: Arc<KeyFile>,
    secret: SecretRef,
    keys: RecordKeys,
}

impl std::fmt::Debug for BenchRecordKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("BenchRecordKey").field("secret", &self.secret).finish()
    }
}

impl BenchRecordKey {
    /// A fresh random key in a new file of mode 0600 under the system's temporary directory.
    pub fn generate() -> anyhow::Result<Self> {
        let mut bytes = [0_u8; 48];
        rand::rng().fill_bytes(&mut bytes);
        let path = std::env::temp_dir().join(format!("hookline-bench-record-key-{}", uuid::Uuid::new_v4().simple()));
        let mut out = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        let file = Arc::new(KeyFile(path));
        out.write_all(base64::engine::general_purpose::STANDARD.encode(bytes).as_bytes())?;
        drop(out);
        let secret = SecretRef::from_file(BENCH_KEY_ID, file.0.to_string_lossy());
        let keys = RecordKeys::load(&RecordAuthConfig {
            keys: vec![secret.clone()],
            accept_unsigned_until: None,
            inbound_only_keys: Vec::new(),
        })
        .map_err(|problems| anyhow::anyhow!("bench record key: {}", problems.join("; ")))?;
        Ok(Self { file, secret, keys })
    }

    /// `[kafka.record_auth]` for a service config built in code.
    pub fn record_auth(&self) -> RecordAuthConfig {
        RecordAuthConfig { keys: vec![self.secret.clone()], accept_unsigned_until: None, inbound_only_keys: Vec::new() }
    }

    /// The key set, to sign the records the bench produces itself.
    pub fn keys(&self) -> &RecordKeys {
        &self.keys
    }

    /// The `[kafka.record_auth]` table of a service's TOML config (a reference to the file, never the key).
    pub fn toml(&self) -> String {
        format!(
            "[kafka.record_auth]\nkeys = [{{ id = \"{BENCH_KEY_ID}\", file = {:?} }}]\n",
            self.file.0.to_string_lossy()
        )
    }
}
