//! The scheduler's decisions, without Kafka: windows, routes, chains, deferral and breakers.

use bytes::Bytes;
use hookline_common::{record_auth::Verdict, wire::FetchedRecord};
use rdkafka::Timestamp;

use super::*;
use crate::record::Record;

fn config(max_in_flight: usize, route_max_in_flight: usize) -> ProcessingConfig {
    ProcessingConfig { max_in_flight, route_max_in_flight, partition_window: 4, ..ProcessingConfig::default() }
}

/// A record as the door would hand it over (the scheduler reads only its position, size and timestamp).
fn parsed(topic: &str, partition: i32, offset: i64, timestamp: Timestamp, body: Option<Bytes>) -> Box<Record> {
    let fetched = FetchedRecord::new(topic, partition, offset, timestamp, None, body, None);
    Box::new(Record::parse(fetched, |_| Verdict::UnsignedAccepted))
}

fn record(partition: i32, offset: i64) -> Box<Record> {
    parsed("t", partition, offset, Timestamp::NotAvailable, None)
}

fn admission(source: &str, ordering_key: Option<&str>) -> Admission {
    Admission {
        source: Some(source.to_owned()),
        event_type: None,
        ordering_key: ordering_key.map(str::to_owned),
        due_at_ms: None,
        first_failure_at_ms: None,
        attempts: None,
        destination: None,
    }
}

#[test]
fn many_records_of_one_partition_run_at_once_and_the_prefix_waits_for_the_head() {
    let mut scheduler = Scheduler::new(&config(8, 8), &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    for offset in 0..3 {
        assert!(scheduler.admit(record(0, offset), admission("a", None), 0));
    }
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    assert_eq!(jobs.len(), 3);
    let mut jobs = jobs.into_iter();
    let head = jobs.next().expect("head");
    assert_eq!(scheduler.complete(jobs.next().expect("1"), Completion::Handled, Downstream::Answered, 0), None);
    assert_eq!(scheduler.complete(jobs.next().expect("2"), Completion::Handled, Downstream::Answered, 0), None);
    assert_eq!(scheduler.complete(head, Completion::Handled, Downstream::Answered, 0), Some(2));
}

#[test]
fn a_full_route_does_not_hold_back_another_route() {
    let mut scheduler = Scheduler::new(&config(4, 1), &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    scheduler.admit(record(0, 0), admission("slow", None), 0);
    scheduler.admit(record(0, 1), admission("slow", None), 0);
    scheduler.admit(record(0, 2), admission("fast", None), 0);
    let started: Vec<i64> =
        std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).map(|job| job.record.offset()).collect();
    assert_eq!(started, vec![0, 2], "the second `slow` record waits; `fast` starts");
    assert_eq!(scheduler.running(), 2);
}

#[test]
fn same_key_records_run_one_after_another_in_offset_order() {
    let mut scheduler = Scheduler::new(&config(8, 8), &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    scheduler.admit(record(0, 0), admission("a", Some("k")), 0);
    scheduler.admit(record(0, 1), admission("a", Some("k")), 0);
    scheduler.admit(record(0, 2), admission("a", Some("other")), 0);
    let first: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    assert_eq!(first.iter().map(|job| job.record.offset()).collect::<Vec<_>>(), vec![0, 2]);
    let mut first = first.into_iter();
    let head = first.next().expect("head");
    let attempts = Attempts { attempts: 1, first_failure_at_ms: 0, last_error: "x".to_owned() };
    scheduler.complete(head, Completion::RetryAt { due_at_ms: 10, attempts }, Downstream::Answered, 0);
    assert!(scheduler.next_job(Instant::now(), 0).is_none(), "offset 1 waits for its key's head to be retried");
    scheduler.release_due(10);
    let retried = scheduler.next_job(Instant::now(), 0).expect("the head again");
    assert_eq!(retried.record.offset(), 0);
    assert_eq!(retried.prior.as_ref().map(|prior| prior.attempts), Some(1));
    scheduler.complete(retried, Completion::Handled, Downstream::Answered, 0);
    assert_eq!(scheduler.next_job(Instant::now(), 0).map(|job| job.record.offset()), Some(1));
}

#[test]
fn a_full_window_pauses_its_partition_and_revoke_drops_what_is_queued() {
    let mut scheduler = Scheduler::new(&config(1, 1), &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0), ("t".to_owned(), 1)]);
    for offset in 0..4 {
        scheduler.admit(record(0, offset), admission("a", None), 0);
    }
    scheduler.admit(record(1, 0), admission("a", None), 0);
    let (pause, resume) = scheduler.pause_changes();
    assert_eq!(pause, vec![("t".to_owned(), 0)]);
    assert!(resume.is_empty());
    let running = scheduler.next_job(Instant::now(), 0).expect("one starts");
    scheduler.revoke(&[("t".to_owned(), 0)]);
    assert_eq!(scheduler.running_in(&[("t".to_owned(), 0)]), 1);
    scheduler.forget(&[("t".to_owned(), 0)]);
    assert_eq!(
        scheduler.complete(running, Completion::Handled, Downstream::Answered, 0),
        None,
        "revoked: nothing stored"
    );
    assert_eq!(scheduler.next_job(Instant::now(), 0).map(|job| job.partition.1), Some(1));
    assert!(!scheduler.admit(record(0, 9), admission("a", None), 0), "a revoked partition's record is dropped");
}

