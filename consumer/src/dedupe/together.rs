//! Claims and done markers of records started together, in one script call each (on a single Redis).
//!
//! The records the scheduler lets start at the same moment are claimed by one call of a script that applies
//! [`CLAIM_SCRIPT`]'s rule to each of its keys, and those whose handler succeeded together are marked done by one
//! call applying [`DONE_SCRIPT`]'s rule to each. The many-key scripts are made from the one-key ones at start (the
//! one-key body becomes a Lua function called once per key), so the rule is written once and every reply is what
//! the one-key script would have said for that key: the two-phase claim and its guarantees hold key by key. A
//! failed call fails every key in it, and the caller falls back to the one-key calls, which retry on their own.
//!
//! Not on a Redis Cluster (the keys live in different slots) nor for a token that reads the unscoped layout
//! first: those take the one-key calls.

use hookline_common::wire::redis_key::DoneMarker;
use redis::{RedisResult, Script};

use super::{CLAIM_SCRIPT, Claim, ClaimToken, DONE_SCRIPT, Dedupe, DedupeError};
use hookline_common::redis_connection::RedisConnection;

/// Arguments per key of the many-key claim script: what [`CLAIM_SCRIPT`] reads as `ARGV[1..=5]`.
const CLAIM_ARGS: usize = 5;
/// Arguments per key of the many-key done script: what [`DONE_SCRIPT`] reads as `ARGV[1..=3]`.
const DONE_ARGS: usize = 3;

/// The many-key form of a one-key script taking `width` arguments: its body becomes `one(key, a1, ..., aN)`,
/// called for each key with that key's arguments (as locals: no table per key), and the replies come back in key
/// order.
pub(super) fn many_keys(one_key: &str, width: usize) -> String {
    let mut body = one_key.replace("KEYS[1]", "key");
    for n in (1..=width).rev() {
        body = body.replace(&format!("ARGV[{n}]"), &format!("a{n}"));
    }
    let params: Vec<String> = (1..=width).map(|n| format!("a{n}")).collect();
    let args: Vec<String> = (1..=width).map(|n| format!("ARGV[base + {n}]")).collect();
    format!(
        "local function one(key, {})\n{body}\nend\nlocal replies = {{}}\nfor i, key in ipairs(KEYS) do\n  local base = \
         (i - 1) * {width}\n  replies[i] = one(key, {})\nend\nreturn replies\n",
        params.join(", "),
        args.join(", ")
    )
}

/// The many-key scripts, made once per [`Dedupe`].
#[derive(Debug)]
pub(super) struct ManyKeys {
    claim: Script,
    done: Script,
}

impl ManyKeys {
    pub(super) fn new() -> Self {
        Self {
            claim: Script::new(&many_keys(CLAIM_SCRIPT, CLAIM_ARGS)),
            done: Script::new(&many_keys(DONE_SCRIPT, DONE_ARGS)),
        }
    }
}

impl Dedupe {
    /// Whether [`Self::claim_together`] and [`Self::done_together`] can serve this service's tokens now: a single
    /// Redis, and no unscoped key to read before claiming.
    pub fn claims_together(&self) -> bool {
        matches!(self.connection, RedisConnection::Single(_))
            && self.unscoped_until_ms.is_none_or(|until_ms| until_ms <= hookline_common::wire::now_ms())
    }

    /// Whether `token` can be claimed together with others ([`Self::claims_together`], and no unscoped key).
    pub fn can_claim_together(&self, token: &ClaimToken) -> bool {
        matches!(self.connection, RedisConnection::Single(_)) && token.unscoped_key.is_none()
    }

    /// Claims every token in one script call; each reply is what [`Self::claim`] would have answered for it.
    /// Only for tokens [`Self::can_claim_together`] accepts.
    pub async fn claim_together(&self, tokens: &[&ClaimToken]) -> Result<Vec<Claim>, DedupeError> {
        if !tokens.iter().all(|token| self.can_claim_together(token)) {
            // The unscoped layout's window was open when the tokens were made: each claims alone.
            return Err(refused("cannot claim together"));
        }
        let mut invocation = self.many.claim.prepare_invoke();
        for token in tokens {
            let redrive = if token.redrive { "1" } else { "0" };
            let new_type = token.event_type.as_deref().filter(|_| token.type_allowlisted).unwrap_or("");
            invocation.key(&token.key);
            invocation.arg(&token.value).arg(self.lease_ms).arg(super::DEDUPE_DONE).arg(redrive).arg(new_type);
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
        let mut invocation = self.many.done.prepare_invoke();
        for (token, marker) in done {
            invocation.key(&token.key);
            invocation.arg(&token.value).arg(marker.encode()).arg(self.done_ttl_ms);
        }
        let replies: RedisResult<Vec<i64>> = invocation.invoke_async(&mut self.connection.clone()).await;
        let replies = replies?;
        if replies.len() != done.len() {
            return Err(refused("done reply count mismatch"));
        }
        Ok(replies.into_iter().map(|still_ours| still_ours == 1).collect())
    }
}

/// An error of ours, not Redis's, failing a many-key call (its callers then take the one-key calls).
fn refused(why: &'static str) -> DedupeError {
    DedupeError(redis::RedisError::from(std::io::Error::other(why)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_many_key_script_calls_the_one_key_rule_per_key() {
        let script = many_keys(DONE_SCRIPT, DONE_ARGS);
        assert!(!script.contains("KEYS[1]") && !script.contains("ARGV[1]"), "{script}");
        assert!(script.contains("local function one(key, a1, a2, a3)"), "{script}");
        assert!(script.contains("redis.call('SET', key, a2, 'PX', a3)"), "{script}");
        assert!(script.contains("replies[i] = one(key, ARGV[base + 1], ARGV[base + 2], ARGV[base + 3])"), "{script}");
        // `ARGV[10]` must not be read as `ARGV[1]` followed by `0`.
        let wide = many_keys("return ARGV[10] .. ARGV[1]", 10);
        assert!(wide.contains("return a10 .. a1"), "{wide}");
    }
}
