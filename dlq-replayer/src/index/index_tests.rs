//! The index driven with records built here (no broker): what a record without a valid MAC can put in it
//! (finding P3), and the index past its memory budget (issue 44). The same, against the real broker, are
//! `unsigned_dead_letters_with_huge_headers_stay_minimal_and_are_never_untriaged` (tests/tests/suite/replayer_trust.rs)
//! and `index_past_its_memory_budget_lists_shows_and_replays_every_entry_exactly_once` (tests/tests/suite/replayer.rs).

use std::collections::BTreeMap;

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    record_auth::{RecordAuthConfig, RecordKeys},
    wire::{EntryStatus, EntryStatusRecord, EventMeta, OwnedHeaderTable, now_ms},
};
use hookline_record::{
    Original, dead_letter::DeadLetterFailure, inbound::InboundRecord, raw as header, retry::Origin as RetryOrigin,
};
use rdkafka::message::{Header, OwnedHeaders};

use super::{Budget, Criteria, Index, Position, Status, build::DlqRecord};

const DLQ: &str = "webhooks.dlq";

/// Record keys with one key, from a file removed at once after loading.
fn keys() -> RecordKeys {
    keys_accepting_unsigned_until(None)
}

fn keys_accepting_unsigned_until(until: Option<String>) -> RecordKeys {
    let path = std::env::temp_dir().join(format!("hookline-index-test-key-{}-{}", std::process::id(), now_ms()));
    std::fs::write(&path, "a-record-key-for-the-index-tests-of-forty-eight-bytes-or-so-0123").expect("key file");
    let keys = RecordKeys::load(&RecordAuthConfig {
        keys: vec![SecretRef::from_file("k1", path.display().to_string())],
        accept_unsigned_until: until,
        inbound_only_keys: Vec::new(),
    })
    .expect("keys");
    let _ = std::fs::remove_file(&path);
    keys
}

/// A dead letter's headers, forged (no writer would carry a source or an error this long): through the raw names.
fn dead_letter(source: &str, event_id: &str, error: &str) -> OwnedHeaders {
    [
        (header::SOURCE, source),
        (header::EVENT_ID, event_id),
        (header::dlq::ERROR_CLASS, "poison"),
        (header::dlq::ERROR, error),
        (header::dlq::ORIGINAL_TOPIC, "webhooks.inbound"),
        (header::dlq::SERVICE, "billing"),
    ]
    .into_iter()
    .fold(OwnedHeaders::new(), |headers, (key, value)| headers.insert(Header { key, value: Some(value) }))
}

/// Adds the record at `position`, signed with `keys` when given.
fn add(index: &Index, keys: Option<&RecordKeys>, position: Position, headers: OwnedHeaders) {
    let body = b"{}";
    let headers = match keys {
        Some(keys) => keys.sign(DLQ, None, Some(body), Some(&headers), now_ms()).expect("signed"),
        None => headers,
    };
    let record =
        DlqRecord { position, key: None, payload: Some(body), headers: Some(&headers), timestamp_ms: Some(now_ms()) };
    let mut state = index.write();
    index.add_dlq_record(&mut state, &record);
    state.enforce_budget();
}

fn everything(index: &Index) -> Vec<super::Entry> {
    index.page(&index.compile(&Criteria::default()), None, usize::MAX).expect("page").entries
}

