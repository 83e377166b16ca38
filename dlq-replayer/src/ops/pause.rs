//! Pausing and resuming one route of one consumer service, by hand: an operator's maintenance window on a
//! downstream. The state lives in the compacted control topic ([`hookline_common::control`]), written here through
//! the same signing producer as every other record, and every instance of the service follows it, including one
//! started later. A paused route's records wait (in memory, or in its service's retry topic); nothing is called,
//! lost, skipped or sent twice, and a resume lets them run at full speed (docs/consumer-window.md, "Holding a route").
//!
//! Readers apply a route's record only when its `at_ms` is later than the state they hold ([`PauseBook`]), so a
//! state written here is stamped later than the one it replaces, whatever this replayer's clock says. A state
//! shadowed by a later record of its key that changed nothing (an old record replayed, a tombstone) would be
//! deleted by compaction and unknown to a consumer started afterwards: [`Replayer::reassert_pauses`] (run by
//! `serve` every [`REASSERT_INTERVAL`]) writes it again so that it is its key's latest.

use std::time::Duration;

use hookline_common::{
    control::{CLOCK_SLACK_MS, PauseBook, RoutePause, ensure_control_topic, valid_route_label},
    kafka::visit_topic,
    record_auth::{RecordKind, Verdict},
    wire::now_ms,
};
use rdkafka::Message;
use serde::{Deserialize, Serialize};

use super::{OpError, Replayer, by_or_default};

/// What `pause` and `resume` take.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PauseRequest {
    /// The consumer service (its `service.name`, or else its group id).
    pub service: String,
    /// The route as the service's metrics label it: the source, or `source:type,type` for a `[[routes]]` entry
    /// limited to event types.
    pub route: String,
    /// Why (required: other operators read it).
    pub reason: String,
    /// Who asked.
    pub by: String,
}

/// How long reading the control topic may wait for its next record (the read as a whole is not bounded in time:
/// a flood of junk is read to its end).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How often `serve` writes again the route states a later record shadows.
pub const REASSERT_INTERVAL: Duration = Duration::from_secs(60);

