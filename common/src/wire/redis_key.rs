//! Redis key layout.
//!
//! Dedupe key: `<prefix>:svc=<service>:<source>:<event id>`, scoped to the consumer service, so that services
//! sharing a Redis never see each other's claims or done markers. Its value is either a claim
//! (`claim:<owner token>`, short lease), a done marker ([`DoneMarker`], or the plain [`DEDUPE_DONE`] written by
//! earlier builds, or a [`FilteredMarker`]: skipped by a route's filter; long TTL), or a dead marker
//! (`dead:<DLQ entry id>`, with the event types dead-lettered when known: [`dead_marker`]; long TTL: the event was
//! dead-lettered). `svc=<service>` cannot be
//! mistaken for a source (source names are letters, digits, `-` and `_`). Every script touches one key, so Redis
//! Cluster needs no hash tag.

/// Value of a dedupe key once its event was processed, as written before done markers carried details (and
/// still read as done): see [`DoneMarker`] for the form written now.
pub const DEDUPE_DONE: &str = "done";
/// Prefix of a done marker with details: `done:<processed at ms>:<handling ms>:<partition>:<offset>:<topic>`.
pub const DEDUPE_DONE_DETAILED_PREFIX: &str = "done:";
/// Prefix of a filtered marker, a done marker that says a route's filter skipped the event:
/// `done:filtered:<filter>:<filtered at ms>:<partition>:<offset>:<topic>` ([`FilteredMarker`]).
pub const DEDUPE_FILTERED_PREFIX: &str = "done:filtered:";
/// Prefix of a dedupe key's value while a consumer holds the claim.
pub const DEDUPE_CLAIM_PREFIX: &str = "claim:";
/// Prefix of a dead marker's value: `dead:<DLQ entry id>`, or `dead:<DLQ entry id>;types=,<hex>,<hex>,` when
/// the event types of the copies dead-lettered are known ([`dead_marker`]); the long TTL (see the consumer's
/// dedupe).
pub const DEDUPE_DEAD_PREFIX: &str = "dead:";
/// Between a dead marker's entry id (a filtered marker's topic) and the event types it records.
pub const DEDUPE_DEAD_TYPES: &str = ";types=";

/// A dead marker for DLQ entry `entry_id` recording `types` (each the hex of an event type's UTF-8 bytes: a
/// type may hold any printable character, hex holds no separator), so that a copy of another allowlisted type
/// may still claim the event once: `dead:<entry id>;types=,<hex>,...,` (the commas on both ends let a claim
/// script look one up as `,<hex>,`). Without types, the form earlier builds wrote: `dead:<entry id>`.
pub fn dead_marker(entry_id: &str, types: &[String]) -> String {
    if types.is_empty() {
        return format!("{DEDUPE_DEAD_PREFIX}{entry_id}");
    }
    format!("{DEDUPE_DEAD_PREFIX}{entry_id}{DEDUPE_DEAD_TYPES},{},", types.join(","))
}

/// The DLQ entry id and recorded types (hex, as written) of a dead marker; `None` for any other value.
pub fn parse_dead_marker(value: &str) -> Option<(&str, Vec<String>)> {
    let rest = value.strip_prefix(DEDUPE_DEAD_PREFIX)?;
    Some(match rest.split_once(DEDUPE_DEAD_TYPES) {
        Some((entry_id, types)) => {
            (entry_id, types.split(',').filter(|hex| !hex.is_empty()).map(str::to_owned).collect())
        }
        None => (rest, Vec::new()),
    })
}

/// How an event type is written in a dead marker: the hex of its bytes.
pub fn dead_marker_type(event_type: &str) -> String {
    hex::encode(event_type.as_bytes())
}
/// Value of [`service`] for a service that ran before keys were scoped: `upgraded:<ms>`, the time of its
/// first start on a scoped build. It honours [`dedupe_unscoped`] keys until they have expired.
pub const SERVICE_UPGRADED: &str = "upgraded";
/// Value of [`service`] for a service that started on a scoped build: `new:<ms>`. Unscoped keys were
/// written by other services' work, never its own, so it never reads them.
pub const SERVICE_NEW: &str = "new";

pub use super::done_marker::{DoneMarker, FilteredMarker, is_done};

pub fn dedupe(prefix: &str, service: &str, source: &str, event_id: &str) -> String {
    format!("{prefix}:svc={service}:{source}:{event_id}")
}

/// The dedupe key of the layout before services (`<prefix>:<source>:<event id>`, wire layout 1): read,
/// never written, by a service that ran on it, for as long as such a key can live (its dedupe TTL after
/// the service's first scoped start), so that an upgrade reprocesses nothing.
pub fn dedupe_unscoped(prefix: &str, source: &str, event_id: &str) -> String {
    format!("{prefix}:{source}:{event_id}")
}

