//! The previous layout (wire layout 2: one key per event, `<prefix>:svc=<service>:<source>:<event id>`), kept for
//! a rolling upgrade: its scripts exactly as the previous build runs them.
//!
//! While old instances may still run beside new ones (the upgrade period, `redis.dedupe_upgrade_period_s` from
//! the service's first start on this build), a new instance takes the old key's claim with the old claim script
//! before its own, and writes the old done and dead markers after its own, so an old instance sees every event a
//! new one handles as claimed, done or dead, as it would see another old instance's; and a new instance sees an
//! old one's claim, done or dead marker in the old key before claiming. After the period, until the old keys have
//! expired (the period plus the old done TTL), it only reads them: their done is a duplicate, their claim is held
//! (an instance of the old build running after the period), their dead marker is dead and their filtered marker
//! done unless the copy may claim over it by the same rule as over a new one (a re-drive over a dead marker; over
//! either, a copy of an allowlisted type the marker does not record: finding P8).

use hookline_common::wire::{
    now_ms,
    redis_key::{self, DEDUPE_DEAD_TYPES, DEDUPE_DONE, DEDUPE_FILTERED_PREFIX, FilteredMarker},
};
use redis::{Script, ScriptInvocation};

use super::{Claim, ClaimToken, Dedupe, DedupeError, LayoutHistory};

/// Returns `acquired`, `over:<the dead marker taken over>`, `done`, `dead` or `held`. `SET NX` first; if the key
/// exists, our own value (a re-sent claim whose first reply was lost) counts as acquired, and a key that expired in
/// between is claimed anew. A done marker is the plain `ARGV[3]` (`done`, earlier builds) or `done:<details>`. A
/// `dead:` marker is taken over by a re-drive (`ARGV[4]` = `1`) or by a copy of an allowlisted type the marker
/// does not record (`ARGV[5]`, its hex; empty when the type is not allowlisted), and answers `dead` to anything
/// else. A filtered marker that records types (`done:filtered:...;types=,...,`) is taken over the same way by a
/// copy of an allowlisted type it does not record (finding P8), and is `done` to anything else. A re-sent takeover
/// whose first reply was lost finds its own claim: `acquired`, with the marker lost to it (the next marker then
/// records this copy's type alone).
pub const CLAIM_SCRIPT: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'acquired' end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then return 'acquired' end
if current ~= false and string.sub(current, 1, 14) == 'done:filtered:' and ARGV[5] ~= nil and ARGV[5] ~= '' then
  local types = string.find(current, ';types=,', 1, true)
  if types and not string.find(current, ',' .. ARGV[5] .. ',', types, true) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 'over:' .. current
  end
end
if current == ARGV[3] or (current ~= false and string.sub(current, 1, 5) == 'done:') then return 'done' end
if current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'acquired'
end
if string.sub(current, 1, 5) ~= 'dead:' then return 'held' end
local new_type = ARGV[5] ~= nil and ARGV[5] ~= '' and not string.find(current, ',' .. ARGV[5] .. ',', 1, true)
if ARGV[4] == '1' or new_type then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'over:' .. current
end
return 'dead'
";

/// Marks the key done (`ARGV[2]`: the detailed marker, or the plain `done`) with the long TTL whatever it holds,
/// and says whether our claim was still there (or the key already done, in either form: a re-sent mark whose first
/// reply was lost).
pub const DONE_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if current == ARGV[1] or current == ARGV[2] or current == 'done' then return 1 end
if current ~= false and string.sub(current, 1, 5) == 'done:' then return 1 end
return 0
";

/// Makes the key the dead marker `ARGV[2]` with the long TTL if it still holds our claim (or nothing: the lease
/// lapsed while the dead letter was produced). Never overwrites a done marker or another consumer's claim.
pub const DEAD_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or current == false or string.sub(current, 1, 5) == 'dead:' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Deletes the key only if it still holds our claim; a claim that took over a dead or filtered marker puts the
/// marker (`ARGV[2]`, empty otherwise) back with the long TTL (`ARGV[3]`) instead.
pub const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return redis.call('DEL', KEYS[1])
";

