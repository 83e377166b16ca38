//! Local fakes of the provider APIs the reconciler reads, on loopback, following the providers' documented
//! request and response shapes (pagination included): GitHub's hook deliveries and Paddle Billing's
//! notifications. A redelivery or replay the fake accepts is sent to the gateway signed, as the provider would.
//! Stripe is the real `stripe-mock`, behind [`TlsFront`] for real TLS.
//!
//! Each fake records every API request (method, path and query, Authorization header, time) so tests can
//! assert on what the reconciler asked, and can be told to refuse the credential or to rate-limit.

use std::{
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

type Body = hookline_common::http::Body;

/// One request a fake received.
#[derive(Debug, Clone)]
pub struct ApiCall {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub authorization: Option<String>,
    pub at: Instant,
}

/// What every fake can be told to do besides answering: refuse, rate-limit, and who to deliver to.
#[derive(Debug, Default)]
struct Control {
    calls: Vec<ApiCall>,
    /// The next this many requests get 429 with `Retry-After: retry_after_s`.
    rate_limited: usize,
    retry_after_s: u64,
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// RFC 3339 with milliseconds, UTC, as GitHub and Paddle write times.
pub fn rfc3339(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (days, rest) = (since.as_secs() / 86_400, since.as_secs() % 86_400);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| pair.split_once('=').filter(|(key, _)| *key == name).map(|(_, value)| value))
}

/// Starts `handler` on a fresh loopback port, answering 401 without the token and 429 while rate-limited.
async fn serve_fake<F>(
    token: &str,
    control: Arc<Mutex<Control>>,
    unauthorized: serde_json::Value,
    handler: F,
) -> SocketAddr
where
    F: Fn(&str, &str) -> Response<Body> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let expected = format!("Bearer {token}");
    let handler = Arc::new(handler);
    let service = move |request: Request<hyper::body::Incoming>| {
        let control = control.clone();
        let handler = handler.clone();
        let expected = expected.clone();
        let unauthorized = unauthorized.clone();
        async move {
            let method = request.method().as_str().to_owned();
            let target = request.uri().path_and_query().map(|pq| pq.as_str().to_owned()).unwrap_or_default();
            let authorization =
                request.headers().get("authorization").and_then(|value| value.to_str().ok()).map(str::to_owned);
            let rate_limited = {
                let mut control = control.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                control.calls.push(ApiCall {
                    method: method.clone(),
                    target: target.clone(),
                    authorization: authorization.clone(),
                    at: Instant::now(),
                });
                if control.rate_limited > 0 {
                    control.rate_limited -= 1;
                    Some(control.retry_after_s)
                } else {
                    None
                }
            };
            if authorization.as_deref() != Some(expected.as_str()) {
                return json(StatusCode::UNAUTHORIZED, &unauthorized);
            }
            if let Some(retry_after_s) = rate_limited {
                let mut response = json(StatusCode::TOO_MANY_REQUESTS, &serde_json::json!({"message": "slow down"}));
                response.headers_mut().insert("retry-after", HeaderValue::from(retry_after_s));
                return response;
            }
            let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
            handler(&format!("{method} {path}"), query)
        }
    };
    tokio::spawn(hookline_common::http::serve(
        listener,
        service,
        hookline_common::http::ServeLimits::default(),
        CancellationToken::new(),
    ));
    addr
}

/// Sends a webhook to the gateway the way the provider would; returns the status it got (502 if unreachable).
async fn send_webhook(url: &str, headers: Vec<(String, String)>, body: Bytes) -> u16 {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::post(url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let Ok(request) = request.body(Full::new(body)) else { return 400 };
    match client.request(request).await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 502,
    }
}

impl Control {
    fn calls(control: &Mutex<Control>) -> Vec<ApiCall> {
        control.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).calls.clone()
    }
}

// ---------------------------------------------------------------------------------------------------- GitHub

