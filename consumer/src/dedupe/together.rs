//! Claims and done markers of records started together, in one script call each (on a single Redis).
//!
//! The records the scheduler lets start at the same moment are claimed by one call of a script that applies the
//! claim rule ([`scripts`]) to each event, and those whose handler succeeded together are marked done by one call
//! applying the done rule to each. The rule is the same Lua function the one-event script runs, so every reply is
//! what the one-event script would have said for that event: the two-phase claim and its guarantees hold event by
//! event. A failed call fails every event in it, and the caller falls back to the one-event calls, which retry on
//! their own.
//!
//! Not on a Redis Cluster (the events' keys live in different slots) nor for a token that reads the unscoped or
//! the previous layout first: those take the one-event calls.

use hookline_common::{redis_connection::RedisConnection, wire::redis_key::DoneMarker};
use redis::{RedisResult, Script};

use super::{Claim, ClaimToken, Dedupe, DedupeError, Op, PROCESSED, scripts};

/// The many-event scripts, made once per [`Dedupe`].
#[derive(Debug)]
pub(super) struct ManyEvents {
    claim: Script,
    mark_ours: Script,
}

impl ManyEvents {
    pub(super) fn new() -> Self {
        Self { claim: Script::new(&scripts::claim_many()), mark_ours: Script::new(&scripts::mark_ours_many()) }
    }
}

impl Dedupe {
    /// Whether [`Self::claim_together`] and [`Self::done_together`] can serve this service's tokens now: a single
    /// Redis, and no unscoped key to read before claiming.
    pub fn claims_together(&self) -> bool {
        matches!(self.connection, RedisConnection::Single(_))
            && self.unscoped_until_ms.is_none_or(|until_ms| until_ms <= hookline_common::wire::now_ms())
            && !self.legacy_read_now()
    }

    /// Whether `token` can be claimed together with others ([`Self::claims_together`], and no unscoped key).
    pub fn can_claim_together(&self, token: &ClaimToken) -> bool {
        matches!(self.connection, RedisConnection::Single(_))
            && token.unscoped_key.is_none()
            && token.legacy_key.is_none()
    }

    /// Claims every token in one script call; each reply is what [`Self::claim`] would have answered for it.
    /// Only for tokens [`Self::can_claim_together`] accepts.
    pub async fn claim_together(&self, tokens: &[&ClaimToken]) -> Result<Vec<Claim>, DedupeError> {
        if !tokens.iter().all(|token| self.can_claim_together(token)) {
            // The unscoped layout's window was open when the tokens were made: each claims alone.
            return Err(refused("cannot claim together"));
        }
        self.schedule.fresh()?;
        let mut invocation = self.many.claim.prepare_invoke();
        for token in tokens {
            self.push_event(&mut invocation, &Op::Claim, token);
        }
        let replies: RedisResult<Vec<String>> = invocation.invoke_async(&mut self.connection.clone()).await;
        let replies = replies?;
        if replies.len() != tokens.len() {
            return Err(refused("claim reply count mismatch"));
        }
        Ok(tokens.iter().zip(replies).map(|(token, reply)| Claim::from_reply(token, &reply)).collect())
    }

    /// Marks every claim done, each with its marker, in one script call; each reply is what [`Self::mark_done`]
    /// would have answered (whether the claim was still ours). Only for tokens [`Self::can_claim_together`] accepts.
    pub async fn done_together(&self, done: &[(&ClaimToken, &DoneMarker)]) -> Result<Vec<bool>, DedupeError> {
        if !done.iter().all(|(token, _)| self.can_claim_together(token)) {
            return Err(refused("cannot mark done together"));
        }
        self.schedule.fresh()?;
        // Every claim still ours takes the two-key rule; the rest (a lapsed lease, a re-sent mark) the full one-event
        // script, which answers from the window's buckets.
        let mut invocation = self.many.mark_ours.prepare_invoke();
        let processed = Op::MarkOurs(PROCESSED.to_owned());
        for (token, _) in done {
            self.push_event(&mut invocation, &processed, token);
        }
        let replies: RedisResult<Vec<i64>> = invocation.invoke_async(&mut self.connection.clone()).await;
        let replies = replies?;
        if replies.len() != done.len() {
            return Err(refused("done reply count mismatch"));
        }
        let mut still_ours = Vec::with_capacity(replies.len());
        for ((token, _), reply) in done.iter().zip(replies) {
            let ours = if reply == 1 { 1 } else { self.call(Op::Done(PROCESSED.to_owned()), token).await? };
            still_ours.push(ours == 1);
        }
        Ok(still_ours)
    }
}

/// An error of ours, not Redis's, failing a many-key call (its callers then take the one-key calls).
fn refused(why: &'static str) -> DedupeError {
    DedupeError(redis::RedisError::from(std::io::Error::other(why)))
}
