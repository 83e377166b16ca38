//! A consumer process for the crash tests: the real consumer with a handler that announces each event on stdout
//! and then hangs, so a test can SIGKILL it between claim and done.
//! Usage: `test-consumer <consumer.toml>`.

use std::{io::Write, sync::Arc, time::Duration};

use hookline_common::wire::InboundEvent;
use hookline_consumer::{
    ConsumerConfig,
    handler::{BoxFuture, Handler, HandlerError},
};

#[derive(Debug)]
struct HangingHandler;

impl Handler for HangingHandler {
    fn name(&self) -> &str {
        "hanging"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "handling {}", event.meta.event_id);
                let _ = stdout.flush();
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: test-consumer <consumer.toml>"))?;
    let config = ConsumerConfig::load(Some(std::path::Path::new(&path)))?;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    hookline_consumer::run(config, admin, Arc::new(HangingHandler), tokio_util::sync::CancellationToken::new()).await?;
    Ok(())
}
