//! Downstream services for the consumer's signed forwards (tests/tests/suite/forward_signed.rs): the Python and Node
//! programs of `tests/forward/`, which verify each forward with the official Standard Webhooks library of their
//! language, served over https with the stack's throwaway certificates (`scripts/stack certs`).

use std::{
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine;
use hookline_common::config::SecretRef;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, ChildStdin, Command},
};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The stack's TLS folder (`ca.pem`, `server.pem`, `server.key`, ...), made by `scripts/stack certs` if missing.
pub fn stack_tls_dir() -> PathBuf {
    let output =
        std::process::Command::new(repo_root().join("scripts/stack")).arg("certs").output().expect("run stack");
    assert!(output.status.success(), "scripts/stack certs failed: {}", String::from_utf8_lossy(&output.stderr));
    let printed = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(printed.lines().last().expect("the TLS folder").trim())
}

/// A fresh Standard Webhooks secret, `whsec_` + base64 of 24 random bytes.
pub fn new_whsec() -> String {
    let bytes: [u8; 24] = rand_bytes();
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0_u8; N];
    for chunk in bytes.chunks_mut(16) {
        let random = uuid::Uuid::new_v4();
        chunk.copy_from_slice(&random.as_bytes()[..chunk.len()]);
    }
    bytes
}

/// A secret reference to a new file holding `value`.
pub fn secret_file(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-forward-{id}-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, value).expect("write secret file");
    SecretRef::from_file(id, path.display().to_string())
}

/// Which official library verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verifier {
    /// `standardwebhooks` from PyPI (the provider-SDK virtualenv), HTTP/1.1 only.
    Python,
    /// `standardwebhooks` from npm (`tests/forward/install`), HTTP/2 offered through ALPN, HTTP/1.1 too.
    Node,
}

/// Whether a downstream asks for a client certificate (mutual TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertificates {
    NotAsked,
    /// Required, and signed by the stack's CA (`client.pem` is).
    RequiredFromTheStackCa,
}

/// A running downstream: what it saw, one JSON object per request (see `tests/forward/downstream.mjs`).
#[derive(Debug)]
pub struct Downstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<serde_json::Value>>>,
    // Held so the program runs: it stops when its standard input closes, and is killed when dropped.
    _stdin: ChildStdin,
    _child: Child,
}

impl Downstream {
    /// Starts the `verifier` downstream over https (the stack's server certificate), knowing these secrets.
    pub async fn start(verifier: Verifier, secrets: &[&str]) -> Self {
        Self::start_with(verifier, secrets, ClientCertificates::NotAsked).await
    }

    /// Starts the `verifier` downstream as [`Self::start`] does, asking for client certificates as said.
    pub async fn start_with(verifier: Verifier, secrets: &[&str], client_certificates: ClientCertificates) -> Self {
        let tls = stack_tls_dir();
        let secrets_file = std::env::temp_dir().join(format!("hookline-downstream-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&secrets_file, serde_json::to_vec(secrets).expect("json")).expect("write secrets");
        let folder = repo_root().join("tests/forward");
        let mut command = match verifier {
            Verifier::Python => {
                let mut command = Command::new(sdk_python());
                command.arg(folder.join("downstream.py"));
                command
            }
            Verifier::Node => {
                let install = std::process::Command::new(folder.join("install")).output().expect("run install");
                assert!(
                    install.status.success(),
                    "tests/forward/install: {}",
                    String::from_utf8_lossy(&install.stderr)
                );
                let mut command = Command::new("node");
                command.arg(folder.join("downstream.mjs"));
                command
            }
        };
        command
            .arg("--cert")
            .arg(tls.join("server.pem"))
            .arg("--key")
            .arg(tls.join("server.key"))
            .arg("--secrets")
            .arg(&secrets_file)
            .current_dir(&folder)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if client_certificates == ClientCertificates::RequiredFromTheStackCa {
            assert_eq!(verifier, Verifier::Node, "only the Node downstream asks for client certificates");
            command.arg("--client-ca").arg(tls.join("ca.pem"));
        }
        let mut child = command.spawn().unwrap_or_else(|error| panic!("start the {verifier:?} downstream: {error}"));
        let stdin = child.stdin.take().expect("stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the {verifier:?} downstream did not start within 30 s"))
            .expect("read")
            .unwrap_or_else(|| panic!("the {verifier:?} downstream exited at start"));
        let port: serde_json::Value = serde_json::from_str(&first).expect("a JSON first line");
        let port = u16::try_from(port["port"].as_u64().expect("port")).expect("a port");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let value = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                recorded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(value);
            }
        });
        let _ = std::fs::remove_file(&secrets_file);
        Self { port, seen, _stdin: stdin, _child: child }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// Every request it received so far, in order.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

/// The provider-SDK virtualenv's python (`tests/tools/sdk-venv`), created on first use.
fn sdk_python() -> PathBuf {
    let output = std::process::Command::new(repo_root().join("tests/tools/sdk-venv"))
        .output()
        .expect("run tests/tools/sdk-venv");
    assert!(output.status.success(), "sdk-venv failed: {}", String::from_utf8_lossy(&output.stderr));
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The stack CA's PEM file, for a route's `ca_file`.
pub fn stack_ca_file() -> PathBuf {
    stack_tls_dir().join("ca.pem")
}

/// The stack's mutual-TLS client certificate (CN=hookline) and its key, as a secret reference.
pub fn stack_client_identity() -> (PathBuf, SecretRef) {
    let tls = stack_tls_dir();
    let key = tls.join("client.key").display().to_string();
    (tls.join("client.pem"), SecretRef::from_file("client-key", key))
}
