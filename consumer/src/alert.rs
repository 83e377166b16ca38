//! The optional alert webhook for dead-lettered events. Aggregated: at most one message per interval, with the
//! counts by source and error class and the first few event ids, so that a storm of failures is one alert.
//! Slack-compatible: the body is `{"text": "..."}`, every interpolated value escaped as Slack requires (`&`, `<`,
//! `>`) and event ids shown as code, so an id chosen by whoever sent the event can neither mention a channel nor
//! disguise a link. Delivery is best effort (the metric and the error log line
//! per event are the primary signals); a failed post is logged and its counts are carried into the next one.

use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use hookline_common::http_client::{self, HttpsClient};
use http::{Request, Uri, header};
use http_body_util::Full;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::AlertConfig;

/// One dead-lettered event, as the alert sees it.
#[derive(Debug, Clone)]
pub struct DeadLettered {
    pub source: String,
    pub error_class: &'static str,
    pub event_id: Option<String>,
}

/// Cheap to clone; a no-op without a configured URL.
#[derive(Debug, Clone)]
pub struct Alerts {
    sender: Option<mpsc::Sender<DeadLettered>>,
}

/// Where alerts go, built from an [`AlertConfig`] with a URL: the checked URL and a client that trusts the
/// configured CA file besides the built-in roots.
#[derive(Clone)]
pub struct AlertTarget {
    url: Uri,
    client: HttpsClient,
    interval: Duration,
    max_event_ids: usize,
}

impl std::fmt::Debug for AlertTarget {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("AlertTarget").field("url", &self.url).field("interval", &self.interval).finish()
    }
}

impl AlertTarget {
    /// The target `config` describes (none without a URL); `config_dir` resolves a relative `ca_file`. Every
    /// problem is returned at once.
    pub fn build(config: &AlertConfig, config_dir: &std::path::Path) -> Result<Option<Self>, Vec<String>> {
        if config.url.is_none() && config.ca_file.is_none() {
            return Ok(None);
        }
        let mut problems = Vec::new();
        let url = config.url.as_deref().map(http_client::check_url).transpose();
        let url = url.map_err(|why| problems.push(format!("alert.url {why}"))).ok().flatten();
        let ca_file = config.ca_file.as_deref().map(|file| config_dir.join(file));
        // The CA file is checked even without a URL: a broken one is a mistake waiting for the URL.
        let client = http_client::client(ca_file.as_deref())
            .map_err(|error| problems.push(format!("alert.ca_file: {error}")))
            .ok();
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(url.zip(client).map(|(url, client)| Self {
            url,
            client,
            interval: Duration::from_secs(config.interval_s),
            max_event_ids: config.max_event_ids,
        }))
    }
}

/// Events queued for the next alert beyond this are counted but not listed.
const QUEUE: usize = 10_000;
const POST_TIMEOUT: Duration = Duration::from_secs(10);

impl Alerts {
    pub fn disabled() -> Self {
        Self { sender: None }
    }

    /// Starts the aggregator task when there is a `target`. It posts a last summary when `shutdown` fires.
    pub fn start(
        target: Option<AlertTarget>,
        shutdown: CancellationToken,
        tasks: &tokio_util::task::TaskTracker,
    ) -> Self {
        let Some(AlertTarget { url, client, interval, max_event_ids }) = target else { return Self::disabled() };
        let (sender, receiver) = mpsc::channel(QUEUE);
        tasks.spawn(aggregate(client, url, interval, max_event_ids, receiver, shutdown));
        Self { sender: Some(sender) }
    }

    pub fn dead_lettered(&self, event: DeadLettered) {
        if let Some(sender) = &self.sender {
            // A full queue means an alert is already pending with plenty to say; the metric still counts all.
            let _ = sender.try_send(event);
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    counts: BTreeMap<(String, &'static str), u64>,
    event_ids: Vec<String>,
}

impl Pending {
    fn text(&self) -> String {
        let total: u64 = self.counts.values().sum();
        let mut text = format!("hookline: {total} event(s) dead-lettered");
        for ((source, class), count) in &self.counts {
            text.push_str(&format!("\n• {}: {count} {}", escape(source), escape(class)));
        }
        if !self.event_ids.is_empty() {
            let ids: Vec<String> = self.event_ids.iter().map(|id| code(id)).collect();
            text.push_str(&format!("\nevent ids: {}", ids.join(", ")));
        }
        text.push_str("\nInspect with `hookline-replayer list`.");
        text
    }
}

/// `value` escaped as Slack's message formatting requires: `&`, `<` and `>` as entities, so no `<!channel>`
/// mention, `<@user>` or `<url|label>` link can be made from it.
fn escape(value: &str) -> String {
    value.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `value` as inline code: escaped, its backticks (which would end the code span) replaced. Slack turns no URL
/// inside code into a link.
fn code(value: &str) -> String {
    format!("`{}`", escape(value).replace('`', "'"))
}

async fn aggregate(
    client: HttpsClient,
    url: Uri,
    interval: Duration,
    max_event_ids: usize,
    mut receiver: mpsc::Receiver<DeadLettered>,
    shutdown: CancellationToken,
) {
    let mut pending = Pending::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            event = receiver.recv() => match event {
                Some(event) => {
                    *pending.counts.entry((event.source, event.error_class)).or_default() += 1;
                    if let Some(id) = event.event_id.filter(|_| pending.event_ids.len() < max_event_ids) {
                        pending.event_ids.push(id);
                    }
                    continue;
                }
                None => true,
            },
            _ = ticker.tick() => false,
            () = shutdown.cancelled() => true,
        };
        if !pending.counts.is_empty() {
            let body = serde_json::json!({ "text": pending.text() }).to_string();
            let request = Request::post(url.clone())
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)));
            let posted = match request {
                Ok(request) => match tokio::time::timeout(POST_TIMEOUT, client.request(request)).await {
                    Ok(Ok(response)) if response.status().is_success() => Ok(()),
                    Ok(Ok(response)) => Err(format!("answered {}", response.status())),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err("timed out".to_owned()),
                },
                Err(error) => Err(error.to_string()),
            };
            match posted {
                Ok(()) => pending = Pending::default(),
                Err(error) => tracing::warn!(error = %error, "alert webhook failed; will retry with the next alert"),
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_chosen_by_a_sender_cannot_mention_or_link() {
        let mut pending = Pending::default();
        pending.counts.insert(("git<hub>&".to_owned(), "poison"), 2);
        pending.event_ids.push("<!channel> <https://evil.example/|Open the DLQ console>".to_owned());
        pending.event_ids.push("a`b".to_owned());
        let text = pending.text();
        assert!(text.contains("• git&lt;hub&gt;&amp;: 2 poison"), "{text}");
        assert!(
            text.contains("event ids: `&lt;!channel&gt; &lt;https://evil.example/|Open the DLQ console&gt;`, `a'b`"),
            "{text}"
        );
        assert!(!text.contains('<') && !text.contains('>'), "no Slack control sequence survives: {text}");
    }
}
