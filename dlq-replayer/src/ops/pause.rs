//! Pausing and resuming one route of one consumer service, by hand: an operator's maintenance window on a
//! downstream. The state lives in the compacted control topic ([`hookline_common::control`]), written here through
//! the same signing producer as every other record, and every instance of the service follows it, including one
//! started later. A paused route's records wait (in memory, or in its service's retry topic); nothing is called,
//! lost, skipped or sent twice, and a resume lets them run at full speed (docs/consumer-window.md, "Holding a route").

use std::time::Duration;

use hookline_common::{
    control::{RoutePause, ensure_control_topic, valid_route_label},
    kafka::visit_topic,
    record_auth::Verdict,
    wire::now_ms,
};
use rdkafka::{Message, producer::FutureRecord};
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

/// How long reading the control topic may take.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

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
        if !paused {
            let current = self.pauses().await?;
            if !current.iter().any(|pause| pause.service == service && pause.route == route) {
                return Err(OpError::BadRequest(format!("route `{route}` of service `{service}` is not paused")));
            }
        }
        let pause = RoutePause {
            service: service.to_owned(),
            route: route.to_owned(),
            paused,
            by: by_or_default(&request.by),
            reason: request.reason.trim().to_owned(),
            at_ms: now_ms(),
        };
        let kafka = self.config.kafka.clone();
        tokio::task::spawn_blocking(move || ensure_control_topic(&kafka)).await??;
        let key = pause.key();
        let value = serde_json::to_vec(&pause).map_err(|error| OpError::BadRequest(error.to_string()))?;
        let record = FutureRecord::<str, [u8]>::to(&self.config.kafka.control_topic).key(&key).payload(&value);
        self.send(record).await?;
        tracing::info!(service = %pause.service, route = %pause.route, paused, by = %pause.by, reason = %pause.reason, "route pause written");
        Ok(pause)
    }

    /// The routes paused now, across services, with who paused them, why and when. Only authentic control
    /// records count: one whose MAC does not verify is ignored (and logged).
    pub async fn pauses(&self) -> Result<Vec<RoutePause>, OpError> {
        let kafka = self.config.kafka.clone();
        let keys = self.producer.record_keys().clone();
        let latest = tokio::task::spawn_blocking(move || {
            ensure_control_topic(&kafka)?;
            let mut latest = std::collections::BTreeMap::new();
            let topic = kafka.control_topic.clone();
            visit_topic(&kafka, &topic, READ_TIMEOUT, |record| {
                let verdict = keys.verify(&topic, record.key(), record.payload(), record.headers(), now_ms());
                if !matches!(verdict, Verdict::Authentic { .. }) {
                    tracing::warn!(
                        offset = record.offset(),
                        outcome = verdict.label(),
                        "control record refused: not applied"
                    );
                    return;
                }
                if let Some(pause) =
                    RoutePause::decode(record.key().unwrap_or_default(), record.payload().unwrap_or_default())
                {
                    latest.insert(pause.key(), pause);
                }
            })?;
            Ok::<_, rdkafka::error::KafkaError>(latest)
        })
        .await??;
        Ok(latest.into_values().filter(|pause| pause.paused).collect())
    }
}
