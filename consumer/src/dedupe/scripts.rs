//! The scripts of the bucketed layout ([`hookline_common::wire::dedupe_layout`]), each rule written once as a Lua
//! function over one event's keys and arguments, so that the one-event script and the many-event script of
//! records started together ([`super::together`]) run the same rule.
//!
//! One event's keys, all under its hash tag (one cluster slot): `KEYS[kb+1]` its claim key, then for the writing
//! scripts the bucket written, then the buckets its window covers, newest first. Its arguments start at `ab`, the
//! first (`ARGV[ab+1]`) the number of its keys, so that a many-event script finds the next event's.
//!
//! A bucket's value for the event is `<s>` (processed at `s`, seconds, Redis's clock), `f<s>:...` (filtered) or
//! `d<s>:<dead marker>` (dead-lettered); an outcome older than the source's window is no outcome. Several buckets
//! may hold one (a dead or filtered outcome, then the outcome of the copy that claimed over it): the latest counts,
//! at the same second a processed one before a filtered one before a dead one (a claim may take over the latter
//! two, never a processed one).

/// Redis's time is read once per script run, when first needed (`clock()`): a many-event script's events share it.
/// `outcome(kb, first, n, field, window)`: the kind (`done`, a processed or filtered outcome, or `dead`) and value
/// of the event's latest outcome within `window` seconds, read from `KEYS[kb+first .. kb+first+n-1]`; `nil` when there is none.
/// `write(bucket, field, value, ttl)`: records the outcome, the bucket living at least `ttl` ms more.
const FUNCTIONS: &str = r"
local now_s
local function clock()
  if not now_s then now_s = redis.call('TIME')[1] end
  return now_s
end
local function outcome(kb, first, n, field, window)
  local now = tonumber(clock())
  local best, best_at, best_kind, best_rank = nil, -1, nil, 0
  for i = kb + first, kb + first + n - 1 do
    local v = redis.call('HGET', KEYS[i], field)
    if v then
      local c = string.sub(v, 1, 1)
      local kind, at, rank = 'done', nil, 3
      if c == 'd' then
        kind, at, rank = 'dead', tonumber(string.match(v, '^d(%d+)')), 1
      elseif c == 'f' then
        at, rank = tonumber(string.match(v, '^f(%d+)')), 2
      else
        at = tonumber(v)
      end
      if at and now - at < window and (at > best_at or (at == best_at and rank > best_rank)) then
        best, best_at, best_kind, best_rank = v, at, kind, rank
      end
    end
  end
  return best_kind, best
end

local function write(bucket, field, value, ttl)
  redis.call('HSET', bucket, field, value)
  if redis.call('PTTL', bucket) < ttl then redis.call('PEXPIRE', bucket, ttl) end
end

local function at_now(value)
  return string.gsub(value, '@', clock(), 1)
end
";

/// `claim(kb, ab)`, arguments: keys, token, lease ms, window s, field, re-drive (`1`), the copy's type when
/// allowlisted (hex, or empty). Returns `acquired` (also for our own claim re-sent), `held` (another's live
/// claim), `done`, `dead`, `over:<dead marker>` (a re-drive, or an allowlisted type the marker does not record,
/// takes the claim over a dead outcome) or `over:f<s>:<filter>;types=...` (an allowlisted type a filtered outcome
/// does not record takes the claim over it, finding P8: a copy re-sent first under another type must not make the
/// genuine one a duplicate; a filtered outcome without `;types=` is done to every copy). The outcome taken over
/// stays in its bucket, so a release leaves it as it was; a later outcome of this claim is newer and counts.
const CLAIM: &str = r"
local function untried(value, new_type, untyped)
  if new_type == '' then return false end
  local types = string.find(value, ';types=,', 1, true)
  if not types then return untyped end
  return not string.find(value, ',' .. new_type .. ',', types, true)
end

local function rule(kb, ab)
  local key, token = KEYS[kb + 1], ARGV[ab + 2]
  -- The claim is set if the key was free, in the one call that reads what it held (Redis 7.0: NX with GET);
  -- an outcome that refuses the claim deletes it again, in this same script.
  local current = redis.call('SET', key, token, 'NX', 'PX', ARGV[ab + 3], 'GET')
  if current == token then return 'acquired' end
  if current then return 'held' end
  local kind, value = outcome(kb, 2, tonumber(ARGV[ab + 1]) - 1, ARGV[ab + 5], tonumber(ARGV[ab + 4]))
  local new_type = ARGV[ab + 7]
  if kind == 'done' then
    if string.sub(value, 1, 1) ~= 'f' or not untried(value, new_type, false) then
      redis.call('DEL', key)
      return 'done'
    end
    return 'over:' .. value
  end
  if kind == 'dead' then
    local marker = string.sub(value, string.find(value, ':', 1, true) + 1)
    if ARGV[ab + 6] ~= '1' and not untried(marker, new_type, true) then
      redis.call('DEL', key)
      return 'dead'
    end
    return 'over:' .. marker
  end
  return 'acquired'
end
";
/// Arguments per event of [`CLAIM`].
pub(super) const CLAIM_ARGS: usize = 7;