/// Extends the lease of our claim; 0 when the key no longer holds it (done, released, expired, or taken over).
pub const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
";

/// Until when the previous layout's keys are written beside ours, and until when they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Phase {
    pub(super) writes_until_ms: i64,
    pub(super) reads_until_ms: i64,
}

/// A call of one of the previous layout's scripts, on the event's key in that layout.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Claim,
    /// The marker, as the previous build wrote it.
    Done(String),
    Dead(String),
    Release,
    Renew,
}

/// The previous layout's scripts.
#[derive(Debug)]
pub(super) struct Scripts {
    claim: Script,
    done: Script,
    release: Script,
    renew: Script,
    dead: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            claim: Script::new(CLAIM_SCRIPT),
            done: Script::new(DONE_SCRIPT),
            release: Script::new(RELEASE_SCRIPT),
            renew: Script::new(RENEW_SCRIPT),
            dead: Script::new(DEAD_SCRIPT),
        }
    }

    pub(super) fn all(&self) -> [&Script; 5] {
        [&self.claim, &self.done, &self.release, &self.renew, &self.dead]
    }

    pub(super) fn of(&self, op: &Op) -> &Script {
        match op {
            Op::Claim => &self.claim,
            Op::Done(_) => &self.done,
            Op::Dead(_) => &self.dead,
            Op::Release => &self.release,
            Op::Renew => &self.renew,
        }
    }
}

/// What the previous layout's key says before a claim in ours.
pub(super) enum Claimed {
    /// Claim on: it is free (or we hold it now), having taken over this dead marker if any.
    Free { took_over: Option<String> },
    /// This answer, without claiming in ours.
    Not(Claim),
}

impl Dedupe {
    /// Honours the previous layout's keys as `history` says: written beside ours (claimed, marked done and dead)
    /// for `upgrade_period_ms` from the service's first start on this layout, so that instances of the previous
    /// build running meanwhile never process an event a new one handles; read until they have expired.
    pub fn honour_legacy_layout(&mut self, history: LayoutHistory, upgrade_period_ms: i64) {
        if !history.upgraded {
            return;
        }
        let writes_until_ms = history.since_ms.saturating_add(upgrade_period_ms);
        let reads_until_ms = writes_until_ms.saturating_add(self.legacy_ttl_ms());
        if now_ms() < reads_until_ms {
            self.legacy = Some(Phase { writes_until_ms, reads_until_ms });
        }
    }

    /// Whether the previous layout's keys are read now (while they are, records are claimed one by one).
    pub(super) fn legacy_read_now(&self) -> bool {
        self.legacy.is_some_and(|phase| now_ms() < phase.reads_until_ms)
    }

    /// `token` with the previous layout's key `key()`, while that layout is read or written.
    pub(super) fn with_legacy(&self, token: ClaimToken, key: impl FnOnce() -> String) -> ClaimToken {
        let Some(phase) = self.legacy.filter(|_| self.legacy_read_now()) else { return token };
        ClaimToken { legacy_key: Some(key()), legacy_writes: now_ms() < phase.writes_until_ms, ..token }
    }