#[test]
fn records_without_a_valid_mac_add_no_strings_and_are_never_untriaged() {
    let keys = keys();
    let index = Index::new(DLQ, 3, 3600, keys.clone(), Budget::default());
    add(&index, Some(&keys), Position { partition: 0, offset: 0 }, dead_letter("github", "real", "boom"));
    // Signed, with an error longer than a consumer writes: kept, cut to 2 KiB.
    let long = "e".repeat(100_000);
    add(&index, Some(&keys), Position { partition: 0, offset: 1 }, dead_letter("github", "long", &long));
    for n in 0..20 {
        let (source, event_id, error) =
            (format!("{n}{}", "s".repeat(100_000)), format!("{n}{}", "i".repeat(100_000)), "x".repeat(600_000));
        add(&index, None, Position { partition: 0, offset: 2 + n }, dead_letter(&source, &event_id, &error));
    }
    // Old code: about 5 MB of forged strings. Now: one vector of entries (1,024 reserved) and a few short strings.
    assert!(index.approx_bytes() < 256 * 1024, "{} bytes", index.approx_bytes());
    assert_eq!((index.len(), index.unverified_len()), (22, 20));
    assert!(index.string_bytes().0 < 2048 + 64, "{:?}", index.string_bytes());
    let entries = everything(&index);
    assert_eq!(entries[1].entry.error.as_deref().map(str::len), Some(2048));
    let untriaged = entries.iter().filter(|entry| entry.status.is_untriaged()).count();
    assert_eq!(untriaged, 2);
    for entry in &entries[2..] {
        assert_eq!(entry.status, Status::Unverified);
        assert_eq!((entry.entry.source.as_deref(), entry.entry.event_id.as_deref()), (None, None));
    }
    let gauges = index.gauges().expect("gauges");
    assert_eq!(gauges.untriaged.values().map(|seen| seen.count).sum::<usize>(), 2, "{:?}", gauges.untriaged);
    let auth: Vec<(&str, u64)> = index.entry_counts().auth().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(auth, vec![("authentic", 2), ("unsigned", 20)]);
}

