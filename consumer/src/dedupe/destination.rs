//! Dedupe scoped to one destination of a fan-out service (`service.routing = "fan_out"`): the same bucketed
//! layout, its keys those of the service, each event's hash made of the destination's name with its source, so
//! one destination having processed (or dead-lettered, or filtered) an event says nothing of it for another.

use hookline_common::wire::dedupe_layout::EventHash;

use super::{ClaimToken, Dedupe};

impl Dedupe {
    /// A new claim token for this event at one destination of a fan-out service: the destination's own scope
    /// (its name is hashed with the source, as a re-processing run's is, so no other destination's key and no
    /// first-match key is the same), so one destination having processed an event makes it a duplicate for that
    /// destination alone. No earlier layout has such keys: none is read.
    pub fn destination_token(&self, destination: &str, source: &str, event_id: &str) -> ClaimToken {
        self.token_for(EventHash::new(&destination_scope(destination, source), event_id), Some(source))
    }

    /// A claim token for one re-processing run of this event at one destination of a fan-out service.
    pub fn destination_reprocess_token(
        &self,
        run_id: &str,
        destination: &str,
        source: &str,
        event_id: &str,
    ) -> ClaimToken {
        let hash = EventHash::new(&format!("reprocess={run_id}:{}", destination_scope(destination, source)), event_id);
        self.token_for(hash, Some(source))
    }

    /// A claim token for a re-drive of this event's dead letter at one destination of a fan-out service.
    pub fn destination_redrive_token(&self, destination: &str, source: &str, event_id: &str) -> ClaimToken {
        ClaimToken { redrive: true, ..self.destination_token(destination, source, event_id) }
    }
}

/// What a destination's event hashes are made of in place of the source: `destination=<name>:<source>`. `=` and
/// `:` are in no source's or route's name, so it is no source's name and no other destination's.
fn destination_scope(destination: &str, source: &str) -> String {
    format!("destination={destination}:{source}")
}
