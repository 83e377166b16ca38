//! The console and API called in-process through the router (`tower::ServiceExt::oneshot`), with no listener and
//! no broker: what these pages and checks answer does not need Kafka (the index is left unbuilt, so an index read
//! answers "not ready").

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, body::Body};
use hookline_common::{
    config::SecretRef,
    http::{PeerAddr, Readiness},
};
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use prometheus::Registry;
use secrecy::SecretSlice;
use tower::ServiceExt as _;

use crate::{
    api::Api,
    config::ReplayerConfig,
    flow::Flow,
    lookup::Lookup,
    metrics::Metrics,
    ops::Replayer,
    rejections::Gatherer,
    session::{COOKIE, Console},
};

const TOKEN: &str = "an-in-process-test-token-of-forty-chars-x";

fn router() -> Router {
    router_with(ReplayerConfig::default()).0
}

/// The router over the default config, and the replayer it serves.
fn router_and_replayer() -> (Router, Replayer) {
    let (router, _, replayer) = router_parts(ReplayerConfig::default());
    (router, replayer)
}

/// The router over `config`, and its flow sampler (which nothing runs: a test samples it itself).
fn router_with(config: ReplayerConfig) -> (Router, Arc<Flow>) {
    let (router, flow, _) = router_parts(config);
    (router, flow)
}

