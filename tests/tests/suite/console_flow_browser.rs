//! The console's flow overview in a real browser (Debian's chromium, driven by playwright-core:
//! `tests/browser/flow.mjs`) while events flow through the real gateway, broker, Redis and two consumer services:
//! `billing` is healthy; `shipping`'s downstream answers 503 to everything. The browser watches the overview
//! refresh until the `github` source shows accepted and refused requests (with the refusal's code), `shipping`
//! shows retrying events, lag above `billing`'s and its failing route, and `billing` shows processed events and no
//! retries; then it pauses a route of `shipping` from its card and resumes it there. The screenshot
//! `docs/console/flow.png` is this test's.

use std::{path::PathBuf, process::Stdio, sync::Arc, time::Duration};

use hookline_dlq_replayer::config::FlowService;
use hookline_tests::{Delivery, FakeEndpoint, TestStack, browser};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn the_flow_overview_shows_the_failing_service_apart_from_the_healthy_one() {
    let browser_dir = browser::scripts_dir();
    let mut stack = TestStack::builder().build().await;
    let billing = stack.service_config("billing");
    stack.start_consumer_with(billing.clone(), stack.handler.clone()).await;
    // `shipping` posts every event to a downstream that answers 503: it retries, slowly, and dead-letters nothing
    // within the test.
    let downstream = FakeEndpoint::start().await;
    downstream.respond_with(std::iter::repeat_n(503, 100_000));
    let mut shipping = stack.service_config("shipping");
    shipping.handler.kind = "http".into();
    shipping.handler.url = Some(downstream.url("/hooks"));
    shipping.retry.max_attempts = 50;
    shipping.retry.initial_backoff_ms = 2_000;
    shipping.retry.max_backoff_ms = 10_000;
    shipping.retry.max_total_ms = 600_000;
    let shipping_group = shipping.kafka.group_id.clone();
    let loaded = hookline_consumer::Loaded::build(shipping).expect("valid config");
    let shipping_admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let shipping_url = format!("http://{}", shipping_admin.local_addr().expect("addr"));
    let shipping_stop = CancellationToken::new();
    let shipping_task = tokio::spawn(hookline_consumer::run(loaded, shipping_admin, shipping_stop.clone()));

    // Events flow for the whole test: an accepted one every 100 ms, a refused one (a wrong signature) every second.
    let stack = Arc::new(stack);
    let flowing = CancellationToken::new();
    let sender = {
        let (stack, flowing) = (stack.clone(), flowing.clone());
        tokio::spawn(async move {
            let mut n = 0_u64;
            while !flowing.is_cancelled() {
                let delivery = Delivery::new(format!(r#"{{"n":{n}}}"#).into_bytes());
                if n % 10 == 9 {
                    stack.post_signed(&delivery, "sha256=00").await;
                } else {
                    stack.post_accepted(&delivery).await;
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let token = uuid::Uuid::new_v4().simple().to_string();
    let billing_url = format!("http://{}", stack.consumers[0].admin_addr);
    let gateway_url = format!("http://{}", stack.gateway_admin_addr);
    let api = stack
        .start_replayer_api_with(&token, |config| {
            config.gateways.admin_urls = vec![gateway_url];
            config.flow.sample_interval_s = 1;
            config.flow.services = vec![
                FlowService {
                    name: "billing".to_owned(),
                    group_id: Some(billing.kafka.group_id.clone()),
                    admin_urls: vec![billing_url],
                },
                FlowService {
                    name: "shipping".to_owned(),
                    group_id: Some(shipping_group),
                    admin_urls: vec![shipping_url],
                },
            ];
        })
        .await;

    let screenshots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
    let mut node = tokio::process::Command::new("node");
    node.arg(browser_dir.join("flow.mjs"))
        .current_dir(&browser_dir)
        .env("CONSOLE_URL", format!("http://{}", api.addr))
        .env("CONSOLE_TOKEN", &token)
        .env("SOURCE", "github")
        .env("HEALTHY", "billing")
        .env("FAILING", "shipping")
        .env("SCREENSHOTS", &screenshots)
        .env("CHROMIUM", browser::chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), node.output())
        .await
        .expect("the browser test finished within 2 minutes")
        .expect("node runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    flowing.cancel();
    sender.await.expect("the sender ran");
    assert!(output.status.success(), "browser test failed:\n{log}");

    // What the browser saw, as the services saw it: the failing service's downstream was called and refused.
    assert!(!downstream.requests().is_empty(), "shipping called its downstream");
    let control = stack.records(&stack.kafka.control_topic).await;
    assert_eq!(control.len(), 2, "the overview wrote one pause and one resume");

    api.stop().await;
    shipping_stop.cancel();
    shipping_task.await.expect("shipping task").expect("shipping ran cleanly");
    Arc::into_inner(stack).expect("the sender let go of the stack").shutdown().await;
}