#[test]
fn a_saturated_route_defers_unordered_records_of_a_paused_partition_only() {
    let mut scheduler = Scheduler::new(&config(8, 2), &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    for offset in 0..3 {
        scheduler.admit(record(0, offset), admission("slow", None), 0);
    }
    scheduler.admit(record(0, 3), admission("slow", Some("k")), 0);
    scheduler.admit(record(0, 4), admission("fast", None), 0);
    scheduler.pause_changes();
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    let started: Vec<(i64, Work)> = jobs.iter().map(|job| (job.record.offset(), job.work)).collect();
    assert_eq!(started.len(), 4, "{started:?}");
    assert_eq!(started[..3].iter().map(|(offset, _)| *offset).collect::<Vec<_>>(), vec![0, 4, 1]);
    assert!(started[..3].iter().all(|(_, work)| *work == Work::Handle));
    assert!(
        matches!(started[3], (2, Work::Defer { reason: DeferReason::Saturated, due_at_ms }) if due_at_ms >= 500),
        "offset 2 is deferred; the ordered offset 3 waits: {started:?}"
    );
    assert_eq!(scheduler.running(), 3);
    assert_eq!(scheduler.deferring(), 1);
}

#[test]
fn an_open_breaker_defers_to_its_next_probe_and_a_successful_probe_closes_it() {
    let processing = ProcessingConfig { breaker_failures: 2, breaker_cooldown_ms: 1_000, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    for offset in 0..6 {
        scheduler.admit(record(0, offset), admission("a", None), 0);
    }
    let first = scheduler.next_job(Instant::now(), 0).expect("0");
    let second = scheduler.next_job(Instant::now(), 0).expect("1");
    scheduler.complete(first, Completion::Handled, Downstream::Failed, 0);
    assert!(scheduler.breaker_changes().is_empty(), "one failure: still closed");
    scheduler.complete(second, Completion::Handled, Downstream::Failed, 0);
    assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), true)]);
    let deferred = scheduler.next_job(Instant::now(), 10).expect("2");
    assert!(
        matches!(deferred.work, Work::Defer { reason: DeferReason::BreakerOpen, due_at_ms } if (1_000..=1_100).contains(&due_at_ms)),
        "{:?}",
        deferred.work
    );
    let probe = scheduler.next_job(Instant::now(), 1_000).expect("3, the probe");
    assert_eq!(probe.work, Work::Handle);
    let while_probing = scheduler.next_job(Instant::now(), 1_000).expect("4");
    assert!(matches!(while_probing.work, Work::Defer { reason: DeferReason::BreakerOpen, .. }));
    scheduler.complete(probe, Completion::Handled, Downstream::Answered, 1_001);
    assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), false)]);
    assert_eq!(scheduler.next_job(Instant::now(), 1_001).map(|job| job.work), Some(Work::Handle));
}

#[test]
fn a_record_past_its_retry_budget_gets_its_last_call_through_an_open_breaker() {
    let processing = ProcessingConfig { breaker_failures: 1, ..config(8, 8) };
    let retry = RetryConfig { max_total_ms: 100, ..RetryConfig::default() };
    let mut scheduler = Scheduler::new(&processing, &[], &retry);
    scheduler.assign([("t".to_owned(), 0)]);
    scheduler.admit(record(0, 0), admission("a", None), 0);
    let failing = scheduler.next_job(Instant::now(), 0).expect("0");
    scheduler.complete(failing, Completion::Handled, Downstream::Failed, 0);
    let spent = Admission { first_failure_at_ms: Some(0), ..admission("a", None) };
    scheduler.admit(record(0, 1), spent, 200);
    let last_call = scheduler.next_job(Instant::now(), 200).expect("1");
    assert_eq!(last_call.work, Work::Handle, "not deferred again: its failure goes to the DLQ");
}

