//! The gateway as a process of its own (the calling test crate's `test-gateway`, the real gateway as its binary
//! runs it), killed when dropped: for tests that measure what the gateway process itself holds, or that need its
//! environment apart from the test's (traces exported over OTLP).

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
};

use hookline_common::config::{KafkaConfig, SecretRef};
use hookline_gateway::{
    GatewayConfig,
    config::{Limits, ProducerConfig, SourceConfig},
};

use crate::TEST_SECRET;

/// A gateway on `kafka` with one `github` source signed with [`TEST_SECRET`] (from a file, as the gateway reads
/// secrets), listening on loopback port 0, with `limits`.
pub fn github_gateway_config(kafka: &KafkaConfig, limits: Limits) -> GatewayConfig {
    let secret_file = std::env::temp_dir().join(format!("hookline-gateway-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&secret_file, TEST_SECRET).expect("write the secret file");
    GatewayConfig {
        listen_addr: "127.0.0.1:0".to_owned(),
        admin_addr: "127.0.0.1:0".to_owned(),
        kafka: kafka.clone(),
        producer: ProducerConfig::default(),
        limits,
        reload_token: None,
        rejections_token: None,
        telemetry: Default::default(),
        key_fetch: Default::default(),
        sources: vec![SourceConfig {
            max_body_bytes: 64 * 1024,
            type_from_header: Some(true),
            ..SourceConfig::new(
                "github",
                "github",
                vec![SecretRef::from_file("primary", secret_file.display().to_string())],
            )
        }],
    }
}

#[derive(Debug)]
pub struct GatewayProcess {
    child: Child,
    pub public: SocketAddr,
    pub admin: SocketAddr,
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GatewayProcess {
    /// Starts `binary` (`env!("CARGO_BIN_EXE_test-gateway")`) on `config`, with `env` set in its environment;
    /// returns once it listens.
    pub fn start(binary: &Path, config: &GatewayConfig, env: &[(&str, &str)]) -> Self {
        let text = hookline_common::config::effective_toml(&config.effective().expect("printable config"))
            .expect("config as TOML");
        let config_file = std::env::temp_dir().join(format!("hookline-gateway-{}.toml", uuid::Uuid::new_v4().simple()));
        std::fs::write(&config_file, text).expect("write the config");
        let mut child = Command::new(binary)
            .arg(&config_file)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start test-gateway");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let listening = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("listening ").map(str::to_owned))
            .expect("test-gateway says where it listens");
        // Whatever it logs later is read and dropped, so a full pipe never blocks it.
        std::thread::spawn(move || lines.for_each(drop));
        let (public, admin) = listening.split_once(' ').expect("two addresses");
        Self { child, public: public.parse().expect("public address"), admin: admin.parse().expect("admin address") }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}