#[test]
fn past_its_budget_the_index_moves_entries_to_disk_and_every_query_still_sees_them() {
    let keys = keys();
    let budget = Budget { memory_bytes: 1024 * 1024, spill_dir: std::env::temp_dir() };
    let index = Index::new(DLQ, 3, 3600, keys.clone(), budget);
    // 6,000 entries over two partitions, each with its own 300-byte error message: about 2.5 MiB in memory.
    let n = 6_000_i64;
    let error_of = |i: i64| format!("handler failed for event {i}: {}", "x".repeat(270));
    for i in 0..n {
        let position = Position { partition: (i % 2) as i32, offset: i / 2 };
        let source = if i % 3 == 0 { "stripe" } else { "github" };
        add(&index, Some(&keys), position, dead_letter(source, &format!("event-{i:05}"), &error_of(i)));
    }
    let (spilled, disk_bytes) = index.spilled();
    assert!(spilled > n as usize / 2 && spilled < n as usize, "{spilled} on disk, {disk_bytes} bytes");
    assert!(index.approx_bytes() <= 1024 * 1024, "{} bytes in memory", index.approx_bytes());

    // Every entry once, in (partition, offset) order, with its event id and error message.
    let entries = everything(&index);
    assert_eq!(entries.len(), n as usize);
    for (at, entry) in entries.iter().enumerate() {
        let i = if at < n as usize / 2 { 2 * at as i64 } else { 2 * (at as i64 - n / 2) + 1 };
        assert_eq!(entry.entry.event_id.as_deref(), Some(format!("event-{i:05}").as_str()));
        assert_eq!(entry.entry.error.as_deref(), Some(error_of(i).as_str()));
        assert_eq!(entry.status, Status::New);
    }
    // Pages after a cursor, a source filter, a text filter on messages kept per entry and interned.
    let all = index.compile(&Criteria::default());
    let mut after = None;
    let mut paged = Vec::new();
    loop {
        let page = index.page(&all, after, 100).expect("page");
        assert_eq!(page.total_matching, n as usize);
        after = page.entries.last().map(|entry| entry.position());
        paged.extend(page.entries.into_iter().map(|entry| entry.entry.id));
        if page.next_cursor.is_none() {
            break;
        }
    }
    assert_eq!(paged, entries.iter().map(|entry| entry.entry.id.clone()).collect::<Vec<_>>());
    let stripe = index.compile(&Criteria { source: Some("stripe".into()), ..Criteria::default() });
    assert_eq!(index.stats(&stripe).expect("stats").total, 2_000);
    for i in [0, 1, 5_998, 5_999] {
        let text = index.compile(&Criteria { text: Some(format!("FOR EVENT {i}:")), ..Criteria::default() });
        let found = index.page(&text, None, 10).expect("page").entries;
        assert_eq!(found.len(), 1, "{i}");
        assert_eq!(found[0].entry.event_id.as_deref(), Some(format!("event-{i:05}").as_str()));
    }

    // One entry on disk and one in memory, by position; a status for each, applied where each is.
    let (cold, hot) = (Position { partition: 0, offset: 0 }, Position { partition: 1, offset: n / 2 - 1 });
    for position in [cold, hot] {
        let entry = index.get(position).expect("get").expect("entry");
        assert_eq!(entry.position(), position);
        let status = EntryStatusRecord {
            status: EntryStatus::Discarded,
            at_ms: 1,
            by: "alice".into(),
            event_id: entry.entry.event_id.clone(),
            new_entry: None,
            note: Some("test".into()),
            replays: Some(2),
        };
        index.apply_own_status(position, &status);
        let entry = index.get(position).expect("get").expect("entry");
        assert_eq!((entry.status, entry.replays), (Status::Discarded, 2));
        assert_eq!(entry.last_status.and_then(|status| status.note).as_deref(), Some("test"));
    }
    let stats = index.stats(&all).expect("stats");
    assert_eq!(stats.by_status.get("discarded"), Some(&2));

    // A bulk action's walk: every position up to the ends when it started, once, in batches; none added after.
    let ends: BTreeMap<i32, i64> = index.ends();
    add(&index, Some(&keys), Position { partition: 0, offset: n }, dead_letter("github", "late", "late"));
    let (mut walked, mut after) = (Vec::new(), None);
    loop {
        let batch = index.positions_after(&all, after, &ends, 64).expect("positions");
        let Some(last) = batch.last().copied() else { break };
        walked.extend(batch);
        after = Some(last);
    }
    assert_eq!(walked, entries.iter().map(|entry| entry.position()).collect::<Vec<_>>());
}

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The index's peak resident memory over N dead letters shaped like the consumer's (every DLQ header, 64-hex event
/// ids, 6 sources, 8 types, 300 distinct error messages, a status for every fifth), built in this process
/// without a broker, with the budget `HOOKLINE_MEASURE_BUDGET_MB` (0: none, everything in memory). Prints one
/// JSON line: VmHWM (peak RSS, from /proc) before and after the build and after the queries, the bytes counted,
/// the entries on disk, and the queries' times. docs/benchmarks/dlq-and-reconciler.md has the command.
#[test]
#[ignore = "a measurement: minutes, and a few hundred MB of memory and disk"]
fn measure_index_peak_rss() {
    let n: i64 = std::env::var("HOOKLINE_MEASURE_ENTRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000_000);
    let budget_mb: usize = std::env::var("HOOKLINE_MEASURE_BUDGET_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    // Unsigned records inside an open transition window are indexed in full, as signed ones are, without the
    // HMAC of each (which this unoptimised build would spend most of its time on).
    let keys = keys_accepting_unsigned_until(Some(hookline_common::time::format_rfc3339_seconds(now_ms() + 3_600_000)));
    let budget = Budget {
        memory_bytes: if budget_mb == 0 { usize::MAX } else { budget_mb * 1024 * 1024 },
        spill_dir: std::env::temp_dir(),
    };
    let index = Index::new(DLQ, 3, 3600, keys, budget);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (rss_before, hwm_before) = (proc_status_kib("VmRSS:"), proc_status_kib("VmHWM:"));
    const SOURCES: [&str; 6] = ["github", "stripe", "shopify", "slack", "twilio", "sendgrid"];
    const TYPES: [&str; 8] = [
        "push",
        "invoice.paid",
        "orders/create",
        "event_callback",
        "sms",
        "delivered",
        "pull_request",
        "charge.failed",
    ];
    let started = std::time::Instant::now();
    let body = vec![b'x'; 250];
    for i in 0..n {
        let event_id = format!("{:064x}", (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        let error = format!("upstream {} answered 422: field `amount` is invalid for account {}", i % 300, i % 300);
        let received_at_ms = 1_764_000_000_000 + i * 100;
        let mut inbound = InboundRecord::new(EventMeta {
            source: SOURCES[(i % 6) as usize].to_owned(),
            event_id: event_id.clone(),
            event_type: Some(TYPES[(i % 8) as usize].to_owned()),
            received_at_ms,
            content_type: Some("application/json".to_owned()),
            secret_id: "primary".to_owned(),
            ordering_key: None,
        });
        inbound.forwarded_headers.push(("user-agent".to_owned(), Bytes::from_static(b"GitHub-Hookshot/abc123")));
        let inbound = inbound.encode("webhooks.inbound", Bytes::from(body.clone()));
        let failure = DeadLetterFailure {
            origin: RetryOrigin { topic: "webhooks.inbound".to_owned(), partition: 3, offset: i * 7 },
            consumer_group: "hookline-consumer".to_owned(),
            service: "hookline-consumer".to_owned(),
            handler: "http".to_owned(),
            attempts: 1 + (i % 5) as u32,
            error_class: if i % 3 == 0 { "retryable_exhausted" } else { "poison" }.to_owned(),
            error,
            first_failure_at_ms: received_at_ms,
            last_failure_at_ms: received_at_ms,
            consumer_version: "0.1.0".to_owned(),
            dedupe_retention_days: None,
            destination: None,
        };
        let original = Original { key: inbound.key.clone(), body: inbound.body.clone(), headers: &inbound.headers };
        let headers = OwnedHeaderTable::from(failure.encode(DLQ, original).headers);
        let position = Position { partition: (i % 3) as i32, offset: i / 3 };
        let record = DlqRecord {
            position,
            key: Some(event_id.as_bytes()),
            payload: Some(&body),
            headers: Some(&headers),
            timestamp_ms: Some(now_ms()),
        };
        {
            let mut state = index.write();
            index.add_dlq_record(&mut state, &record);
            if i % 1024 == 1023 {
                state.enforce_budget();
            }
        }
        if i % 5 == 0 {
            let status = EntryStatusRecord {
                status: if i % 10 == 0 { EntryStatus::Succeeded } else { EntryStatus::Discarded },
                at_ms: 1,
                by: "replayer:bench".into(),
                event_id: None,
                new_entry: None,
                note: Some("benchmark".into()),
                replays: Some(1),
            };
            index.apply_own_status(position, &status);
        }
    }
    index.write().enforce_budget();
    let build_s = started.elapsed().as_secs_f64();
    let hwm_built = proc_status_kib("VmHWM:");
    let all = index.compile(&Criteria::default());
    let timed = |f: &dyn Fn()| {
        let at = std::time::Instant::now();
        f();
        at.elapsed().as_secs_f64() * 1000.0
    };
    let list_ms = timed(&|| assert_eq!(index.page(&all, None, 50).expect("page").total_matching, n as usize));
    let stats_ms = timed(&|| assert_eq!(index.stats(&all).expect("stats").total, n as usize));
    let show_ms = timed(&|| {
        for k in 0..100 {
            let position = Position { partition: (k % 3) as i32, offset: (k * 7_919) % (n / 3) };
            assert!(index.get(position).expect("get").is_some());
        }
    }) / 100.0;
    let (spilled, disk_bytes) = index.spilled();
    println!(
        "{}",
        serde_json::json!({
            "entries": n,
            "budget_mb": budget_mb,
            "rss_before_kib": rss_before,
            "hwm_before_kib": hwm_before,
            "hwm_after_build_kib": hwm_built,
            "hwm_after_queries_kib": proc_status_kib("VmHWM:"),
            "counted_bytes": index.approx_bytes(),
            "unverified_entries": index.unverified_len(),
            "spilled_entries": spilled,
            "spill_file_bytes": disk_bytes,
            "build_s": build_s,
            "list_ms": list_ms,
            "stats_ms": stats_ms,
            "show_ms": show_ms,
        })
    );
}