/// The dedupe key of one re-processing run ([`super::header::REPROCESS_ID`]) of an event:
/// `<prefix>:svc=<service>:reprocess=<run id>:<source>:<event id>`. The run processes the event once, whatever
/// the event's own key says.
pub fn reprocess(prefix: &str, service: &str, run_id: &str, source: &str, event_id: &str) -> String {
    format!("{prefix}:svc={service}:reprocess={run_id}:{source}:{event_id}")
}

/// What a service's first start on a scoped build found: `<prefix>:svc=<service>` holds
/// `upgraded:<ms>` or `new:<ms>` ([`SERVICE_UPGRADED`], [`SERVICE_NEW`]). Set once, never expires.
pub fn service(prefix: &str, service: &str) -> String {
    format!("{prefix}:svc={service}")
}

/// When a service first started on the bucketed dedupe layout ([`super::dedupe_layout`]) and whether it ran on
/// the previous one before: `<prefix>:svc=<service>:layout` holds `upgraded:<ms>` or `new:<ms>`. Set once.
pub fn layout(prefix: &str, service: &str) -> String {
    format!("{prefix}:svc={service}:layout")
}

/// A service's dedupe bucket schedule ([`super::dedupe_layout::BucketSchedule`]): `<prefix>:svc=<service>:buckets`
/// holds `<buckets>@<slot>,...`. Absent: every slot has the default count. Never expires.
pub fn dedupe_buckets(prefix: &str, service: &str) -> String {
    format!("{prefix}:svc={service}:buckets")
}

/// The key a consumer's start exercises every dedupe script on, to learn before fetching anything whether its
/// Redis user may run them (`<prefix>:svc=<service>:start-check`): a claim, renewed and released, then
/// claimed again and marked done with a one-second TTL. Never an event's key (those have a source and an id).
pub fn start_check(prefix: &str, service: &str) -> String {
    format!("{prefix}:svc={service}:start-check")
}

/// The reconciler's index of accepted events: `<prefix>:accepted:<source>:<id>` exists (value: the
/// record's receive time, ms) when a record of that source with that id reached the inbound topic. `id` is
/// the id the provider's event log shows: the event id, or for a source whose provider id is unsigned
/// (GitHub) the provider's delivery id. Written by the reconciler's indexer from the inbound topic, with a
/// TTL longer than the provider's reconciliation window.
pub fn accepted(prefix: &str, source: &str, id: &str) -> String {
    format!("{prefix}:accepted:{source}:{id}")
}

/// The reconciler's ledger of what it did for one missed event: `<prefix>:action:<source>:<id>` holds
/// `requesting:<ms>`, `requested:<ms>` or `produced:<ms>`, so no run asks twice.
pub fn reconcile_action(prefix: &str, source: &str, id: &str) -> String {
    format!("{prefix}:action:{source}:{id}")
}

/// One reconciler run per source at a time: `<prefix>:lock:<source>` holds the run's token, with a lease.
pub fn reconcile_lock(prefix: &str, source: &str) -> String {
    format!("{prefix}:lock:{source}")
}

/// Set once a source's first run (a dry run) is done: `<prefix>:first-run:<source>` = its time, ms.
pub fn reconcile_first_run(prefix: &str, source: &str) -> String {
    format!("{prefix}:first-run:{source}")
}

/// Where the index's coverage starts: `<prefix>:index-since` = ms since the epoch, the earlier of the
/// indexer's first start and the oldest record it ever indexed. Events before it are unknown to the index
/// (accepted before it existed, and gone from the topic), so no run acts on them.
pub fn reconcile_index_since(prefix: &str) -> String {
    format!("{prefix}:index-since")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_marker_records_its_types_and_reads_back() {
        assert_eq!(dead_marker("webhooks.dlq:0:7", &[]), "dead:webhooks.dlq:0:7", "as earlier builds wrote");
        let types = vec![dead_marker_type("bogus"), dead_marker_type("a,b;types=")];
        let marker = dead_marker("webhooks.dlq:0:7", &types);
        assert_eq!(marker, "dead:webhooks.dlq:0:7;types=,626f677573,612c623b74797065733d,");
        assert_eq!(parse_dead_marker(&marker), Some(("webhooks.dlq:0:7", types)));
        assert_eq!(parse_dead_marker("dead:webhooks.dlq:0:7"), Some(("webhooks.dlq:0:7", vec![])));
        assert_eq!(parse_dead_marker("done:1:2:3:4:t"), None);
    }
}
