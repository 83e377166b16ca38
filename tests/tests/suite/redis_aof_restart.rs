//! Redis that restarts: with the append-only file on (`--appendonly yes --appendfsync everysec`, as
//! docker-compose.yml runs it), Redis SIGKILLed and restarted under load keeps every done marker: nothing
//! acknowledged is lost, nothing is processed twice, and every event re-delivered afterwards is skipped as a
//! duplicate. A process kill loses nothing Redis answered (the AOF is written before the reply; `everysec` only
//! bounds what a machine crash loses, to about a second).
//!
//! The test runs its own Redis (the binary `scripts/stack` installed) on a free loopback port with its own data
//! directory, and stops it by PID.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use hookline_tests::{Delivery, TestStack, eventually};

/// A `redis-server` with the AOF on, owned by this test.
struct AofRedis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl AofRedis {
    fn start(port: u16, dir: PathBuf) -> Self {
        let mut redis = Self { port, dir, child: None };
        redis.spawn();
        redis
    }

    fn spawn(&mut self) {
        std::fs::create_dir_all(&self.dir).expect("redis dir");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "everysec"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/stack)");
        self.child = Some(child);
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill redis");
            child.wait().expect("reap redis");
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let client = redis::Client::open(self.url()).expect("client");
        eventually(Duration::from_secs(30), "redis answers (AOF loaded)", || async {
            match client.get_multiplexed_async_connection().await {
                Ok(mut connection) => {
                    redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok_and(|pong| pong == "PONG")
                }
                Err(_) => false,
            }
        })
        .await;
    }
}

impl Drop for AofRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

async fn post_all(stack: &TestStack, deliveries: &[Delivery]) {
    for delivery in deliveries {
        stack.post_accepted(delivery).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_with_aof_keeps_every_done_marker() {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("hookline-aof-{}", uuid::Uuid::new_v4().simple()));
    let mut redis = AofRedis::start(port, dir);
    redis.wait_ready().await;
    let url = redis.url();
    let stack =
        TestStack::builder().consumer_config(move |config| config.redis.url = url.clone()).consumer().build().await;
    let prefix = stack.consumer_config.redis.key_prefix.clone();
    let service = stack.consumer_config.service_name().to_owned();

    let deliveries: Vec<Delivery> = (0..300).map(|n| Delivery::new(format!(r#"{{"aof":{n}}}"#))).collect();
    post_all(&stack, &deliveries[..150]).await;
    eventually(Duration::from_secs(60), "some events processed before the crash", || async {
        stack.handler.successes().len() >= 50
    })
    .await;

    // Crash mid-stream, restart on the same data directory; the rest arrives meanwhile.
    redis.kill();
    post_all(&stack, &deliveries[150..]).await;
    redis.spawn();
    redis.wait_ready().await;
    eventually(Duration::from_secs(90), "every event processed after the restart", || async {
        deliveries.iter().all(|delivery| stack.handler.count(&delivery.delivery_id) >= 1)
    })
    .await;

    // A second crash once all is done: every done marker must come back from the AOF alone.
    tokio::time::sleep(Duration::from_millis(1_500)).await; // One `everysec` fsync period, for the record.
    redis.kill();
    redis.spawn();
    redis.wait_ready().await;
    let client = redis::Client::open(redis.url()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");
    for delivery in &deliveries {
        let outcome =
            hookline_tests::dedupe_outcome(&mut connection, &prefix, &service, "github", &delivery.delivery_id).await;
        assert!(
            matches!(outcome, Some((hookline_common::wire::dedupe_layout::Outcome::Processed { .. }, _))),
            "done outcome of {} survived two crashes: {outcome:?}",
            delivery.delivery_id
        );
    }

    // Every event delivered again (the provider's retry of each): all skipped.
    let before = stack.consumer_events("duplicate").await;
    post_all(&stack, &deliveries).await;
    eventually(Duration::from_secs(60), "every re-delivery skipped as a duplicate", || async {
        stack.consumer_events("duplicate").await - before >= 300
    })
    .await;
    for delivery in &deliveries {
        assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "processed once: {}", delivery.delivery_id);
    }
    stack.shutdown().await;
}