/// One delivery of a GitHub hook, as `GET .../deliveries` lists it.
#[derive(Debug, Clone)]
pub struct GithubDelivery {
    pub id: u64,
    pub guid: String,
    pub delivered_at: String,
    pub event: String,
    pub redelivery: bool,
    pub status_code: u16,
    pub body: Bytes,
}

#[derive(Debug, Default)]
struct GithubState {
    deliveries: Vec<GithubDelivery>,
    next_id: u64,
    redelivery_requests: Vec<u64>,
    /// Every page's `next` link points at that same page (a broken or hostile API).
    looping_next: bool,
}

/// GitHub's repository hook deliveries API for one hook (`repos/acme/widgets/hooks/1`), delivering to
/// `gateway_url` signed with `secret`.
#[derive(Debug, Clone)]
pub struct FakeGithub {
    pub addr: SocketAddr,
    state: Arc<Mutex<GithubState>>,
    control: Arc<Mutex<Control>>,
    gateway_url: String,
    secret: String,
}

pub const GITHUB_HOOK: &str = "repos/acme/widgets/hooks/1";

impl FakeGithub {
    /// `page_cap`: the fake serves at most this many deliveries per page whatever `per_page` asks (GitHub's own
    /// maximum is 100), so tests exercise the `Link` pagination with a handful of deliveries.
    pub async fn start(token: &str, gateway_url: &str, secret: &str, page_cap: usize) -> Self {
        let state = Arc::new(Mutex::new(GithubState { next_id: 1_000, ..GithubState::default() }));
        let control = Arc::new(Mutex::new(Control::default()));
        let addr_cell: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (handler_state, handler_addr) = (state.clone(), addr_cell.clone());
        let redeliver_to = (gateway_url.to_owned(), secret.to_owned());
        let list_path = format!("GET /{GITHUB_HOOK}/deliveries");
        let attempts_prefix = format!("POST /{GITHUB_HOOK}/deliveries/");
        let handler = move |route: &str, query: &str| {
            let addr = handler_addr
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .unwrap_or(([127, 0, 0, 1], 0).into());
            if route == list_path {
                let per_page: usize =
                    query_param(query, "per_page").and_then(|n| n.parse().ok()).unwrap_or(30).min(100);
                let page_size = per_page.min(page_cap);
                let offset: usize = query_param(query, "cursor")
                    .and_then(|c| c.strip_prefix("v1_"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let mut newest_first = state.deliveries.clone();
                newest_first.sort_by_key(|delivery| std::cmp::Reverse(delivery.id));
                let page: Vec<serde_json::Value> = newest_first
                    .iter()
                    .skip(offset)
                    .take(page_size)
                    .map(|d| {
                        serde_json::json!({
                            "id": d.id, "guid": d.guid, "delivered_at": d.delivered_at, "redelivery": d.redelivery,
                            "duration": 0.03, "status": if d.status_code < 300 { "OK" } else { "failed to connect" },
                            "status_code": d.status_code, "event": d.event, "action": null,
                            "installation_id": null, "repository_id": 42, "throttled_at": null
                        })
                    })
                    .collect();
                let mut response = json(StatusCode::OK, &serde_json::Value::Array(page));
                if offset + page_size < newest_first.len() || state.looping_next {
                    let next_offset = if state.looping_next { offset } else { offset + page_size };
                    let next = format!(
                        "<http://{addr}/{GITHUB_HOOK}/deliveries?per_page={per_page}&cursor=v1_{next_offset}>; \
                         rel=\"next\""
                    );
                    response.headers_mut().insert("link", HeaderValue::from_str(&next).expect("link"));
                }
                return response;
            }
            if let Some(rest) = route.strip_prefix(&attempts_prefix) {
                let Some(id) = rest.strip_suffix("/attempts").and_then(|id| id.parse::<u64>().ok()) else {
                    return json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"}));
                };
                let mut state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let Some(original) = state.deliveries.iter().find(|d| d.id == id).cloned() else {
                    return json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"}));
                };
                state.redelivery_requests.push(id);
                state.next_id += 1;
                let new_id = state.next_id;
                state.deliveries.push(GithubDelivery {
                    id: new_id,
                    redelivery: true,
                    status_code: 0,
                    delivered_at: rfc3339(std::time::SystemTime::now()),
                    ..original.clone()
                });
                drop(state);
                // GitHub redelivers asynchronously after answering 202.
                let (gateway_url, secret, state) =
                    (redeliver_to.0.clone(), redeliver_to.1.clone(), handler_state.clone());
                tokio::spawn(async move {
                    let status = post_github(&gateway_url, &secret, &original).await;
                    let mut state = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    if let Some(delivery) = state.deliveries.iter_mut().find(|d| d.id == new_id) {
                        delivery.status_code = status;
                    }
                });
                return json(StatusCode::ACCEPTED, &serde_json::json!({}));
            }
            json(StatusCode::NOT_FOUND, &serde_json::json!({"message": "Not Found"}))
        };
        let unauthorized = serde_json::json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"});
        let addr = serve_fake(token, control.clone(), unauthorized, handler).await;
        *addr_cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(addr);
        Self { addr, state, control, gateway_url: gateway_url.to_owned(), secret: secret.to_owned() }
    }

    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn add(&self, body: &Bytes, event: &str, delivered_at: std::time::SystemTime) -> GithubDelivery {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.next_id += 1;
        let delivery = GithubDelivery {
            id: state.next_id,
            guid: uuid::Uuid::new_v4().to_string(),
            delivered_at: rfc3339(delivered_at),
            event: event.to_owned(),
            redelivery: false,
            status_code: 502,
            body: body.clone(),
        };
        state.deliveries.push(delivery.clone());
        delivery
    }

    /// A delivery that reached the gateway: sent now, its status recorded.
    pub async fn deliver(
        &self,
        body: impl Into<Bytes>,
        event: &str,
        delivered_at: std::time::SystemTime,
    ) -> GithubDelivery {
        let mut delivery = self.add(&body.into(), event, delivered_at);
        delivery.status_code = post_github(&self.gateway_url, &self.secret, &delivery).await;
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(stored) = state.deliveries.iter_mut().find(|d| d.id == delivery.id) {
            stored.status_code = delivery.status_code;
        }
        delivery
    }

    /// A delivery that never reached us (an outage): listed with `status_code` 502, never sent.
    pub fn drop_delivery(
        &self,
        body: impl Into<Bytes>,
        event: &str,
        delivered_at: std::time::SystemTime,
    ) -> GithubDelivery {
        self.add(&body.into(), event, delivered_at)
    }

    /// Delivery ids whose redelivery was requested (`POST .../attempts`), in order.
    pub fn redelivery_requests(&self) -> Vec<u64> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).redelivery_requests.clone()
    }

