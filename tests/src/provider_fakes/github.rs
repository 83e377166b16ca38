//! GitHub's repository hook deliveries API for one hook, and its hooks list.

use hookline_common::time::{Precision, Rfc3339};
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

use super::{ApiCall, Control, json, query_param, send_webhook, serve_fake};

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

/// One hook of the fake's repository, as `GET /repos/acme/widgets/hooks` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubHook {
    pub id: u64,
    pub url: String,
    pub active: bool,
    pub events: Vec<String>,
}

#[derive(Debug, Default)]
struct GithubState {
    deliveries: Vec<GithubDelivery>,
    hooks: Vec<GithubHook>,
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
        let hooks_path = GITHUB_HOOK.rsplit_once('/').map(|(hooks, _)| hooks.to_owned()).unwrap_or_default();
        let hooks_route = format!("GET /{hooks_path}");
        let attempts_prefix = format!("POST /{GITHUB_HOOK}/deliveries/");
        let handler = move |route: &str, query: &str| {
            let addr = handler_addr
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .unwrap_or(([127, 0, 0, 1], 0).into());
            if route == hooks_route {
                let per_page: usize =
                    query_param(query, "per_page").and_then(|n| n.parse().ok()).unwrap_or(30).min(100);
                let page_size = per_page.min(page_cap);
                let page_number: usize = query_param(query, "page").and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
                let state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let offset = (page_number - 1) * page_size;
                let page: Vec<serde_json::Value> = state
                    .hooks
                    .iter()
                    .skip(offset)
                    .take(page_size)
                    .map(|hook| {
                        serde_json::json!({
                            "type": "Repository", "id": hook.id, "name": "web", "active": hook.active,
                            "events": hook.events,
                            "config": {"content_type": "json", "insecure_ssl": "0", "secret": "********", "url": hook.url},
                            "updated_at": "2026-01-01T00:00:00Z", "created_at": "2026-01-01T00:00:00Z",
                            "url": format!("http://{addr}/{hooks_path}/{}", hook.id),
                            "last_response": {"code": null, "status": "unused", "message": null}
                        })
                    })
                    .collect();
                let mut response = json(StatusCode::OK, &serde_json::Value::Array(page));
                if offset + page_size < state.hooks.len() {
                    let next = format!(
                        "<http://{addr}/{hooks_path}?per_page={per_page}&page={}>; rel=\"next\"",
                        page_number + 1
                    );
                    response.headers_mut().insert("link", HeaderValue::from_str(&next).expect("link"));
                }
                return response;
            }
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
                    delivered_at: Rfc3339::of_time(std::time::SystemTime::now(), Precision::Millis).to_string(),
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
            delivered_at: Rfc3339::of_time(delivered_at, Precision::Millis).to_string(),
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

    /// The repository's hooks, as the hooks list will show them from now on.
    pub fn set_hooks(&self, hooks: Vec<GithubHook>) {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).hooks = hooks;
    }

    pub fn hooks(&self) -> Vec<GithubHook> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).hooks.clone()
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
        ("x-hub-signature-256".to_owned(), hookline_signature::github::sign(secret.as_bytes(), &delivery.body)),
    ];
    send_webhook(gateway_url, headers, delivery.body.clone()).await
}