#[test]
fn an_open_breaker_holds_parked_records_until_the_next_probe_and_parks_them_again_only_from_a_full_window() {
    let processing = ProcessingConfig { breaker_failures: 1, breaker_cooldown_ms: 1_000, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default());
    // Partition 0 plays the inbound topic, partition 1 the retry topic (window of 4).
    scheduler.assign([("t".to_owned(), 0), ("t".to_owned(), 1)]);
    scheduler.admit(record(0, 0), admission("a", None), 0);
    let failing = scheduler.next_job(Instant::now(), 0).expect("0");
    scheduler.complete(failing, Completion::Handled, Downstream::Failed, 0);
    assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), true)]);
    let parked = |offset| {
        (record(1, offset), Admission { due_at_ms: Some(5), first_failure_at_ms: Some(0), ..admission("a", None) })
    };
    for offset in 0..2 {
        let (message, admission) = parked(offset);
        scheduler.admit(message, admission, 10);
    }
    scheduler.admit(record(0, 1), admission("a", None), 10);
    let inbound = scheduler.next_job(Instant::now(), 10).expect("the inbound record");
    assert_eq!(inbound.record.partition(), 0, "a record read from the inbound topic is parked as before");
    assert!(matches!(inbound.work, Work::Defer { reason: DeferReason::BreakerOpen, .. }));
    assert!(scheduler.next_job(Instant::now(), 10).is_none(), "the parked ones are held, not copied again");
    assert_eq!(scheduler.deferring(), 1);
    // At the next probe, one of them probes and the other is held again.
    scheduler.release_due(1_100);
    let probe = scheduler.next_job(Instant::now(), 1_100).expect("the probe");
    assert_eq!(probe.work, Work::Handle);
    assert!(scheduler.next_job(Instant::now(), 1_100).is_none(), "held while the probe runs");
    scheduler.complete(probe, Completion::Handled, Downstream::Failed, 1_100);
    // A full window of parked records: they are parked again, so the retry topic moves on.
    for offset in 2..5 {
        let (message, admission) = parked(offset);
        scheduler.admit(message, admission, 1_100);
    }
    let (pause, _) = scheduler.pause_changes();
    assert_eq!(pause, vec![("t".to_owned(), 1)]);
    scheduler.release_due(5_000);
    let again = scheduler.next_job(Instant::now(), 1_200).expect("parked again");
    assert_eq!(again.record.partition(), 1);
    assert!(matches!(again.work, Work::Defer { reason: DeferReason::BreakerOpen, .. }));
}

fn source_topic_record(partition: i32, offset: i64) -> Box<Record> {
    parsed("s", partition, offset, Timestamp::CreateTime(offset), None)
}

#[test]
fn a_route_held_by_its_breaker_waits_in_its_source_topic_and_stops_its_fetch_at_no_copy() {
    let processing = ProcessingConfig { breaker_failures: 1, breaker_cooldown_ms: 1_000, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default()).with_source_topics(["s".to_owned()]);
    scheduler.assign([("s".to_owned(), 0), ("t".to_owned(), 0)]);
    scheduler.admit(source_topic_record(0, 0), admission("a", None), 0);
    let failing = scheduler.next_job(Instant::now(), 0).expect("0");
    scheduler.complete(failing, Completion::Handled, Downstream::Failed, 0);
    assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), true)]);
    for offset in 1..3 {
        scheduler.admit(source_topic_record(0, offset), admission("a", None), 10);
    }
    scheduler.admit(record(0, 0), admission("b", None), 10);
    let healthy = scheduler.next_job(Instant::now(), 10).expect("the other route's record");
    assert_eq!((healthy.work, healthy.record.topic()), (Work::Handle, "t"));
    assert!(scheduler.next_job(Instant::now(), 10).is_none(), "the held route's records are neither called nor copied");
    assert_eq!(scheduler.deferring(), 0);
    let (pause, resume) = scheduler.pause_changes();
    assert_eq!((pause, resume), (vec![("s".to_owned(), 0)], vec![]), "its source topic stops being fetched");
    // The probe, from memory; its success closes the breaker and the partition is fetched again.
    let probe = scheduler.next_job(Instant::now(), 1_000).expect("the probe");
    assert_eq!((probe.work, probe.record.offset()), (Work::Handle, 1));
    scheduler.complete(probe, Completion::Handled, Downstream::Answered, 1_001);
    assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), false)]);
    assert_eq!(scheduler.pause_changes(), (vec![], vec![("s".to_owned(), 0)]));
    assert_eq!(scheduler.next_job(Instant::now(), 1_001).map(|job| job.record.offset()), Some(2));
}