/// How often at most a refused control record is logged while reading the topic.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Replayer {
    /// Pauses `request.route` of `request.service`: every instance stops calling its handler for that route
    /// within seconds. Returns the state written.
    pub async fn pause(&self, request: &PauseRequest) -> Result<RoutePause, OpError> {
        self.write_pause(request, true).await
    }

    /// Resumes a paused route: its waiting records run again, with a fresh retry budget.
    pub async fn resume(&self, request: &PauseRequest) -> Result<RoutePause, OpError> {
        self.write_pause(request, false).await
    }

    async fn write_pause(&self, request: &PauseRequest, paused: bool) -> Result<RoutePause, OpError> {
        let service = request.service.trim();
        let route = request.route.trim();
        let valid_service = !service.is_empty()
            && service.len() <= 100
            && service.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !valid_service {
            return Err(OpError::BadRequest(format!("`{service}` is not a service name")));
        }
        if !valid_route_label(route) {
            return Err(OpError::BadRequest(format!(
                "`{route}` is not a route: a source, or source:type,type as the service's route metrics label it"
            )));
        }
        if request.reason.trim().is_empty() {
            return Err(OpError::BadRequest("a reason is required: other operators will read it".to_owned()));
        }
        let book = self.pause_book().await?;
        let held = book.state(service, route);
        if !paused && !held.is_some_and(|held| held.paused) {
            return Err(OpError::BadRequest(format!("route `{route}` of service `{service}` is not paused")));
        }
        // Later than the state it replaces, or readers would refuse it as stale (a held time past the clock slack
        // counts as that far ahead, as readers count it).
        let now = now_ms();
        let at_ms =
            held.map_or(now, |held| now.max(held.at_ms.min(now.saturating_add(CLOCK_SLACK_MS)).saturating_add(1)));
        let pause = RoutePause {
            service: service.to_owned(),
            route: route.to_owned(),
            paused,
            by: by_or_default(&request.by),
            reason: request.reason.trim().to_owned(),
            at_ms,
        };
        let kafka = self.config.kafka.clone();
        tokio::task::spawn_blocking(move || ensure_control_topic(&kafka)).await??;
        self.write_state(&pause).await?;
        tracing::info!(service = %pause.service, route = %pause.route, paused, by = %pause.by, reason = %pause.reason, "route pause written");
        let detail = serde_json::json!({ "service": pause.service, "route": pause.route, "reason": pause.reason });
        self.audit(&pause.by, if paused { "pause" } else { "resume" }, detail).await?;
        Ok(pause)
    }

    async fn write_state(&self, pause: &RoutePause) -> Result<(), OpError> {
        self.send(pause.encode(&self.config.kafka.control_topic)).await.map(|_| ())
    }

    /// Writes again every route state that a later record of its key shadows (an old record replayed, a
    /// tombstone, anything unsigned under its key), so that compaction keeps the state and a consumer started
    /// afterwards knows it. Returns how many were written.
    pub async fn reassert_pauses(&self) -> Result<usize, OpError> {
        let book = self.pause_book().await?;
        let shadowed: Vec<RoutePause> = book.shadowed().cloned().collect();
        for pause in &shadowed {
            self.write_state(pause).await?;
            tracing::warn!(
                service = %pause.service,
                route = %pause.route,
                paused = pause.paused,
                "a route's state was shadowed by a later control record that changed nothing (an old record \
                 written again, or a tombstone): written again so that compaction keeps it"
            );
        }
        Ok(shadowed.len())
    }

    /// Runs [`Self::reassert_pauses`] every [`REASSERT_INTERVAL`] until `shutdown`.
    pub async fn keep_pauses(self, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            if let Err(error) = self.reassert_pauses().await {
                tracing::warn!(error = %error, "cannot check the control topic for shadowed route states");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REASSERT_INTERVAL) => {}
            }
        }
    }

    /// The routes paused now, across services, with who paused them, why and when. Only authentic control
    /// records count: one whose MAC does not verify is ignored (and logged, rate-limited), and a route's state
    /// is its latest by `at_ms`, not by offset.
    pub async fn pauses(&self) -> Result<Vec<RoutePause>, OpError> {
        Ok(self.pause_book().await?.paused().cloned().collect())
    }

    /// Every route's state as the control topic gives it.
    async fn pause_book(&self) -> Result<PauseBook, OpError> {
        let kafka = self.config.kafka.clone();
        let keys = self.producer.record_keys().clone();
        let book = tokio::task::spawn_blocking(move || {
            ensure_control_topic(&kafka)?;
            let mut book = PauseBook::default();
            let topic = kafka.control_topic.clone();
            let (mut logged_at, mut refused) = (None::<std::time::Instant>, 0_u64);
            visit_topic(&kafka, &topic, READ_TIMEOUT, |record| {
                let key = record.key().unwrap_or_default();
                let now = now_ms();
                let verdict =
                    keys.verify_as(RecordKind::Control, &topic, record.key(), record.payload(), record.headers(), now);
                let pause = matches!(verdict, Verdict::Authentic { .. })
                    .then(|| RoutePause::decode(key, record.payload().unwrap_or_default()))
                    .flatten();
                if pause.is_none() {
                    refused += 1;
                    if logged_at.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL) {
                        tracing::warn!(
                            offset = record.offset(),
                            outcome = verdict.label(),
                            refused_since_last_line = refused,
                            "control record refused (not authentic, or not a route pause): not applied"
                        );
                        (logged_at, refused) = (Some(std::time::Instant::now()), 0);
                    }
                }
                book.read(key, pause, now);
            })?;
            Ok::<_, rdkafka::error::KafkaError>(book)
        })
        .await??;
        Ok(book)
    }
}