    pub fn deliveries(&self) -> Vec<GithubDelivery> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).deliveries.clone()
    }

    pub fn calls(&self) -> Vec<ApiCall> {
        Control::calls(&self.control)
    }

    /// From now on every page's `next` link points at that same page.
    pub fn loop_next_link(&self) {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).looping_next = true;
    }

    /// The next `n` requests get 429 with `Retry-After: retry_after_s`.
    pub fn rate_limit_next(&self, n: usize, retry_after_s: u64) {
        let mut control = self.control.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        control.rate_limited = n;
        control.retry_after_s = retry_after_s;
    }
}

async fn post_github(gateway_url: &str, secret: &str, delivery: &GithubDelivery) -> u16 {
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-github-delivery".to_owned(), delivery.guid.clone()),
        ("x-github-event".to_owned(), delivery.event.clone()),
        ("x-github-hook-id".to_owned(), "1".to_owned()),
        ("x-hub-signature-256".to_owned(), hookline_common::signature::github::sign(secret.as_bytes(), &delivery.body)),
    ];
    send_webhook(gateway_url, headers, delivery.body.clone()).await
}

// ---------------------------------------------------------------------------------------------------- Paddle

/// One Paddle notification, as `GET /notifications` lists it.
#[derive(Debug, Clone)]
pub struct PaddleNotification {
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    /// `delivered`, `failed`, `needs_retry` or `not_attempted`.
    pub status: String,
    pub occurred_at: String,
    /// `event` or `replay`.
    pub origin: String,
    pub notification_setting_id: String,
}

