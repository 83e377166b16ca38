//! The reconciler against a provider API that misbehaves, or is not the provider's at all (issue 23): its
//! credential goes only to the provider's own API host unless the source says otherwise, a `next` link that
//! repeats a page ends the listing instead of looping, and an answer larger than the bound is an error, never
//! buffered whole.

use std::time::{Duration, SystemTime};

use hookline_common::config::SecretRef;
use hookline_reconciler::{Mode, Provider, ReconcilerConfig, SourceConfig};
use hookline_tests::{
    TEST_SECRET, TestStack,
    provider_fakes::{FakeGithub, GITHUB_HOOK},
    reconciler::{API_TOKEN, TestReconciler, github_source, push_body, temp_file},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_credential_goes_only_to_the_providers_own_api_unless_the_source_allows_another() {
    let source = SourceConfig {
        api_url: Some("https://api.github.example.net".to_owned()),
        hook: Some(GITHUB_HOOK.to_owned()),
        ..SourceConfig::new("github", Provider::Github, SecretRef::from_file("github-api", temp_file("t", API_TOKEN)))
    };
    let config = ReconcilerConfig { sources: vec![source.clone()], ..ReconcilerConfig::default() };
    let problem = hookline_reconciler::Loaded::build(config).expect_err("refused").to_string();
    assert!(
        problem.contains("api_url host `api.github.example.net` is not the provider's API (api.github.com)"),
        "{problem}"
    );
    let allowed = SourceConfig { allow_custom_api_url: true, ..source };
    let config = ReconcilerConfig { sources: vec![allowed], ..ReconcilerConfig::default() };
    if let Err(problem) = hookline_reconciler::Loaded::build(config) {
        assert!(!problem.to_string().contains("api_url"), "allowed when the source says so: {problem}");
    }
}

#[tokio::test]
async fn a_next_link_that_repeats_a_page_ends_the_listing() {
    let stack = TestStack::builder().build().await;
    let gateway_url = format!("http://{}/webhooks/github", stack.gateway_addr);
    let github = FakeGithub::start(API_TOKEN, &gateway_url, TEST_SECRET, 2).await;
    for n in 0..4 {
        github.drop_delivery(push_body(n), "push", SystemTime::now());
    }
    github.loop_next_link();
    let reconciler = TestReconciler::start(&stack, vec![github_source(&github, API_TOKEN)]).await;
    let report = tokio::time::timeout(Duration::from_secs(60), reconciler.run("github", Mode::DryRun))
        .await
        .expect("the run ends")
        .expect("dry run");
    assert_eq!(report.listed, 2, "the first page, once: {report:?}");
    let lists = github.calls().iter().filter(|call| call.target.contains("/deliveries?")).count();
    assert_eq!(lists, 2, "the first page and its repeat, then no more requests");
}

#[tokio::test]
async fn an_answer_larger_than_the_bound_is_an_error_not_a_buffer() {
    let stack = TestStack::builder().build().await;
    // An "API" that announces 64 MiB and keeps sending until the client hangs up.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0_u8; 4096];
                let _ = stream.read(&mut head).await;
                let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 67108864\r\n\r\n[";
                if stream.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 1 << 20];
                for _ in 0..64 {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let source = SourceConfig {
        api_url: Some(format!("http://{addr}")),
        allow_custom_api_url: true,
        hook: Some(GITHUB_HOOK.to_owned()),
        settle_s: 0,
        ..SourceConfig::new("github", Provider::Github, SecretRef::from_file("github-api", temp_file("t", API_TOKEN)))
    };
    let reconciler = TestReconciler::start(&stack, vec![source]).await;
    let error = tokio::time::timeout(Duration::from_secs(120), reconciler.run("github", Mode::DryRun))
        .await
        .expect("the run ends")
        .expect_err("too large");
    assert!(error.to_string().contains("did not arrive"), "{error}");
}
