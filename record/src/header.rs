//! Kafka header names. Every name is prefixed `hookline-` so that provider headers carried into Kafka
//! (issue: header allowlist) can never collide with, or impersonate, ours.

/// Name of the configured source that received the request (`POST /webhooks/{source}`).
pub const SOURCE: &str = "hookline-source";
/// The event id used for dedupe, from signed bytes only: a signed id header, a body field, or the body's
/// SHA-256 when the provider's id is unsigned (see [`PROVIDER_EVENT_ID`]).
pub const EVENT_ID: &str = "hookline-event-id";
/// The provider's event type, when the scheme knows where to find it.
pub const EVENT_TYPE: &str = "hookline-event-type";
/// When the gateway received the request: milliseconds since the Unix epoch, decimal.
pub const RECEIVED_AT_MS: &str = "hookline-received-at-ms";
/// The request's `Content-Type`, verbatim, when it had one.
pub const CONTENT_TYPE: &str = "hookline-content-type";
/// Id of the configured secret whose signature matched (for rotation: see when an old secret stops matching).
pub const SECRET_ID: &str = "hookline-secret-id";
/// Set when the source has an `ordering_key` (format version 2): the value the record is keyed by.
/// Records of one partition with the same ordering key are handled in offset order; records without one
/// are independent events and are handled concurrently.
pub const ORDERING_KEY: &str = "hookline-ordering-key";
/// [`crate::FORMAT_VERSION`] of the record.
pub const FORMAT_VERSION: &str = "hookline-format-version";
/// Set by the replayer on a re-driven record: the DLQ entry id it came from.
pub const REPLAY_OF: &str = "hookline-replay-of";
/// Prefix of the provider request headers a source forwards into Kafka (its `forward_headers` allowlist):
/// `http-` + the lowercase header name, one record header per value. Never collides with `hookline-*`.
pub const FORWARDED_PREFIX: &str = "http-";
/// Set by the replayer with [`REPLAY_OF`]: how many times that entry has been re-driven, this time included.
pub const REPLAY_COUNT: &str = "hookline-replay-count";
/// The provider's own event id when the signature does not cover it (GitHub `X-GitHub-Delivery`, Shopify
/// `X-Shopify-Event-Id`, ...): metadata for handlers and operators, never a dedupe key. [`EVENT_ID`] is then
/// the body's SHA-256, so the same body re-sent under a fresh id is still a duplicate.
pub const PROVIDER_EVENT_ID: &str = "hookline-provider-event-id";
/// How the event reached hookline, when not through the gateway: [`crate::origin::RECONCILED`] on a record
/// the reconciler fetched from the provider's API (its proof is the API fetch, not a signature). Absent on a
/// gateway record. Optional, readable by every version: no format bump.
pub const ORIGIN: &str = "hookline-origin";
/// The one consumer service that may process this record; every other service skips it without side
/// effects (stores its offset, counts it, records no fate). Set by a consumer on its retry and deferral
/// records, and by the replayer on a re-driven DLQ entry and on a re-processing request. Absent on a
/// gateway record, which every service processes. Optional, readable by every version: no format bump.
pub const SERVICE: &str = "hookline-service";
/// In a service that fans out (`service.routing = "fan_out"`: every matching route of the service gets the
/// event, each a *destination*), the one destination of [`SERVICE`] this record is for: the route's name. Set by a
/// fan-out consumer on its retry and deferral records and on its dead letters, and kept by a re-drive, so that a
/// retry, a deferral or a replay reaches that destination alone and no other. Absent outside fan-out mode (every
/// record a first-match service writes is as before). Covered by the MAC like every header. Optional, readable by
/// every version: no format bump.
pub const DESTINATION: &str = "hookline-destination";
/// Set by the replayer on a re-processing request (an event its service already processed, re-driven on an
/// operator's word): the request's run id. The service processes the event once per run id, whatever its
/// done marker says (the reprocess dedupe key).
pub const REPROCESS_ID: &str = "hookline-reprocess-id";
/// With [`REPROCESS_ID`]: where the re-processed record was, `<topic>:<partition>:<offset>`.
pub const REPROCESS_OF: &str = "hookline-reprocess-of";
/// The record's MAC: `v1,<key id>,<base64 of HMAC-SHA256>` ([`crate::RECORD_MAC_VERSION`]), over the topic,
/// key, body and every other header ([`crate::mac::mac_input`]). Set by every hookline writer on
/// every record (through the producer); checked by every reader before dedupe or any
/// handler. Optional for readers only inside `kafka.record_auth.accept_unsigned_until`: no format bump.
pub const MAC: &str = "hookline-mac";
/// The W3C trace context (`00-<trace id>-<span id>-<flags>`) of the span that sent the record, when traces
/// are on (the services' traces): the one header not named `hookline-*`, because its name is the
/// standard's. Forwarded provider headers are `http-*`, so a provider's cannot pose as it. Covered by the MAC
/// like every header; metadata outside the signed body. Optional, readable by every version: no format bump.
pub const TRACEPARENT: &str = "traceparent";