fn router_parts(mut config: ReplayerConfig) -> (Router, Arc<Flow>, Replayer) {
    // Reading the index checks status records with the record keys: the index needs one to be made (it is never
    // read here).
    let key = std::env::temp_dir().join(format!("hookline-replayer-app-test-key-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&key, "an-in-process-record-key-of-32-bytes-or-more").expect("key file");
    config.kafka.record_auth.keys = vec![SecretRef::from_file("k1", key.to_string_lossy())];
    let registry = Registry::new();
    let metrics = Metrics::register(&registry).expect("metrics");
    let index = Arc::new(Replayer::empty_index(&config).expect("index"));
    let replayer = Replayer::live(config.clone(), index).expect("replayer");
    let _ = std::fs::remove_file(&key);
    let flow = Arc::new(Flow::new(&config).expect("flow"));
    let router = super::router(Arc::new(Api {
        replayer: replayer.clone(),
        token: Some(SecretSlice::from(TOKEN.as_bytes().to_vec())),
        tokens: Arc::new(crate::identity::tokens::LiveTokens::read_to_end_of_nothing()),
        oidc: None,
        registry,
        readiness: Arc::new(Readiness::default()),
        metrics,
        console: Console::default(),
        rejections: Gatherer::new(&config.gateways).expect("gatherer"),
        lookup: Lookup::new(replayer.clone()),
        flow: flow.clone(),
    }));
    (router, flow, replayer)
}

/// A request as the listener hands it on: with the peer's address.
fn request(method: &str, path: &str, peer: &str) -> http::request::Builder {
    let peer: SocketAddr = format!("{peer}:40000").parse().expect("peer");
    let mut builder = Request::builder().method(method).uri(path).header(header::HOST, "127.0.0.1:9092");
    if let Some(extensions) = builder.extensions_mut() {
        extensions.insert(PeerAddr(peer));
    }
    builder
}

async fn call(router: &Router, request: Request<Body>) -> (Response<Body>, String) {
    let response = router.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (Response::from_parts(parts, Body::empty()), String::from_utf8_lossy(&bytes).into_owned())
}

fn form(pairs: &[(&str, &str)]) -> Body {
    Body::from(form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish())
}

/// Logs in with the token; the session cookie and the CSRF token of the session's pages.
async fn log_in(router: &Router) -> (String, String) {
    let login = request("POST", "/ui/login", "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("token", TOKEN)]))
        .expect("request");
    let (response, _) = call(router, login).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[header::LOCATION], "/ui/");
    let set_cookie = response.headers()[header::SET_COOKIE].to_str().expect("cookie").to_owned();
    assert!(set_cookie.starts_with(&format!("{COOKIE}=")), "{set_cookie}");
    assert!(set_cookie.ends_with("; Path=/ui; Max-Age=43200; Secure; HttpOnly; SameSite=Strict"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().expect("pair").to_owned();
    let page = request("GET", "/ui/pauses", "127.0.0.1").header(header::COOKIE, &cookie).body(Body::empty());
    let (_, html) = call(router, page.expect("request")).await;
    let csrf = html
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF field in the page")
        .to_owned();
    (cookie, csrf)
}

#[tokio::test]
async fn a_hostile_value_is_escaped_in_the_page() {
    let router = router();
    let (cookie, _) = log_in(&router).await;
    let hostile = "\"><script>alert(1)</script>";
    let query: String = form_urlencoded::Serializer::new(String::new()).append_pair("source", hostile).finish();
    let page = request("GET", &format!("/ui/search?{query}"), "127.0.0.1").header(header::COOKIE, &cookie);
    let (response, html) = call(&router, page.body(Body::empty()).expect("request")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(html.contains(r#"value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;""#), "{html}");
    assert!(!html.contains("<script>alert"), "{html}");
    let csp = response.headers()["content-security-policy"].to_str().expect("CSP");
    assert!(csp.starts_with("default-src 'none'; script-src 'self'"), "{csp}");
    assert_eq!(response.headers()["x-frame-options"], "DENY");

    // A query the list refuses names the parameter, escaped, in a 400 page.
    let page = request("GET", "/ui/entries?%3Cb%3E=1", "127.0.0.1").header(header::COOKIE, &cookie);
    let (response, html) = call(&router, page.body(Body::empty()).expect("request")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(html.contains("unknown query parameter `&lt;b&gt;`") && !html.contains("<b>"), "{html}");
}

#[tokio::test]
async fn a_post_without_its_csrf_token_or_from_another_site_is_refused() {
    let router = router();
    let (cookie, csrf) = log_in(&router).await;
    let post = |pairs: &[(&str, &str)], origin: Option<&str>| {
        let mut builder = request("POST", "/ui/pauses/pause", "127.0.0.1")
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            builder = builder.header(header::ORIGIN, origin);
        }
        builder.body(form(pairs)).expect("request")
    };
    let fields = [("service", "billing"), ("route", "github"), ("reason", "test")];
    let (response, html) = call(&router, post(&fields, None)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(html.contains("CSRF token is missing or stale"), "{html}");
    let (response, _) = call(&router, post(&[("csrf", "not-the-token"), fields[0], fields[1]], None)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let with_token = [("csrf", csrf.as_str()), fields[0], fields[1], fields[2]];
    let (response, html) = call(&router, post(&with_token, Some("https://evil.example"))).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(html.contains("posted from another site"), "{html}");
    // The right token passes the checks: an unknown action is then "no such action", not a refusal.
    let unknown = request("POST", "/ui/entries", "127.0.0.1")
        .header(header::COOKIE, &cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("csrf", csrf.as_str())]))
        .expect("request");
    let (response, html) = call(&router, unknown).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(html.contains("no such action"), "{html}");
    // Without a session a page sends the browser to the login, and other methods are answered it with 401.
    let (response, _) = call(&router, request("GET", "/ui/entries", "127.0.0.1").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (response.status(), &response.headers()[header::LOCATION]),
        (StatusCode::SEE_OTHER, &"/ui/login".parse().unwrap())
    );
    let (response, _) = call(&router, request("HEAD", "/ui/entries", "127.0.0.1").body(Body::empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let head = request("HEAD", "/ui/entries", "127.0.0.1").header(header::COOKIE, &cookie).body(Body::empty());
    let (response, _) = call(&router, head.unwrap()).await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "HEAD is not answered like GET");
}

#[tokio::test]
async fn the_login_throttle_answers_429_to_an_address_wrong_tokens_but_never_refuses_the_right_one() {
    let router = router();
    let wrong_login = |peer: &str| {
        request("POST", "/ui/login", peer)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(&[("token", "wrong")]))
            .expect("request")
    };
    for _ in 0..10 {
        let (response, html) = call(&router, wrong_login("203.0.113.7")).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(html.contains("wrong token"), "{html}");
    }
    let (response, html) = call(&router, wrong_login("203.0.113.7")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[header::RETRY_AFTER], "300");
    assert!(html.contains("too many wrong tokens"), "{html}");
    // The API shares the throttle: a wrong bearer token from that address is answered 429 too.
    let api = |token: &str| {
        let api = request("GET", "/v1/rejections", "203.0.113.7");
        api.header(header::AUTHORIZATION, format!("Bearer {token}")).body(Body::empty()).expect("request")
    };
    let (response, body) = call(&router, api("wrong")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    // The right token is never refused: behind a proxy every operator shares the guesser's address.
    let (response, body) = call(&router, api(TOKEN)).await;
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    let (response, _) = call(&router, wrong_login("203.0.113.8")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "another address is not throttled");
}

#[tokio::test]
async fn ten_wrong_tokens_from_an_address_do_not_lock_out_a_login_with_the_right_token_from_it() {
    let router = router();
    for _ in 0..10 {
        let wrong = request("POST", "/ui/login", "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(&[("token", "wrong")]))
            .expect("request");
        assert_eq!(call(&router, wrong).await.0.status(), StatusCode::UNAUTHORIZED);
    }
    // Asserts the 303 and the session cookie.
    log_in(&router).await;
}

#[tokio::test]
async fn an_event_search_past_the_concurrency_cap_is_refused_with_429_and_retry_after() {
    let (router, replayer) = router_and_replayer();
    // A search running: its scan holds the one place.
    let running = replayer.searches.clone().try_acquire_owned().expect("the place is free");
    assert_eq!(replayer.searches_running(), 1);
    let query = "source=github&since=2026-01-01T00:00:00Z";
    let api = request("GET", &format!("/v1/events?{query}"), "127.0.0.1")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("request");
    let (response, body) = call(&router, api).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(response.headers()[header::RETRY_AFTER], "5");
    assert!(body.contains("\"busy\""), "{body}");
    let (cookie, _) = log_in(&router).await;
    let page = request("GET", &format!("/ui/search?{query}"), "127.0.0.1").header(header::COOKIE, &cookie);
    let (response, html) = call(&router, page.body(Body::empty()).expect("request")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{html}");
    assert!(html.contains("an event search is running already"), "{html}");
    drop(running);
    assert_eq!(replayer.searches_running(), 0);
}

#[tokio::test]
async fn api_routes_answer_json_and_their_errors_with_statuses() {
    let router = router();
    let get = |path: &str, token: Option<&str>| {
        let mut builder = request("GET", path, "127.0.0.1");
        if let Some(token) = token {
            builder = builder.header(header::AUTHORIZATION, format!("bearer {token}"));
        }
        builder.body(Body::empty()).expect("request")
    };
    let (response, body) = call(&router, get("/v1/rejections", Some(TOKEN))).await;
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["unreachable"], serde_json::json!([]), "{answer}");
    assert!(answer["sources"].is_object(), "{answer}");

    let (response, body) = call(&router, get("/v1/rejections?colour=red", Some(TOKEN))).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["error"]["code"], "bad_request", "{answer}");

    // The index is not built: a read says so, with a retry hint.
    let (response, body) = call(&router, get("/v1/entries", Some(TOKEN))).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    assert!(body.contains(r#""code":"not_ready""#), "{body}");

    let (response, _) = call(&router, get("/v1/no-such-route", None)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "an unknown API path needs the token too");
    assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let (response, body) = call(&router, get("/v1/no-such-route", Some(TOKEN))).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(body.contains(r#""code":"not_found""#), "{body}");
    let post_only = request("GET", "/v1/replay", "127.0.0.1").header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    let (response, _) = call(&router, post_only.body(Body::empty()).expect("request")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "a wrong method is a 404, as before");
    let (response, body) = call(&router, get("/v1/events/github", Some(TOKEN))).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");

    let (response, body) = call(&router, get("/livez", None)).await;
    assert_eq!((response.status(), body.as_str()), (StatusCode::OK, "ok\n"));
    let (response, _) = call(&router, get("/nothing-here", None)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

/// A consumer's admin listener on loopback whose `/metrics` says `processed` is 10 more at each scrape, and that
/// the `github` route's breaker is open.
async fn fake_consumer_metrics() -> (String, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handler = move |_request: Request<hyper::body::Incoming>| {
        let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let text = format!(
            "hookline_consumer_events_total{{outcome=\"processed\",source=\"github\"}} {}\n\
             hookline_consumer_events_total{{outcome=\"retry_scheduled\",source=\"github\"}} {n}\n\
             hookline_consumer_route_breaker_open{{route=\"github\"}} 1\n\
             hookline_consumer_route_waiting_records{{route=\"github\"}} 4\n\
             hookline_consumer_route_oldest_waiting_age_seconds{{route=\"github\"}} 75\n",
            10 * n
        );
        async move { Response::new(hookline_common::http::Body::from(text)) }
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(hookline_common::http::serve(
        listener,
        handler,
        hookline_common::http::ServeLimits::default(),
        shutdown.clone(),
    ));
    (url, shutdown)
}

#[test]
fn the_overview_charts_what_was_sampled_and_names_what_could_not_be_read() {
    // Reads of the unreachable broker go on in blocking tasks after the pages gave up on them: the runtime is left
    // without waiting for them.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(overview_with_unreadable_sources());
    runtime.shutdown_background();
}

async fn overview_with_unreadable_sources() {
    let (consumer_url, consumer_stop) = fake_consumer_metrics().await;
    let mut config = ReplayerConfig::default();
    // No broker listens there: the service's lag cannot be read, and the page must say so rather than show 0.
    config.kafka.brokers = "127.0.0.1:9".to_owned();
    config.gateways.admin_urls = vec!["http://127.0.0.1:9".to_owned()];
    config.flow.services =
        vec![crate::config::FlowService { name: "billing".to_owned(), group_id: None, admin_urls: vec![consumer_url] }];
    let (router, flow) = router_with(config);
    let (cookie, _) = log_in(&router).await;
    let overview = || request("GET", "/ui/", "127.0.0.1").header(header::COOKIE, &cookie).body(Body::empty());

    let (response, html) = call(&router, overview().expect("request")).await;
    assert_eq!(response.status(), StatusCode::OK, "the flow does not wait for the index: {html}");
    assert!(html.contains("No sample yet"), "{html}");
    assert!(html.contains(r#"id="index-not-ready""#), "{html}");
    assert!(html.contains(r#"data-refresh-s="30""#), "the overview refreshes itself: {html}");

    flow.sample_now().await;
    flow.sample_now().await;
    let (_, html) = call(&router, overview().expect("request")).await;
    let card = html.split(r#"<div class="card flow" data-service="billing">"#).nth(1).expect("the billing card");
    assert!(card.contains(r#"class="outcome processed" data-count="10""#), "10 processed between scrapes: {card}");
    assert!(card.contains(r#"class="outcome retrying" data-count="1""#), "{card}");
    assert!(card.contains(r#"class="outcome dead-lettered" data-count="0""#), "{card}");
    assert!(card.contains("open: github"), "the open breaker: {card}");
    assert!(card.contains("4 records, the oldest 75 s old"), "{card}");
    assert!(card.contains(r#"class="lag problem""#) && card.contains("unknown: Kafka"), "unread lag is no 0: {card}");
    assert!(card.contains(r#"href="/ui/entries?service=billing""#), "{card}");
    assert!(card.contains(r#"action="/ui/pauses/pause""#), "the Pause form of the Routes page: {card}");
    let unreachable = html.split(r#"id="gateways-unreachable""#).nth(1).expect("the unreachable gateway is named");
    assert!(unreachable.contains("http://127.0.0.1:9"), "{unreachable}");
    assert!(html.contains(r#"aria-label="billing events per minute""#), "{html}");
    consumer_stop.cancel();
}
