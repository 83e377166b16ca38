//! The last rejections of each source, kept in memory and served on the admin listener (`GET /admin/rejections`),
//! so that "why are my Stripe webhooks getting 401?" has an answer without reading logs (the log is rate-limited,
//! [`crate::rejection_log`], and may have held the line back). The handshakes a source answered are listed with
//! them (code `handshake`, with their kind), so that "did Meta's subscription check reach us?" has one too; they
//! are kept in a small ring of their own ([`HANDSHAKES_PER_SOURCE`]), because most handshakes need no credential
//! (Graph's `validationToken`, a challenge echo, X's CRC) and a flood of them must not push out real rejections.
//!
//! An entry holds what tells the reasons apart and nothing a sender chose freely: the time, the code and status,
//! the ids of the secrets the signature was checked against, the timestamp's skew when it was stale or in the
//! future, the client address, and the event id when it was known. Never the body, a signature, a header value or
//! a secret. Nothing here is ever written to Kafka.
//!
//! Bounded twice: at most [`PER_SOURCE`] rejections and [`HANDSHAKES_PER_SOURCE`] handshakes per source (the
//! oldest dropped), and one pair of rings per source label,
//! which is a configured source name or `unknown` (see `ingest::source_label`), so the set of rings is the source
//! table plus one; a reload drops the rings of sources it removed ([`RejectionRing::retain_sources`]).

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::IpAddr,
    sync::Mutex,
};

use hookline_common::http::Body;
use http::{Response, StatusCode};

use crate::{error::json_response, source::SourceTable};

/// Entries kept per source. A provider retrying one failing event, or a handful of failing events, fits many
/// times over, so the pattern (which secrets, what skew, which addresses) is visible even after a burst; and an
/// entry is a few hundred bytes at most (secret ids come from the config, event ids are at most 256 bytes), so a
/// source's ring stays in the tens of kilobytes and the whole answer small enough to read in a terminal.
pub const PER_SOURCE: usize = 100;

/// Answered handshakes kept per source, apart from its rejections: enough to see that a provider's checks arrive.
pub const HANDSHAKES_PER_SOURCE: usize = 10;

/// The admin route serving the rings.
pub const REJECTIONS_PATH: &str = "/admin/rejections";

/// The source label of rejections that named no configured source.
pub const UNKNOWN_SOURCE: &str = "unknown";

/// One refused request, or one answered handshake.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RejectionEntry {
    /// When it was refused (or answered), ms since the Unix epoch.
    pub at_ms: i64,
    /// `Rejection::code`, the same code the sender got in its answer; `handshake` for an answered handshake.
    pub code: &'static str,
    /// The HTTP status the sender got.
    pub status: u16,
    /// For a refused signature (any `Verify` rejection), the ids of the source's secrets active when the request
    /// arrived: those the signature was checked against, in configured order. Empty for every other rejection.
    pub secrets_tried: Vec<String>,
    /// For `timestamp_stale` and `timestamp_future`: the signed timestamp minus the gateway's clock, in ms.
    pub skew_ms: Option<i64>,
    /// The client address the request came from (the proxy's, behind one).
    pub peer: Option<IpAddr>,
    /// The event id, when it was known before the refusal (a verified event the broker did not take).
    pub event_id: Option<String>,
    /// For an answered handshake: its kind (`meta_challenge`, `okta`, `sns`, ...); absent for a rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake: Option<&'static str>,
}

/// Each source's last [`PER_SOURCE`] rejections and last [`HANDSHAKES_PER_SOURCE`] answered handshakes.
#[derive(Debug, Default)]
pub struct RejectionRing {
    sources: Mutex<Sources>,
}

#[derive(Debug, Default)]
struct Sources {
    by_name: HashMap<String, Rings>,
    /// The order entries were recorded in (times in ms may be equal).
    next_seq: u64,
}

/// A source's two rings, each oldest first, each entry with its sequence number.
#[derive(Debug, Default)]
struct Rings {
    rejections: VecDeque<(u64, RejectionEntry)>,
    handshakes: VecDeque<(u64, RejectionEntry)>,
}

impl RejectionRing {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sources> {
        self.sources.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps `entry` as `source`'s newest rejection (or handshake, when it is one), dropping the oldest when that
    /// ring is full. `source` must be a bounded label: a configured name or [`UNKNOWN_SOURCE`].
    pub fn record(&self, source: &str, entry: RejectionEntry) {
        let mut sources = self.lock();
        let seq = sources.next_seq;
        sources.next_seq += 1;
        let rings = match sources.by_name.get_mut(source) {
            Some(rings) => rings,
            None => sources.by_name.entry(source.to_owned()).or_default(),
        };
        let (ring, bound) = match entry.handshake {
            Some(_) => (&mut rings.handshakes, HANDSHAKES_PER_SOURCE),
            None => (&mut rings.rejections, PER_SOURCE),
        };
        if ring.len() == bound {
            ring.pop_front();
        }
        ring.push_back((seq, entry));
    }