#[test]
fn a_record_held_in_a_source_topic_past_its_budget_gets_its_last_call_with_its_budget_spent() {
    let processing = ProcessingConfig { breaker_failures: 1, breaker_cooldown_ms: 1_000_000, ..config(8, 8) };
    let retry = RetryConfig { max_total_ms: 100, ..RetryConfig::default() };
    let mut scheduler = Scheduler::new(&processing, &[], &retry).with_source_topics(["s".to_owned()]);
    scheduler.assign([("s".to_owned(), 0)]);
    scheduler.admit(source_topic_record(0, 0), admission("a", None), 0);
    let failing = scheduler.next_job(Instant::now(), 0).expect("0");
    scheduler.complete(failing, Completion::Handled, Downstream::Failed, 0);
    scheduler.admit(source_topic_record(0, 1), admission("a", None), 10);
    assert!(scheduler.next_job(Instant::now(), 50).is_none(), "held");
    let last_call = scheduler.next_job(Instant::now(), 110).expect("its last call");
    assert_eq!(last_call.work, Work::Handle);
    let prior = last_call.prior.expect("the pipeline learns when its budget started");
    assert_eq!((prior.attempts, prior.first_failure_at_ms), (0, 10));
}

#[test]
fn a_paused_route_calls_nothing_copies_only_from_a_full_shared_window_and_resumes_with_a_fresh_budget() {
    let retry = RetryConfig { max_total_ms: 100, ..RetryConfig::default() };
    let processing = ProcessingConfig { defer_delay_ms: 1_000, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &retry);
    scheduler.assign([("t".to_owned(), 0)]);
    let pause = RoutePauseState { since_ms: 0, by: "ops".to_owned(), reason: "maintenance".to_owned() };
    assert!(scheduler.set_pause("a", Some(pause.clone()), 0));
    assert!(!scheduler.set_pause("a", Some(pause), 0), "the same pause again changes nothing");
    scheduler.admit(record(0, 0), admission("a", None), 0);
    assert!(scheduler.next_job(Instant::now(), 0).is_none(), "paused: not called");
    for offset in 1..4 {
        let first_failure_at_ms = (offset == 1).then_some(0);
        scheduler.admit(record(0, offset), Admission { first_failure_at_ms, ..admission("a", None) }, 0);
    }
    assert!(scheduler.next_job(Instant::now(), 0).is_none(), "a window with room: they wait");
    scheduler.pause_changes();
    let deferred = scheduler.next_job(Instant::now(), 500).expect("a full window: copied so the others move on");
    assert!(
        matches!(deferred.work, Work::Defer { reason: DeferReason::Paused, due_at_ms } if due_at_ms >= 1_000),
        "not capped at its spent budget: {:?}",
        deferred.work
    );
    assert_eq!(scheduler.route_reports()[0].paused.as_ref().map(|pause| pause.by.as_str()), Some("ops"));
    // Resumed at 1_000: the record that failed at 0 has a fresh budget, so it is called, not given a last call.
    assert!(scheduler.set_pause("a", None, 1_000));
    let mut started = Vec::new();
    while let Some(job) = scheduler.next_job(Instant::now(), 1_050) {
        started.push(job);
    }
    assert_eq!(started.len(), 3);
    assert!(started.iter().all(|job| job.work == Work::Handle));
    assert!(started.iter().all(|job| !job.budget_spent(1_050, 100, 1_000)));
}