    pub(super) fn legacy_invocation<'a>(&'a self, op: &Op, token: &ClaimToken) -> ScriptInvocation<'a> {
        let key = token.legacy_key.as_deref().unwrap_or_default();
        let ttl_ms = self.window_s * 1000;
        let mut invocation = self.scripts.legacy.of(op).prepare_invoke();
        invocation.key(key).arg(&token.value);
        match op {
            Op::Claim => {
                let redrive = if token.redrive { "1" } else { "0" };
                let new_type = token.event_type.as_deref().filter(|_| token.type_allowlisted).unwrap_or("");
                invocation.arg(self.lease_ms).arg(DEDUPE_DONE).arg(redrive).arg(new_type);
            }
            Op::Done(marker) | Op::Dead(marker) => {
                invocation.arg(marker).arg(ttl_ms);
            }
            Op::Release => {
                invocation.arg(token.legacy_took_over.as_deref().unwrap_or("")).arg(ttl_ms);
            }
            Op::Renew => {
                invocation.arg(self.lease_ms);
            }
        }
        invocation
    }

    /// Claims the previous layout's key while it is written (its claim script: an old instance's claim, done or
    /// dead marker answers as it would to an old instance), or reads it while it is only read.
    pub(super) async fn claim_legacy(&self, token: &ClaimToken) -> Result<Claimed, DedupeError> {
        let Some(key) = &token.legacy_key else { return Ok(Claimed::Free { took_over: None }) };
        if token.legacy_writes {
            let reply: String = self.call(super::Op::Legacy(Op::Claim), token).await?;
            return Ok(match Claim::from_reply(token, &reply) {
                Claim::Acquired(claimed) => Claimed::Free { took_over: claimed.took_over },
                other => Claimed::Not(other),
            });
        }
        let value: Option<String> = redis::cmd("GET").arg(key).query_async(&mut self.connection.clone()).await?;
        let Some(value) = value else { return Ok(Claimed::Free { took_over: None }) };
        // A copy of an allowlisted type not among those a marker records may claim over it, as the claim script.
        let untried =
            |types: &[String]| token.type_allowlisted && token.event_type.as_ref().is_some_and(|t| !types.contains(t));
        if redis_key::is_done(&value) {
            // A filtered marker that records types (P8): claimed over like a dead marker; one from before types
            // were recorded, by nothing.
            let typed = value.starts_with(DEDUPE_FILTERED_PREFIX) && value.contains(&format!("{DEDUPE_DEAD_TYPES},"));
            let types = FilteredMarker::decode(&value).map(|marker| marker.types).filter(|_| typed);
            return Ok(match types {
                Some(types) if untried(&types) => Claimed::Free { took_over: Some(value) },
                _ => Claimed::Not(Claim::AlreadyDone),
            });
        }
        if let Some((_, types)) = redis_key::parse_dead_marker(&value) {
            return Ok(if token.redrive || untried(&types) {
                Claimed::Free { took_over: Some(value) }
            } else {
                Claimed::Not(Claim::DeadLettered)
            });
        }
        // A claim (an instance of the previous build still running), or a value it does not know: not ours.
        Ok(Claimed::Not(Claim::HeldByOther))
    }

    /// Marks the previous layout's key done while it is written; whether our claim there was still ours.
    pub(super) async fn mark_done_legacy(
        &self,
        token: &ClaimToken,
        marker: impl FnOnce() -> String,
    ) -> Result<bool, DedupeError> {
        if token.legacy_key.is_none() || !token.legacy_writes {
            return Ok(true);
        }
        let still_ours: i64 = self.call(super::Op::Legacy(Op::Done(marker())), token).await?;
        Ok(still_ours == 1)
    }

    /// Marks the previous layout's key dead while it is written.
    pub(super) async fn mark_dead_legacy(&self, token: &ClaimToken, marker: String) -> Result<(), DedupeError> {
        if token.legacy_key.is_some() && token.legacy_writes {
            let _: i64 = self.call(super::Op::Legacy(Op::Dead(marker)), token).await?;
        }
        Ok(())
    }

    /// Releases our claim of the previous layout's key while it is written (a dead marker it took over is put
    /// back).
    pub(super) async fn release_legacy(&self, token: &ClaimToken) -> Result<(), DedupeError> {
        if token.legacy_key.is_some() && token.legacy_writes {
            let _: i64 = self.call(super::Op::Legacy(Op::Release), token).await?;
        }
        Ok(())
    }

    /// Renews our claim of the previous layout's key while it is written.
    pub(super) async fn renew_legacy(&self, token: &ClaimToken) -> Result<bool, DedupeError> {
        if token.legacy_key.is_none() || !token.legacy_writes {
            return Ok(true);
        }
        let renewed: i64 = self.call(super::Op::Legacy(Op::Renew), token).await?;
        Ok(renewed == 1)
    }
}
