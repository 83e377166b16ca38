//! The route pause (the compacted control topic): an operator paused or resumed one route of one consumer service.
//! Key: `route-pause:<service>:<route>` ([`route_pause_key`]); body: [`RoutePause`] as JSON; headers: its MAC only.
//! Compaction keeps the latest per route, which is the route's state.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Outgoing, table::HeaderTable};

/// Key prefix of a route pause record.
pub const ROUTE_PAUSE_KEY_PREFIX: &str = "route-pause:";

/// The record key of `service`'s `route` pause state.
pub fn route_pause_key(service: &str, route: &str) -> String {
    format!("{ROUTE_PAUSE_KEY_PREFIX}{service}:{route}")
}

/// An operator paused (or resumed) one route of one consumer service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutePause {
    pub service: String,
    /// The route's label (`hookline_consumer_route_breaker_open{route}` names the same routes).
    pub route: String,
    /// True: paused from `at_ms`; false: resumed at `at_ms`.
    pub paused: bool,
    /// Who asked, as the operator's tool recorded it.
    pub by: String,
    /// Why (free text, shown to other operators).
    pub reason: String,
    /// When, ms since the epoch.
    pub at_ms: i64,
}

impl RoutePause {
    /// The record key this state is written under.
    pub fn key(&self) -> String {
        route_pause_key(&self.service, &self.route)
    }

    /// The control record of this state, to `topic`.
    pub fn encode(&self, topic: &str) -> Outgoing {
        // Strings, a bool and an integer: serialising cannot fail.
        let value = serde_json::to_vec(self).expect("a route pause serialises");
        Outgoing::new(topic, Some(Bytes::from(self.key())), Some(value.into()), HeaderTable::new())
    }

    /// Decodes a control record's value; `None` when it is not a route pause (another kind, or damaged), or when
    /// its key does not name the service and route its value names (a record moved under another key).
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let key = std::str::from_utf8(key).ok()?;
        if !key.starts_with(ROUTE_PAUSE_KEY_PREFIX) {
            return None;
        }
        let pause: Self = serde_json::from_slice(value).ok()?;
        (pause.key() == key).then_some(pause)
    }
}