/// Dead-letter headers, added to the original headers (which are kept unchanged).
pub mod dlq {
    pub const ORIGINAL_TOPIC: &str = "hookline-dlq-original-topic";
    pub const ORIGINAL_PARTITION: &str = "hookline-dlq-original-partition";
    pub const ORIGINAL_OFFSET: &str = "hookline-dlq-original-offset";
    pub const CONSUMER_GROUP: &str = "hookline-dlq-consumer-group";
    /// The consumer service that dead-lettered the event: a replay re-drives it to that service only.
    /// Absent on entries written before services had names: their service is their consumer group.
    pub const SERVICE: &str = "hookline-dlq-service";
    pub const HANDLER: &str = "hookline-dlq-handler";
    pub const ATTEMPTS: &str = "hookline-dlq-attempts";
    /// `retryable_exhausted`, `poison` or `unauthenticated_record` ([`crate::UNAUTHENTICATED_RECORD_CLASS`]).
    pub const ERROR_CLASS: &str = "hookline-dlq-error-class";
    /// The last error message, truncated to [`crate::MAX_DLQ_ERROR_BYTES`].
    pub const ERROR: &str = "hookline-dlq-error";
    pub const FIRST_FAILURE_AT_MS: &str = "hookline-dlq-first-failure-at-ms";
    pub const LAST_FAILURE_AT_MS: &str = "hookline-dlq-last-failure-at-ms";
    pub const CONSUMER_VERSION: &str = "hookline-dlq-consumer-version";
    pub const FORMAT_VERSION: &str = "hookline-dlq-format-version";
    /// Set on a dead letter *by reference*: a record whose copy (retry, deferral or DLQ) the broker refused as
    /// too large. Its value is the original body's length in bytes; the DLQ record's own body is empty, and
    /// the body (with the original key and headers) stays in the topic at [`ORIGINAL_TOPIC`],
    /// [`ORIGINAL_PARTITION`], [`ORIGINAL_OFFSET`], from where a re-drive reads it (and checks its MAC). It can
    /// be re-driven only while that record is within its topic's retention. Optional, readable by every
    /// version: no format bump.
    pub const BODY_BY_REFERENCE: &str = "hookline-dlq-body-by-reference";
    /// On a dead letter by reference, the event id, in place of [`super::EVENT_ID`], which such a record does
    /// not carry: a replayer that does not know [`BODY_BY_REFERENCE`] would re-drive its empty body, and
    /// without an event id that re-drive is dead-lettered as not a hookline record instead of processed.
    pub const EVENT_ID: &str = "hookline-dlq-event-id";
    /// Days the service's `postgres` handler keeps dedupe rows (its shortest `retention_days`), on entries of a
    /// service that has one. An event dead-lettered after a COMMIT whose answer was lost has its effect in the
    /// database; its dedupe row makes a re-drive a duplicate only until retention deletes the row, so the
    /// replayer refuses to re-drive the entry after that without `past_retention`.
    pub const DEDUPE_RETENTION_DAYS: &str = "hookline-dlq-dedupe-retention-days";
}

/// Retry headers: a record of the retry topic (topic role the retry topics) is the original
/// record (key, body and headers unchanged) plus these, which say when to try again and what happened so
/// far. Each retry record replaces the previous one's `hookline-retry-*` headers.
pub mod retry {
    /// Every retry header starts with this.
    pub const PREFIX: &str = "hookline-retry-";
    /// Handler attempts made so far (all failed retryably).
    pub const ATTEMPTS: &str = "hookline-retry-attempts";
    /// When the first attempt failed, ms since the epoch: the retry budget (`retry.max_total_ms`) counts
    /// from here.
    pub const FIRST_FAILURE_AT_MS: &str = "hookline-retry-first-failure-at-ms";
    /// Not to be handled before this time, ms since the epoch.
    pub const DUE_AT_MS: &str = "hookline-retry-due-at-ms";
    /// The last error message, truncated like the DLQ's.
    pub const ERROR: &str = "hookline-retry-error";
    /// Where the event first was: kept through every retry, and copied into the DLQ record.
    pub const ORIGINAL_TOPIC: &str = "hookline-retry-original-topic";
    pub const ORIGINAL_PARTITION: &str = "hookline-retry-original-partition";
    pub const ORIGINAL_OFFSET: &str = "hookline-retry-original-offset";
}