/// `done(kb, ab)`, arguments: keys, token, window s, field, outcome (`@` stands for Redis's time, s), bucket TTL
/// ms. Records the outcome whatever the claim key holds, ends our claim, and returns 1 if the claim was ours or the
/// event already done (a re-sent mark whose first reply was lost), else 0.
const DONE: &str = r"
local function rule(kb, ab)
  local key, token, field = KEYS[kb + 1], ARGV[ab + 2], ARGV[ab + 4]
  local current = redis.call('GET', key)
  local ours = current == token
  if not ours then
    ours = outcome(kb, 3, tonumber(ARGV[ab + 1]) - 2, field, tonumber(ARGV[ab + 3])) == 'done'
  end
  write(KEYS[kb + 2], field, at_now(ARGV[ab + 5]), tonumber(ARGV[ab + 6]))
  if current == token then redis.call('DEL', key) end
  if ours then return 1 end
  return 0
end
";

/// `mark_ours(kb, ab)`, arguments: keys (2: the claim key, the bucket written), token, field, outcome (`@` stands
/// for Redis's time, s), bucket TTL ms. What [`DONE`] and [`DEAD`] do when the claim key holds our claim, the
/// common case, with two keys instead of the window's: records the outcome, ends the claim and returns 1.
/// Otherwise it does nothing and returns -1, and the caller runs [`DONE`] or [`DEAD`], which decide the rest from
/// the window's buckets (a lapsed lease, a re-sent mark).
const MARK_OURS: &str = r"
local function rule(kb, ab)
  local key, token = KEYS[kb + 1], ARGV[ab + 2]
  if redis.call('GET', key) ~= token then return -1 end
  write(KEYS[kb + 2], ARGV[ab + 3], at_now(ARGV[ab + 4]), tonumber(ARGV[ab + 5]))
  redis.call('DEL', key)
  return 1
end
";
/// Arguments per event of [`MARK_OURS`].
pub(super) const MARK_OURS_ARGS: usize = 5;

/// `dead(kb, ab)`, the arguments of [`DONE`]: records the dead outcome if the claim key holds our claim, or
/// nothing and the event is not done (the lease lapsed while the dead letter was produced; or a re-sent mark).
/// Never over a done outcome or another consumer's claim.
const DEAD: &str = r"
local function rule(kb, ab)
  local key, token, field = KEYS[kb + 1], ARGV[ab + 2], ARGV[ab + 4]
  local current = redis.call('GET', key)
  if current ~= token then
    if current then return 0 end
    if outcome(kb, 3, tonumber(ARGV[ab + 1]) - 2, field, tonumber(ARGV[ab + 3])) == 'done' then return 0 end
  end
  write(KEYS[kb + 2], field, at_now(ARGV[ab + 5]), tonumber(ARGV[ab + 6]))
  if current == token then redis.call('DEL', key) end
  return 1
end
";

/// `release(kb, ab)`, arguments: keys (1), token. Deletes the claim key only if it holds our claim; a dead
/// outcome the claim took over is still in its bucket.
const RELEASE: &str = r"
local function rule(kb, ab)
  if redis.call('GET', KEYS[kb + 1]) ~= ARGV[ab + 2] then return 0 end
  return redis.call('DEL', KEYS[kb + 1])
end
";

/// `renew(kb, ab)`, arguments: keys (1), token, lease ms. Extends our claim; 0 when the key no longer holds it.
const RENEW: &str = r"
local function rule(kb, ab)
  if redis.call('GET', KEYS[kb + 1]) == ARGV[ab + 2] then return redis.call('PEXPIRE', KEYS[kb + 1], ARGV[ab + 3]) end
  return 0
end
";

/// The one-event script of a rule.
fn one_event(rule: &str) -> String {
    format!("{FUNCTIONS}{rule}\nreturn rule(0, 0)\n")
}

/// The many-event script of a rule taking `width` arguments per event: the rule for each event in turn, the
/// replies in event order.
pub(super) fn many_events(rule: &str, width: usize) -> String {
    format!(
        "{FUNCTIONS}{rule}\nlocal replies, kb, ab = {{}}, 0, 0\nwhile ab < #ARGV do\n  replies[#replies + 1] = \
         rule(kb, ab)\n  kb = kb + tonumber(ARGV[ab + 1])\n  ab = ab + {width}\nend\nreturn replies\n"
    )
}

/// The rules, by name.
pub(super) fn claim() -> String {
    one_event(CLAIM)
}
pub(super) fn done() -> String {
    one_event(DONE)
}
pub(super) fn dead() -> String {
    one_event(DEAD)
}
pub(super) fn release() -> String {
    one_event(RELEASE)
}
pub(super) fn renew() -> String {
    one_event(RENEW)
}
pub(super) fn mark_ours() -> String {
    one_event(MARK_OURS)
}
pub(super) fn claim_many() -> String {
    many_events(CLAIM, CLAIM_ARGS)
}
pub(super) fn mark_ours_many() -> String {
    many_events(MARK_OURS, MARK_OURS_ARGS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_many_event_script_runs_the_one_event_rule_per_event() {
        let one = claim();
        let many = claim_many();
        assert!(one.ends_with("return rule(0, 0)\n") && one.contains(CLAIM), "{one}");
        assert!(many.contains(CLAIM) && many.contains("ab = ab + 7"), "{many}");
        assert!(!many.contains("return rule(0, 0)"), "{many}");
    }
}