    /// Every source's entries (or only `source`'s), rejections and handshakes together, newest first; a source
    /// without any is absent.
    pub fn newest_first(&self, source: Option<&str>) -> BTreeMap<String, Vec<RejectionEntry>> {
        self.lock()
            .by_name
            .iter()
            .filter(|(name, _)| source.is_none_or(|wanted| wanted == name.as_str()))
            .map(|(name, rings)| {
                let mut entries: Vec<&(u64, RejectionEntry)> =
                    rings.rejections.iter().chain(rings.handshakes.iter()).collect();
                entries.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
                (name.clone(), entries.into_iter().map(|(_, entry)| entry.clone()).collect())
            })
            .collect()
    }

    /// Drops the rings of the sources `keep` says are gone (after a reload removed them), so that the rings
    /// stay as many as the sources served.
    pub fn retain_sources(&self, keep: impl Fn(&str) -> bool) {
        self.lock().by_name.retain(|name, _| name == UNKNOWN_SOURCE || keep(name));
    }
}

/// The answer to `GET /admin/rejections[?source=<name>]`: `{"gateway": <name>, "sources": {<source>: [newest
/// first]}}`. A name that is neither configured nor `unknown` is a 404, so a typo does not read as "no rejections".
/// Authorisation is the caller's (the admin listener's rule for `/admin/` routes).
pub fn rejections_response(
    ring: &RejectionRing,
    sources: &SourceTable,
    gateway: &str,
    query: Option<&str>,
) -> Response<Body> {
    let wanted = query.into_iter().flat_map(|query| query.split('&')).find_map(|pair| pair.strip_prefix("source="));
    if let Some(name) = wanted {
        if name != UNKNOWN_SOURCE && sources.name_of(name).is_none() {
            return json_response(
                StatusCode::NOT_FOUND,
                &serde_json::json!({ "error": { "code": "unknown_source", "message": "no source has this name" } }),
            );
        }
    }
    let mut by_source = ring.newest_first(wanted);
    if let Some(name) = wanted {
        // Asked by name: an empty list says "configured, nothing refused".
        by_source.entry(name.to_owned()).or_default();
    }
    json_response(StatusCode::OK, &serde_json::json!({ "gateway": gateway, "sources": by_source }))
}

/// This gateway's name in the answer, so rings gathered from several replicas can be told apart: the host name
/// (the pod's name under Kubernetes), else `HOSTNAME`, else `gateway`.
pub fn gateway_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|name| !name.is_empty()))
        .unwrap_or_else(|| "gateway".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at_ms: i64) -> RejectionEntry {
        RejectionEntry {
            at_ms,
            code: "signature_mismatch",
            status: 401,
            secrets_tried: vec!["2026-12".to_owned()],
            skew_ms: None,
            peer: Some(IpAddr::from([10, 0, 0, 1])),
            event_id: None,
            handshake: None,
        }
    }

    #[test]
    fn a_ring_is_bounded_and_keeps_the_newest() {
        let ring = RejectionRing::default();
        let n = i64::try_from(PER_SOURCE).unwrap() + 50;
        for at_ms in 0..n {
            ring.record("stripe", entry(at_ms));
        }
        ring.record("github", entry(7));
        let all = ring.newest_first(None);
        let stripe = &all["stripe"];
        assert_eq!(stripe.len(), PER_SOURCE);
        let kept: Vec<i64> = stripe.iter().map(|entry| entry.at_ms).collect();
        let newest: Vec<i64> = (50..n).rev().collect();
        assert_eq!(kept, newest, "the newest, newest first; the 50 oldest dropped");
        assert_eq!(all["github"], vec![entry(7)], "one source's flood does not push out another's");
        assert_eq!(ring.newest_first(Some("github")).len(), 1);
    }

    /// P13: answered handshakes (most need no credential) cannot push a source's real rejections out.
    #[test]
    fn a_flood_of_handshakes_keeps_the_rejections() {
        let ring = RejectionRing::default();
        ring.record("graph", entry(1));
        for at_ms in 2..10_002 {
            ring.record(
                "graph",
                RejectionEntry { code: "handshake", status: 200, handshake: Some("validation_token"), ..entry(at_ms) },
            );
        }
        let graph = &ring.newest_first(Some("graph"))["graph"];
        assert!(graph.iter().any(|kept| *kept == entry(1)), "the rejection is still listed");
        assert_eq!(graph.len(), 1 + HANDSHAKES_PER_SOURCE, "handshakes bounded apart");
        assert_eq!(graph[0].at_ms, 10_001, "newest first");
        assert_eq!(graph.last(), Some(&entry(1)));
    }

    #[test]
    fn a_reload_drops_the_rings_of_removed_sources_but_not_unknown() {
        let ring = RejectionRing::default();
        for source in ["stripe", "github", UNKNOWN_SOURCE] {
            ring.record(source, entry(1));
        }
        ring.retain_sources(|name| name == "github");
        let names: Vec<String> = ring.newest_first(None).into_keys().collect();
        assert_eq!(names, vec!["github".to_owned(), UNKNOWN_SOURCE.to_owned()]);
    }
}
