//! Consumer processes for the crash tests: the `test-consumer` binary (the real consumer with a handler that
//! announces each event on stdout) on a config written from a [`ConsumerConfig`], SIGKILLed at a known point.

use std::{
    collections::HashSet,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
};

use hookline_consumer::ConsumerConfig;

/// A consumer process, killed when dropped: a failed assertion must not leave it running.
#[derive(Debug)]
pub struct ConsumerProcess(Child);

impl ConsumerProcess {
    /// SIGKILL, and wait until it is gone.
    pub fn kill(&mut self) {
        self.0.kill().expect("SIGKILL");
        self.0.wait().expect("reaped");
    }

    /// Its process id (for `/proc/<pid>/...`).
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a consumer process printed, line by line.
pub type Announcements = Arc<Mutex<Vec<String>>>;

/// Starts `binary` (the `test-consumer` of the calling test crate: `env!("CARGO_BIN_EXE_test-consumer")`) in
/// `mode` with `config`, written as `--print-config` prints it; its stdout lines are collected.
pub fn spawn_consumer_process(binary: &Path, config: &ConsumerConfig, mode: &str) -> (ConsumerProcess, Announcements) {
    spawn_consumer_process_with_env(binary, config, mode, &[])
}

/// [`spawn_consumer_process`] with these variables set in the process's environment (`OTEL_...`).
pub fn spawn_consumer_process_with_env(
    binary: &Path,
    config: &ConsumerConfig,
    mode: &str,
    env: &[(&str, &str)],
) -> (ConsumerProcess, Announcements) {
    let config_file = std::env::temp_dir().join(format!("hookline-process-{}.toml", uuid::Uuid::new_v4()));
    let text = hookline_common::config::effective_toml(&config.effective().expect("printable config"))
        .expect("config as TOML");
    std::fs::write(&config_file, text).expect("write config");
    let mut child = Command::new(binary)
        .arg(&config_file)
        .arg(mode)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the consumer process");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().expect("stdout");
    let collected = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            collected.lock().expect("lines").push(line);
        }
    });
    (ConsumerProcess(child), lines)
}

/// The event ids the process announced with `what` (`handling` or `done`).
pub fn announced(lines: &Mutex<Vec<String>>, what: &str) -> HashSet<String> {
    let prefix = format!("{what} ");
    lines.lock().expect("lines").iter().filter_map(|line| line.strip_prefix(&prefix)).map(str::to_owned).collect()
}
