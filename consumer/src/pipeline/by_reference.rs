//! Nothing stalls on a copy the broker refuses. A retry, deferral or DLQ copy of a record is always a little larger
//! than the record (it adds headers), and a topic may take less than the inbound topic does: the broker then
//! refuses the copy as too large, every time. Such a copy used to be retried for ever, holding its partition's
//! prefix. Now, refused twice in a row (a batch is refused whole, so once may be a neighbour's fault), the record
//! is dead-lettered *by reference* ([`crate::dlq::DeadLetters::publish_by_reference`]): a small DLQ record naming
//! its original position, with the body left in that topic, from where the replayer's re-drive reads it.

use crate::record::Record;
use hookline_common::{producer::ProduceError, wire::InboundEvent};

use super::{Outcome, Pipeline};
use crate::{
    dedupe::{Claim, ClaimToken},
    dlq::{ErrorClass, Failure},
    retry::Attempts,
};

impl Pipeline {
    /// An event whose retry copy the broker refused as too large, its claim released already: dead-lettered by
    /// reference (`retryable_exhausted`: no retry can be parked) under its claim taken again, which then becomes
    /// the dead marker, as for every dead letter. Found done or dead-lettered meanwhile (a re-send handled by
    /// another member), it is that; found claimed by another, it is dead-lettered without the marker (a re-drive
    /// of the entry is then at worst a duplicate). `None` on shutdown.
    pub(super) async fn not_parked(
        &self,
        message: &Record,
        event: &InboundEvent,
        token: &ClaimToken,
        so_far: &Attempts,
        handler_name: &str,
        refused: CopyTooLarge,
    ) -> Option<Outcome> {
        let (source, event_id) = (event.meta.source.as_str(), event.meta.event_id.as_str());
        let claimed = match self.claim(token).await? {
            Claim::AlreadyDone => return Some(Outcome::Duplicate),
            Claim::DeadLettered => return Some(Outcome::DeadLetteredBefore),
            Claim::HeldByOther => None,
            Claim::Acquired(token) => Some(token),
        };
        let failure = Failure {
            class: ErrorClass::RetryableExhausted,
            error: &so_far.last_error,
            attempts: so_far.attempts,
            handler: handler_name,
            first_failure_at_ms: so_far.first_failure_at_ms,
            last_failure_at_ms: hookline_common::wire::now_ms(),
        };
        let Some(token) = claimed else {
            let new_entry = self.dead_letter_by_reference(message, source, Some(event_id), &failure, refused).await?;
            return Some(Outcome::DeadLettered { new_entry, exhausted: true });
        };
        let new_entry = self
            .renewing(&token, self.dead_letter_by_reference(message, source, Some(event_id), &failure, refused))
            .await?;
        self.renewing(&token, self.redis_until_done("dead", || self.dedupe.mark_dead(&token, &new_entry))).await?;
        Some(Outcome::DeadLettered { new_entry, exhausted: true })
    }
}

/// A copy of a record the broker refused as too large for its topic, twice in a row: it never will take it.
#[derive(Debug, Clone)]
pub(super) struct CopyTooLarge {
    /// Which copy: `retry` (a retry or a deferral) or `dead-letter`.
    copy: &'static str,
    /// The broker's (or librdkafka's) refusal.
    error: String,
}

impl std::fmt::Display for CopyTooLarge {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "its {} copy was refused as too large ({}): dead-lettered by reference, the body stays at its original position",
            self.copy, self.error
        )
    }
}

/// Counts consecutive too-large refusals of one copy. A batch is refused whole, so a small copy batched with a
/// large one can be refused once; only a second refusal in a row says the copy itself is too large.
#[derive(Debug, Default)]
pub(super) struct TooLargeStreak {
    refusals: u32,
}

impl TooLargeStreak {
    pub(super) fn refused(&mut self, error: &ProduceError, copy: &'static str) -> Option<CopyTooLarge> {
        if !error.is_too_large() {
            self.refusals = 0;
            return None;
        }
        self.refusals += 1;
        (self.refusals >= 2).then(|| CopyTooLarge { copy, error: format!("{error}: {}", error_source(error)) })
    }
}

/// The cause of a produce error (the broker's code), for the DLQ record's error.
fn error_source(error: &ProduceError) -> String {
    std::error::Error::source(error).map_or_else(String::new, ToString::to_string)
}
