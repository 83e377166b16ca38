//! Paddle Billing's notifications API for one notification destination, and its destinations list.

use hookline_common::time::{Precision, Rfc3339};
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use super::{ApiCall, Control, json, query_param, send_webhook, serve_fake};

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

/// One notification destination, as `GET /notification-settings` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddleSetting {
    pub id: String,
    pub destination: String,
    pub active: bool,
    /// `platform`, `simulation` or `all`.
    pub traffic_source: String,
    pub subscribed_events: Vec<String>,
}

#[derive(Debug, Default)]
struct PaddleState {
    notifications: Vec<PaddleNotification>,
    settings: Vec<PaddleSetting>,
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
            if route == "GET /notification-settings" {
                let per_page: usize =
                    query_param(query, "per_page").and_then(|n| n.parse().ok()).unwrap_or(200).min(200);
                let page_size = per_page.min(page_cap);
                let state = handler_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let mut listed: Vec<&PaddleSetting> = state.settings.iter().collect();
                listed.sort_by(|a, b| b.id.cmp(&a.id));
                let start = query_param(query, "after")
                    .and_then(|after| listed.iter().position(|setting| setting.id == after).map(|i| i + 1))
                    .unwrap_or(0);
                let page: Vec<&PaddleSetting> = listed.iter().skip(start).take(page_size).copied().collect();
                let has_more = start + page.len() < listed.len();
                let data: Vec<serde_json::Value> = page
                    .iter()
                    .map(|setting| {
                        let events: Vec<serde_json::Value> = setting
                            .subscribed_events
                            .iter()
                            .map(|name| serde_json::json!({"name": name, "description": "", "group": "", "available_versions": [1]}))
                            .collect();
                        serde_json::json!({
                            "id": setting.id, "description": "hookline", "type": "url",
                            "destination": setting.destination, "active": setting.active, "api_version": 1,
                            "include_sensitive_fields": false, "subscribed_events": events,
                            "endpoint_secret_key": "pdl_ntfset_01_secret_not_for_the_reconciler",
                            "traffic_source": setting.traffic_source
                        })
                    })
                    .collect();
                let last = page.last().map(|setting| setting.id.clone()).unwrap_or_default();
                let next = format!("http://{addr}/notification-settings?per_page={per_page}&after={last}");
                return page_reply(&data, page_size, &next, has_more, listed.len());
            }
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
                return page_reply(&data, page_size, &next, has_more, listed.len());
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
                occurred_at: Rfc3339::of_time(occurred_at, Precision::Millis).to_string(),
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

    /// The notification destinations, as the settings list will show them from now on.
    pub fn set_settings(&self, settings: Vec<PaddleSetting>) {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).settings = settings;
    }

    pub fn settings(&self) -> Vec<PaddleSetting> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).settings.clone()
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
        ("paddle-signature".to_owned(), hookline_signature::paddle::sign(secret.as_bytes(), &body, now_s)),
    ];
    send_webhook(gateway_url, headers, body).await
}

/// A page of a Paddle list endpoint: the items and Paddle's `meta.pagination`.
fn page_reply(
    data: &[serde_json::Value],
    per_page: usize,
    next: &str,
    has_more: bool,
    estimated_total: usize,
) -> Response<Full<Bytes>> {
    json(
        StatusCode::OK,
        &serde_json::json!({
            "data": data,
            "meta": {
                "request_id": uuid::Uuid::new_v4().to_string(),
                "pagination": {"per_page": per_page, "next": next, "has_more": has_more, "estimated_total": estimated_total}
            }
        }),
    )
}
