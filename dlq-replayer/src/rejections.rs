//! The gateways' recent rejections in one place: each gateway replica keeps its own last rejections per source
//! (`GET /admin/rejections` on its admin listener); behind a load balancer a sender's refused requests are spread
//! over every replica, so "why are my Stripe webhooks getting 401?" needs all of them. On each request the
//! replayer asks every configured gateway at once, within [`FETCH_TIMEOUT`] and reading at most
//! [`MAX_RESPONSE_BYTES`] of each answer, and merges the answers per source, newest first, each entry tagged
//! with the gateway that refused it. A gateway that does not answer (or answers something else) is listed with
//! the reason and never fails the whole answer: the replicas that did answer are what an operator needs.
//!
//! Nothing is kept between requests. What a gateway answers is data from another process: the console escapes
//! every value of it like any other.

use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use hookline_common::http_client::{self, HttpsClient};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::config::GatewaysConfig;

/// How long one gateway has to answer, body included: a replica that is down or hung is reported, not waited for.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest answer read from one gateway. A gateway's answer is at most 100 entries per source of a few
/// hundred bytes each, tens of kilobytes per source; 4 MiB leaves room for a large source table and bounds what a
/// misbehaving endpoint at a configured URL can make the replayer hold.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// The gateway route gathered from (`gateway::rejection_ring::REJECTIONS_PATH`).
const REJECTIONS_PATH: &str = "/admin/rejections";

/// One refused request (or answered handshake) as a gateway reports it (its `RejectionEntry`), plus which gateway.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GatheredEntry {
    /// The name the gateway gave itself (its host name, the pod's name under Kubernetes).
    pub gateway: String,
    /// When it was refused, ms since the Unix epoch.
    pub at_ms: i64,
    /// The code the sender got in its answer (`signature_mismatch`, `timestamp_stale`, …).
    pub code: String,
    /// The HTTP status the sender got.
    pub status: u16,
    /// The ids of the secrets the signature was checked against.
    #[serde(default)]
    pub secrets_tried: Vec<String>,
    /// The signed timestamp minus the gateway's clock, in ms, for a stale or future timestamp.
    #[serde(default)]
    pub skew_ms: Option<i64>,
    /// The client address the request came from.
    #[serde(default)]
    pub peer: Option<String>,
    /// The event id, when it was known before the refusal.
    #[serde(default)]
    pub event_id: Option<String>,
    /// For a handshake the gateway answered (code `handshake`): its kind. Absent for a rejection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake: Option<String>,
}

/// A configured gateway that gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreachable {
    /// The configured admin URL (its name is unknown: it did not answer).
    pub url: String,
    /// Why: refused connection, timeout, a status, an unreadable or oversized body.
    pub reason: String,
}

/// The merged answer of `GET /v1/rejections`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gathered {
    /// The names of the gateways that answered, in configured order.
    pub gateways: Vec<String>,
    /// Every answering gateway's entries, per source, newest first.
    pub sources: BTreeMap<String, Vec<GatheredEntry>>,
    /// The configured gateways that did not answer, in configured order.
    pub unreachable: Vec<Unreachable>,
}

/// One gateway's answer (`{"gateway": <name>, "sources": {<source>: [entries newest first]}}`).
#[derive(Debug, Deserialize)]
struct GatewayAnswer {
    gateway: String,
    sources: BTreeMap<String, Vec<AnswerEntry>>,
}

/// [`GatheredEntry`] without its gateway, as the gateway writes it.
#[derive(Debug, Deserialize)]
struct AnswerEntry {
    at_ms: i64,
    code: String,
    status: u16,
    #[serde(default)]
    secrets_tried: Vec<String>,
    #[serde(default)]
    skew_ms: Option<i64>,
    #[serde(default)]
    peer: Option<String>,
    #[serde(default)]
    event_id: Option<String>,
    #[serde(default)]
    handshake: Option<String>,
}

/// Asks the configured gateways for their rejections.
#[derive(Debug)]
pub struct Gatherer {
    client: HttpsClient,
    admin_urls: Vec<String>,
    token: Option<SecretString>,
}

