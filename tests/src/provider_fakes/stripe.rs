//! `stripe-mock`, Stripe's official API mock, and a TLS front for it.

use std::{
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::net::TcpListener;

/// `stripe-mock` (Stripe's official API mock, installed by `tests/tools/stripe-mock`), on a loopback port of
/// its own, killed on drop.
#[derive(Debug)]
pub struct StripeMock {
    pub addr: SocketAddr,
    child: Child,
}

impl StripeMock {
    pub async fn start() -> Self {
        let binary = std::env::var("STRIPE_MOCK")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.stack/bin/stripe-mock"));
        assert!(
            binary.is_file(),
            "stripe-mock not found at {} (install it with tests/tools/stripe-mock; scripts/test does)",
            binary.display()
        );
        // stripe-mock takes a port, not a listener: take a free one from the OS and hand it over.
        // Its HTTPS listener (a certificate of its own) is unused, but bound to loopback too: by default it would
        // take port 12112 on every interface.
        let free_port =
            || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let (port, unused_https_port) = (free_port(), free_port());
        let child = Command::new(&binary)
            .args([
                "-http-addr",
                &format!("127.0.0.1:{port}"),
                "-https-addr",
                &format!("127.0.0.1:{unused_https_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start stripe-mock");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let started = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "stripe-mock did not listen on {addr}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { addr, child }
    }
}

impl Drop for StripeMock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TLS endpoint on loopback (a fresh self-signed certificate for 127.0.0.1) that forwards each connection's
/// decrypted bytes to `backend`: real TLS in front of a plain-HTTP fake. `ca_pem` is what a client must trust.
#[derive(Debug)]
pub struct TlsFront {
    pub addr: SocketAddr,
    pub ca_pem: String,
    connections: Arc<Mutex<usize>>,
}

impl TlsFront {
    pub async fn start(backend: SocketAddr) -> Self {
        let (acceptor, ca_pem) = crate::loopback_tls::self_signed_acceptor();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(Mutex::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let counted = counted.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else { return };
                    *counted.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
                    let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Self { addr, ca_pem, connections }
    }

    /// TLS handshakes completed so far.
    pub fn tls_connections(&self) -> usize {
        *self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