#[test]
fn the_windows_bytes_together_pause_every_partition_until_they_are_down_to_half() {
    let processing = ProcessingConfig { max_window_bytes: 100, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0), ("t".to_owned(), 1)]);
    let big =
        |partition, offset| parsed("t", partition, offset, Timestamp::NotAvailable, Some(Bytes::from(vec![0; 60])));
    scheduler.admit(big(0, 0), admission("a", None), 0);
    assert_eq!(scheduler.pause_changes(), (vec![], vec![]), "60 of 100 bytes: room");
    scheduler.admit(big(0, 1), admission("a", None), 0);
    let (mut pause, _) = scheduler.pause_changes();
    pause.sort();
    assert_eq!(pause, vec![("t".to_owned(), 0), ("t".to_owned(), 1)], "120 bytes: every partition stops");
    assert!(scheduler.is_paused(&("t".to_owned(), 1)), "even one whose window is empty");
    assert_eq!(scheduler.windowed_bytes(), 120);
    let first = scheduler.next_job(Instant::now(), 0).expect("a job");
    let second = scheduler.next_job(Instant::now(), 0).expect("a job");
    scheduler.complete(first, Completion::Handled, Downstream::Answered, 0);
    assert_eq!(scheduler.pause_changes(), (vec![], vec![]), "60 bytes are above half the bound: still paused");
    scheduler.complete(second, Completion::Handled, Downstream::Answered, 0);
    let (_, mut resume) = scheduler.pause_changes();
    resume.sort();
    assert_eq!(resume, vec![("t".to_owned(), 0), ("t".to_owned(), 1)], "nothing held: both resume");
}

/// P14: records held in a source topic (a paused route) above half of `max_window_bytes` once kept every other
/// partition paused after the bytes first reached the bound, until the pause ended.
#[test]
fn records_held_in_a_source_topic_do_not_stall_the_other_partitions_at_the_byte_bound() {
    let processing = ProcessingConfig { max_window_bytes: 100, ..config(8, 8) };
    let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default()).with_source_topics(["s".to_owned()]);
    scheduler.assign([("s".to_owned(), 0), ("t".to_owned(), 0)]);
    let pause = RoutePauseState { since_ms: 0, by: "ops".to_owned(), reason: "maintenance".to_owned() };
    scheduler.set_pause("a", Some(pause), 0);
    let sized =
        |topic: &str, offset, n| parsed(topic, 0, offset, Timestamp::CreateTime(offset), Some(Bytes::from(vec![0; n])));
    for offset in 0..3 {
        scheduler.admit(sized("s", offset, 25), admission("a", None), 0);
    }
    assert!(scheduler.next_job(Instant::now(), 0).is_none(), "the paused route's records wait");
    assert_eq!(scheduler.pause_changes().0, vec![("s".to_owned(), 0)], "75 bytes held: its partition stops");
    for offset in 0..2 {
        scheduler.admit(sized("t", offset, 30), admission("b", None), 0);
    }
    assert_eq!(scheduler.pause_changes().0, vec![("t".to_owned(), 0)], "the other partition at its bound");
    for _ in 0..2 {
        let job = scheduler.next_job(Instant::now(), 0).expect("the other route's record");
        assert_eq!(job.record.topic(), "t");
        scheduler.complete(job, Completion::Handled, Downstream::Answered, 0);
    }
    assert_eq!(scheduler.windowed_bytes(), 75, "only the held records are left");
    assert_eq!(scheduler.pause_changes(), (vec![], vec![("t".to_owned(), 0)]), "the other partition resumes");
    assert!(!scheduler.is_paused(&("t".to_owned(), 0)));
    assert!(scheduler.is_paused(&("s".to_owned(), 0)), "the held partition is still not fetched");
}

/// A record of an event of `source`, as the gateway writes it.
fn event_record(source: &str, offset: i64) -> Box<Record> {
    let meta = hookline_common::wire::EventMeta {
        source: source.to_owned(),
        event_id: format!("e-{offset}"),
        event_type: Some("push".to_owned()),
        received_at_ms: 0,
        content_type: None,
        secret_id: "s".to_owned(),
        ordering_key: None,
    };
    let written = hookline_record::inbound::InboundRecord::new(meta).encode("t", Bytes::from_static(b"{}"));
    let fetched =
        FetchedRecord::new("t", 0, offset, Timestamp::NotAvailable, None, written.body, Some(written.headers.into()));
    Box::new(Record::parse(fetched, |_| Verdict::UnsignedAccepted))
}

/// Routes named `a1` and `a2` taking source `a`, and `b1` taking `b`.
fn named_routes() -> Vec<RouteConfig> {
    let route = |name: &str, source: &str| RouteConfig {
        name: Some(name.to_owned()),
        source: source.to_owned(),
        handler: crate::config::HandlerConfig::default(),
        ..RouteConfig::default()
    };
    vec![route("a1", "a"), route("a2", "a"), route("b1", "b")]
}

fn destinations(jobs: &[Job]) -> Vec<Option<String>> {
    jobs.iter().map(|job| job.record.event.as_ref().ok().and_then(|event| event.destination.clone())).collect()
}