/// Why the gateways' rejections cannot be gathered: said at start, and `serve` stops.
#[derive(Debug, thiserror::Error)]
pub enum GathererError {
    #[error("cannot build the gateways' HTTP client: {0}")]
    Client(#[source] http_client::ClientError),
    #[error("gateways.token: {0}")]
    Token(#[source] hookline_common::config::SecretError),
    #[error("gateways.token is not UTF-8")]
    TokenNotUtf8(#[source] std::string::FromUtf8Error),
}

impl Gatherer {
    /// A gatherer for `config`'s gateways, with the token already read (so a missing token file stops `serve`
    /// at start rather than every request).
    pub fn new(config: &GatewaysConfig) -> Result<Self, GathererError> {
        let client = http_client::client_with(http_client::ClientOptions {
            connect_timeout: Some(FETCH_TIMEOUT),
            ..http_client::ClientOptions::default()
        })
        .map_err(GathererError::Client)?;
        let token = match &config.token {
            Some(secret) => {
                let bytes = secret.load().map_err(GathererError::Token)?;
                let text = String::from_utf8(bytes).map_err(GathererError::TokenNotUtf8)?;
                Some(SecretString::from(text))
            }
            None => None,
        };
        Ok(Self { client, admin_urls: config.admin_urls.clone(), token })
    }

    /// Whether any gateway is configured.
    pub fn is_configured(&self) -> bool {
        !self.admin_urls.is_empty()
    }

    /// Every configured gateway's rejections (only `source`'s, when given), asked concurrently and merged.
    pub async fn gather(&self, source: Option<&str>) -> Gathered {
        let mut asks = tokio::task::JoinSet::new();
        for (position, url) in self.admin_urls.iter().enumerate() {
            let request = self.request(url, source);
            let client = self.client.clone();
            asks.spawn(async move { (position, fetch(client, request).await) });
        }
        // A slot whose task did not finish (it panicked) keeps this reason.
        let mut answers: Vec<Result<GatewayAnswer, String>> =
            self.admin_urls.iter().map(|_| Err("the fetch task failed".to_owned())).collect();
        while let Some(joined) = asks.join_next().await {
            match joined {
                Ok((position, answer)) => answers[position] = answer,
                Err(error) => tracing::warn!(error = %error, "a gateway fetch task failed"),
            }
        }
        assemble(self.admin_urls.iter().map(String::as_str).zip(answers))
    }

    fn request(&self, url: &str, source: Option<&str>) -> Result<Request<Full<Bytes>>, String> {
        let mut uri = format!("{}{REJECTIONS_PATH}", url.trim_end_matches('/'));
        if let Some(source) = source {
            uri.push_str("?source=");
            uri.extend(form_urlencoded::byte_serialize(source.as_bytes()));
        }
        let mut request = Request::get(uri).header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {}", token.expose_secret()));
        }
        request.body(Full::default()).map_err(|error| format!("cannot build the request: {error}"))
    }
}

/// One gateway's answer, or why there is none; the whole exchange within [`FETCH_TIMEOUT`].
async fn fetch(client: HttpsClient, request: Result<Request<Full<Bytes>>, String>) -> Result<GatewayAnswer, String> {
    let request = request?;
    let exchange = async {
        let response = client.request(request).await.map_err(|error| describe_client_error(&error))?;
        let status = response.status();
        let read = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect().await;
        let body = match read {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(format!("answer larger than {} MiB", MAX_RESPONSE_BYTES / (1024 * 1024)));
            }
            Err(error) => return Err(format!("the answer could not be read: {error}")),
        };
        if status != StatusCode::OK {
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|value| value["error"]["code"].as_str().map(str::to_owned));
            return Err(match code {
                Some(code) => format!("answered {} ({code})", status.as_u16()),
                None => format!("answered {}", status.as_u16()),
            });
        }
        serde_json::from_slice::<GatewayAnswer>(&body).map_err(|error| format!("not a rejections answer: {error}"))
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))
}

/// A client error with its cause (hyper's own message is only "client error (Connect)").
pub(crate) fn describe_client_error(error: &hyper_util::client::legacy::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// The merged answer from each configured URL's answer (in configured order): entries per source, newest first.
fn assemble<'a>(answers: impl Iterator<Item = (&'a str, Result<GatewayAnswer, String>)>) -> Gathered {
    let mut gathered = Gathered::default();
    for (url, answer) in answers {
        match answer {
            Ok(answer) => merge(&mut gathered, answer),
            Err(reason) => {
                tracing::info!(gateway = %url, error = %reason, "a gateway did not give its rejections");
                gathered.unreachable.push(Unreachable { url: url.to_owned(), reason });
            }
        }
    }
    for entries in gathered.sources.values_mut() {
        // Stable: entries of one instant keep their gateway's order, gateways in configured order.
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.at_ms));
    }
    gathered
}

fn merge(gathered: &mut Gathered, answer: GatewayAnswer) {
    let GatewayAnswer { gateway, sources } = answer;
    for (source, entries) in sources {
        let merged = gathered.sources.entry(source).or_default();
        merged.extend(entries.into_iter().map(|entry| GatheredEntry {
            gateway: gateway.clone(),
            at_ms: entry.at_ms,
            code: entry.code,
            status: entry.status,
            secrets_tried: entry.secrets_tried,
            skew_ms: entry.skew_ms,
            peer: entry.peer,
            event_id: entry.event_id,
            handshake: entry.handshake,
        }));
    }
    gathered.gateways.push(gateway);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(gateway: &str, json: serde_json::Value) -> GatewayAnswer {
        serde_json::from_value(serde_json::json!({ "gateway": gateway, "sources": json })).expect("answer")
    }

    #[test]
    fn answers_merge_per_source_newest_first_each_entry_tagged_with_its_gateway() {
        let entry = |at_ms: i64, code: &str| {
            serde_json::json!({ "at_ms": at_ms, "code": code, "status": 401, "secrets_tried": ["2026-12"],
                                "skew_ms": null, "peer": "10.0.0.1", "event_id": null })
        };
        let gathered = assemble(
            [
                (
                    "http://gateway-0:9091",
                    Ok(answer("gateway-0", serde_json::json!({ "stripe": [entry(30, "a"), entry(10, "b")] }))),
                ),
                ("http://gateway-2:9091", Err("no answer within 2 s".to_owned())),
                (
                    "http://gateway-1:9091",
                    Ok(answer(
                        "gateway-1",
                        serde_json::json!({ "stripe": [entry(20, "c")], "github": [entry(5, "d")] }),
                    )),
                ),
            ]
            .into_iter(),
        );
        let stripe: Vec<(&str, i64, &str)> = gathered.sources["stripe"]
            .iter()
            .map(|entry| (entry.gateway.as_str(), entry.at_ms, entry.code.as_str()))
            .collect();
        assert_eq!(stripe, [("gateway-0", 30, "a"), ("gateway-1", 20, "c"), ("gateway-0", 10, "b")]);
        assert_eq!(gathered.sources["github"][0].gateway, "gateway-1");
        assert_eq!(gathered.gateways, ["gateway-0", "gateway-1"]);
        let unreachable =
            Unreachable { url: "http://gateway-2:9091".to_owned(), reason: "no answer within 2 s".to_owned() };
        assert_eq!(gathered.unreachable, [unreachable], "a gateway that did not answer is named, the others served");
    }
}