#[derive(Debug, Default)]
struct PaddleState {
    notifications: Vec<PaddleNotification>,
    next_seq: u64,
    replay_requests: Vec<String>,
}

/// Paddle Billing's notifications API for one notification destination, delivering to `gateway_url` signed
/// with `secret`.
#[derive(Debug, Clone)]
pub struct FakePaddle {
    pub addr: SocketAddr,
    state: Arc<Mutex<PaddleState>>,
    control: Arc<Mutex<Control>>,
    gateway_url: String,
    secret: String,
}

pub const PADDLE_SETTING: &str = "ntfset_01h8brhckjd6qk4n7e4py2340t";

/// The body Paddle sends for a notification: the event plus the notification's id.
pub fn paddle_body(notification: &PaddleNotification) -> Bytes {
    Bytes::from(
        serde_json::json!({
            "event_id": notification.event_id,
            "event_type": notification.event_type,
            "occurred_at": notification.occurred_at,
            "notification_id": notification.id,
            "data": {"id": "txn_01h8bx69629a16wwm9z8rjmak3", "status": "completed"}
        })
        .to_string(),
    )
}

impl FakePaddle {
    /// `page_cap` as for [`FakeGithub::start`] (Paddle's own maximum is 200).
    pub async fn start(token: &str, gateway_url: &str, secret: &str, page_cap: usize) -> Self {
        let state = Arc::new(Mutex::new(PaddleState::default()));
        let control = Arc::new(Mutex::new(Control::default()));
        let addr_cell: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (handler_state, handler_addr) = (state.clone(), addr_cell.clone());
        let replay_to = (gateway_url.to_owned(), secret.to_owned());
        let handler = move |route: &str, query: &str| {
            let addr = handler_addr
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .unwrap_or(([127, 0, 0, 1], 0).into());
            if route == "GET /notifications" {
                let per_page: usize =
                    query_param(query, "per_page").and_then(|n| n.parse().ok()).unwrap_or(50).min(200);
                let page_size = per_page.min(page_cap);
                let setting = query_param(query, "notification_setting_id");
                let after = query_param(query, "after");
                let state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                // Default order: id[DESC].
                let mut listed: Vec<&PaddleNotification> = state
                    .notifications
                    .iter()
                    .filter(|n| setting.is_none_or(|setting| setting == n.notification_setting_id))
                    .collect();
                listed.sort_by(|a, b| b.id.cmp(&a.id));
                let start =
                    after.and_then(|after| listed.iter().position(|n| n.id == after).map(|i| i + 1)).unwrap_or(0);
                let page: Vec<&PaddleNotification> = listed.iter().skip(start).take(page_size).copied().collect();
                let has_more = start + page.len() < listed.len();
                let data: Vec<serde_json::Value> = page
                    .iter()
                    .map(|n| {
                        let payload: serde_json::Value = serde_json::from_slice(&paddle_body(n)).unwrap_or_default();
                        serde_json::json!({
                            "id": n.id, "type": n.event_type, "status": n.status, "payload": payload,
                            "occurred_at": n.occurred_at, "delivered_at": null, "replayed_at": null,
                            "origin": n.origin, "last_attempt_at": n.occurred_at, "retry_at": null,
                            "times_attempted": 1, "notification_setting_id": n.notification_setting_id
                        })
                    })
                    .collect();
                let last = page.last().map(|n| n.id.clone()).unwrap_or_default();
                let base_query: String =
                    query.split('&').filter(|pair| !pair.starts_with("after=")).collect::<Vec<_>>().join("&");
                let next = format!("http://{addr}/notifications?{base_query}&after={last}");
                return json(
                    StatusCode::OK,
                    &serde_json::json!({
                        "data": data,
                        "meta": {
                            "request_id": uuid::Uuid::new_v4().to_string(),
                            "pagination": {"per_page": page_size, "next": next, "has_more": has_more, "estimated_total": listed.len()}
                        }
                    }),
                );
            }
            if let Some(id) = route.strip_prefix("POST /notifications/").and_then(|rest| rest.strip_suffix("/replay")) {
                let mut state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let Some(original) = state.notifications.iter().find(|n| n.id == id).cloned() else {
                    return json(
                        StatusCode::NOT_FOUND,
                        &serde_json::json!({"error": {"type": "request_error", "code": "not_found"}}),
                    );
                };
                state.replay_requests.push(id.to_owned());
                state.next_seq += 1;
                let replay = PaddleNotification {
                    id: format!("ntf_{:026}", state.next_seq),
                    status: "delivered".to_owned(),
                    origin: "replay".to_owned(),
                    ..original
                };
                state.notifications.push(replay.clone());
                drop(state);
                let (gateway_url, secret) = replay_to.clone();
                tokio::spawn(async move { post_paddle(&gateway_url, &secret, &replay).await });
                let reply = serde_json::json!({"data": {"notification_id": format!("ntf_{:026}", 0)}, "meta": {"request_id": "r"}});
                return json(StatusCode::ACCEPTED, &reply);
            }
            json(StatusCode::NOT_FOUND, &serde_json::json!({"error": {"type": "request_error", "code": "not_found"}}))
        };
        let unauthorized = serde_json::json!({"error": {"type": "request_error", "code": "authentication_malformed", "detail": "authentication token must be a valid API key"}, "meta": {"request_id": "r"}});
        let addr = serve_fake(token, control.clone(), unauthorized, handler).await;
        *addr_cell.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(addr);
        Self { addr, state, control, gateway_url: gateway_url.to_owned(), secret: secret.to_owned() }
    }

    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A notification of a new event, with `status`; sent to the gateway now if `status` is `delivered`.
    pub async fn notify(
        &self,
        event_type: &str,
        status: &str,
        occurred_at: std::time::SystemTime,
    ) -> PaddleNotification {
        let notification = {
            let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            state.next_seq += 1;
            let notification = PaddleNotification {
                id: format!("ntf_{:026}", state.next_seq),
                event_id: format!("evt_{}", uuid::Uuid::new_v4().simple()),
                event_type: event_type.to_owned(),
                status: status.to_owned(),
                occurred_at: rfc3339(occurred_at),
                origin: "event".to_owned(),
                notification_setting_id: PADDLE_SETTING.to_owned(),
            };
            state.notifications.push(notification.clone());
            notification
        };
        if status == "delivered" {
            let answer = post_paddle(&self.gateway_url, &self.secret, &notification).await;
            assert_eq!(answer, 202, "the gateway accepts a delivered notification");
        }
        notification
    }

    pub fn replay_requests(&self) -> Vec<String> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).replay_requests.clone()
    }

    pub fn calls(&self) -> Vec<ApiCall> {
        Control::calls(&self.control)
    }
}

async fn post_paddle(gateway_url: &str, secret: &str, notification: &PaddleNotification) -> u16 {
    let body = paddle_body(notification);
    let now_s =
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs())
            .unwrap_or(0);
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("paddle-signature".to_owned(), hookline_common::signature::paddle::sign(secret.as_bytes(), &body, now_s)),
    ];
    send_webhook(gateway_url, headers, body).await
}

// ---------------------------------------------------------------------------------------------------- Stripe

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
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("certificate");
        let ca_pem = certified.cert.pem();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
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