#[test]
fn a_first_match_service_gives_a_record_to_its_first_route_only_addressed_to_none() {
    let mut scheduler = Scheduler::new(&config(8, 8), &named_routes(), &RetryConfig::default());
    scheduler.assign([("t".to_owned(), 0)]);
    // Even a record that names a destination (written in fan-out mode) goes to the first route, as before.
    let admitted = Admission { destination: Some("a2".to_owned()), ..admission("a", None) };
    assert!(scheduler.admit(event_record("a", 0), admitted, 0));
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    assert_eq!(jobs.len(), 1);
    assert_eq!(scheduler.routes[jobs[0].route].label, "a1");
    assert_eq!(destinations(&jobs), vec![None]);
    let job = jobs.into_iter().next().expect("one");
    assert!(scheduler.complete(job, Completion::Handled, Downstream::Answered, 0).is_some());
}

#[test]
fn a_fan_out_record_goes_to_every_destination_and_its_offset_waits_for_the_last() {
    let mut scheduler = Scheduler::new(&config(8, 8), &named_routes(), &RetryConfig::default()).with_fan_out(true);
    scheduler.assign([("t".to_owned(), 0)]);
    assert!(scheduler.admit(event_record("a", 0), admission("a", None), 0));
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    let mut named = destinations(&jobs);
    named.sort();
    assert_eq!(named, vec![Some("a1".to_owned()), Some("a2".to_owned())], "not `b1`, which does not take `a`");
    assert_ne!(jobs[0].route, jobs[1].route, "each destination is a route of its own");
    let mut jobs = jobs.into_iter();
    let (first, second) = (jobs.next().expect("1"), jobs.next().expect("2"));
    // One destination parked it in the retry topic (handled), the other is still running: not committed.
    assert_eq!(scheduler.complete(first, Completion::Handled, Downstream::Failed, 0), None);
    assert_eq!(scheduler.windowed(), 1);
    assert!(scheduler.complete(second, Completion::Handled, Downstream::Answered, 0).is_some());
    assert_eq!(scheduler.windowed(), 0);
}

#[test]
fn a_fan_out_record_for_one_destination_reaches_it_alone_and_one_no_route_takes_goes_to_the_default() {
    let mut scheduler = Scheduler::new(&config(8, 8), &named_routes(), &RetryConfig::default()).with_fan_out(true);
    scheduler.assign([("t".to_owned(), 0)]);
    let retry = Admission { destination: Some("a2".to_owned()), ..admission("a", None) };
    assert!(scheduler.admit(event_record("a", 0), retry, 0));
    assert!(scheduler.admit(event_record("c", 1), admission("c", None), 0));
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    assert_eq!(destinations(&jobs), vec![Some("a2".to_owned()), None]);
    assert_eq!(scheduler.routes[jobs[0].route].label, "a2");
    assert_eq!(scheduler.routes[jobs[1].route].label, "c", "the default handler's route, by source");
}

#[test]
fn a_fan_out_destination_whose_breaker_is_open_does_not_hold_the_others() {
    let mut processing = config(8, 1);
    processing.breaker_failures = 1;
    let mut scheduler = Scheduler::new(&processing, &named_routes(), &RetryConfig::default()).with_fan_out(true);
    scheduler.assign([("t".to_owned(), 0)]);
    scheduler.admit(event_record("a", 0), admission("a", None), 0);
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
    let (failing, healthy): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|job| scheduler.routes[job.route].label == "a1");
    let failing_route = failing[0].route;
    for job in failing {
        scheduler.complete(job, Completion::Handled, Downstream::Failed, 0);
    }
    for job in healthy {
        scheduler.complete(job, Completion::Handled, Downstream::Answered, 0);
    }
    assert!(scheduler.routes[failing_route].breaker.is_open(), "a1's breaker opened");
    // The next records: a2 starts them while a1's are deferred to the retry topic, never called.
    for offset in 1..3 {
        scheduler.admit(event_record("a", offset), admission("a", None), 0);
    }
    let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 1)).collect();
    let started: Vec<(String, bool)> =
        jobs.iter().map(|job| (scheduler.routes[job.route].label.clone(), matches!(job.work, Work::Handle))).collect();
    assert!(started.iter().any(|(label, handle)| label == "a2" && *handle), "{started:?}");
    let failing: Vec<bool> = started.iter().filter(|(label, _)| label == "a1").map(|(_, handle)| *handle).collect();
    assert_eq!(failing, vec![false, false], "a1's two records are deferred, not called: {started:?}");
}
