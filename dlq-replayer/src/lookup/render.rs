//! An answer as the lines an operator reads (the CLI's output, the console's search result):
//! `accepted at 12:00:01.204 (inbound 3@18233); billing: processed 12:00:01.230 in 18 ms; ...`.

use super::{Answer, DedupeState, RecordPosition, ServiceAnswer};
use crate::index::Entry;
use hookline_common::time::format_rfc3339_millis;

/// The trace id of a `traceparent` value (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`); `None` when it
/// is not one (or its trace id is all zeros, which W3C calls invalid).
pub fn trace_id(traceparent: &str) -> Option<String> {
    hookline_common::telemetry::traces::parse_traceparent(traceparent.as_bytes())
        .map(|context| context.trace_id().to_string())
}

/// `12:00:01.204` (UTC).
fn time_of_day(ms: i64) -> String {
    let stamp = format_rfc3339_millis(ms);
    stamp.get(11..23).map_or(stamp.clone(), str::to_owned)
}

fn position(position: &RecordPosition) -> String {
    format!("{} {}@{}", position.topic, position.partition, position.offset)
}

fn duration(ms: i64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0))).to_string()
}

/// The answer as lines: a summary line, then one line per service and per dead letter; with `with_trace`, the
/// trace id of each record read (or `no trace`).
pub fn render_text(answer: &Answer, with_trace: bool) -> Vec<String> {
    if !answer.found {
        if let Some(unread) = &answer.dedupe_unread {
            return vec![format!(
                "not known: {} {} (no dead letter, no waiting retry); {unread}",
                answer.source, answer.event_id
            )];
        }
        let services: Vec<&str> = answer.services.iter().map(|service| service.service.as_str()).collect();
        return vec![format!(
            "unknown event: {} {} (no dead letter; no dedupe key and no waiting retry in the services looked in: {})",
            answer.source,
            answer.event_id,
            if services.is_empty() { "none".to_owned() } else { services.join(", ") }
        )];
    }
    let mut summary = Vec::new();
    let mut details = Vec::new();
    match &answer.accepted {
        Some(accepted) => {
            let at = accepted.received_at_ms.map_or_else(|| "?".to_owned(), format_rfc3339_millis);
            let inbound = accepted
                .inbound
                .as_ref()
                .map_or_else(String::new, |p| format!(" (inbound {}@{})", p.partition, p.offset));
            summary.push(format!("accepted at {at}{inbound}"));
            if with_trace {
                details.push(format!("  trace: {}", accepted.trace_id.as_deref().unwrap_or("no trace")));
            }
        }
        // Dedupe outcomes name no record (docs/dedupe.md): only a retry record or a DLQ entry does.
        None => summary.push(
            "accepted: no record named (a processed event's outcome keeps no position; event search finds it by id)"
                .to_owned(),
        ),
    }
    for service in &answer.services {
        summary.push(format!("{}: {}", service.service, service_summary(service)));
        details.extend(service_details(service, &answer.event_id, with_trace));
    }
    if let Some(unread) = &answer.dedupe_unread {
        details.push(format!("  {unread}"));
    }
    for entry in &answer.unattributed_dead_letters {
        details.push(format!("  dead letter (no service) {}", dead_letter(entry)));
    }
    let mut lines = vec![format!("{} {}: {}", answer.source, answer.event_id, summary.join("; "))];
    lines.extend(details);
    lines
}

/// The service's state in a few words, most telling first: waiting in retry, dead-lettered, processed.
fn service_summary(service: &ServiceAnswer) -> String {
    if let Some(waiting) = service.retry.waiting.last() {
        let attempt = waiting.attempts.map_or_else(|| "attempt ?".to_owned(), |n| format!("attempt {n}"));
        let error = waiting.error.as_deref().unwrap_or("?");
        let due = waiting.due_at_ms.map_or_else(|| "?".to_owned(), time_of_day);
        return format!("{attempt} failed {error}, retry due {due}");
    }
    match &service.dedupe {
        DedupeState::Processed { processed_at_ms, handling_ms, .. } => {
            let at = processed_at_ms.map_or_else(|| "(time not recorded)".to_owned(), time_of_day);
            let took = handling_ms.map_or_else(String::new, |ms| format!(" in {ms} ms"));
            let replayed = service.dead_letters.last().map_or_else(String::new, |entry| {
                format!(" (after dead letter {}: {})", entry.entry.id, entry.status.as_str())
            });
            format!("processed {at}{took}{replayed}")
        }
        DedupeState::Claimed { .. } => "being processed now (claimed)".to_owned(),
        DedupeState::Filtered { filter, filtered_at_ms, .. } => {
            format!("filtered {} by `{filter}` (skipped, not processed)", time_of_day(*filtered_at_ms))
        }
        DedupeState::DeadLettered { entry_id, .. } => {
            let status = service.dead_letters.iter().find(|entry| &entry.entry.id == entry_id);
            format!(
                "dead-lettered {entry_id}{}",
                status.map_or_else(String::new, |e| format!(" ({})", e.status.as_str()))
            )
        }
        DedupeState::Absent => match service.dead_letters.last() {
            Some(entry) => format!("dead-lettered {} ({})", entry.entry.id, entry.status.as_str()),
            None => "not processed (no dedupe key)".to_owned(),
        },
        DedupeState::NotConfigured => "dedupe state not read (see below)".to_owned(),
        DedupeState::Unknown { value } => format!("dedupe key holds `{value}`"),
    }
}

fn service_details(service: &ServiceAnswer, event_id: &str, with_trace: bool) -> Vec<String> {
    let name = &service.service;
    let mut lines = Vec::new();
    match &service.dedupe {
        DedupeState::Processed { position: Some(at), expires_in_ms, .. } => {
            let until = expires_in_ms.map_or_else(String::new, |ms| format!(" for {}", duration(ms)));
            lines.push(format!("  {name}: processed record {}; later copies are duplicates{until}", position(at)));
        }
        DedupeState::Processed { position: None, processed_at_ms, expires_in_ms, .. } => {
            if processed_at_ms.is_none() {
                lines.push(format!("  {name}: processed (plain done marker of an earlier consumer: no details)"));
            }
            let until = expires_in_ms.map_or_else(String::new, |ms| format!(" for up to {}", duration(ms)));
            lines.push(format!("  {name}: later copies are duplicates{until}"));
        }
        DedupeState::Filtered { filter, position: at, expires_in_ms, .. } => {
            let until = expires_in_ms.map_or_else(String::new, |ms| format!(" for {}", duration(ms)));
            let record = at.as_ref().map_or_else(|| "the event".to_owned(), |at| format!("record {}", position(at)));
            lines.push(format!(
                "  {name}: {record} skipped by its route's filter `{filter}`; later copies are duplicates{until}"
            ));
            lines.push(format!(
                "  {name}: to run it: hookline-replayer reprocess --service {name} --event-id {event_id}"
            ));
        }
        _ => {}
    }
    for waiting in &service.retry.waiting {
        let first = waiting.first_failure_at_ms.map_or_else(|| "?".to_owned(), format_rfc3339_millis);
        lines.push(format!("  {name}: waiting in retry {} (first failure {first})", position(&waiting.position)));
        if with_trace {
            lines.push(format!("    trace: {}", waiting.trace_id.as_deref().unwrap_or("no trace")));
        }
    }
    if service.retry.records_not_scanned > 0 {
        lines.push(format!(
            "  {name}: retry topic {} searched in part: {} records read, {} not (lookup.retry_scan_max_records)",
            service.retry.topic, service.retry.records_scanned, service.retry.records_not_scanned
        ));
    }
    for entry in &service.dead_letters {
        lines.push(format!("  {name}: dead letter {}", dead_letter(entry)));
    }
    lines
}

fn dead_letter(entry: &Entry) -> String {
    let e = &entry.entry;
    let mut text = format!(
        "{} {} after {} attempts: {}",
        e.id,
        e.error_class.as_deref().unwrap_or("?"),
        e.attempts.map_or_else(|| "?".to_owned(), |n| n.to_string()),
        e.error.as_deref().unwrap_or("?"),
    );
    text.push_str(&format!("; status {}", entry.status.as_str()));
    if let Some(last) = &entry.last_status {
        text.push_str(&format!(" at {} by {}", format_rfc3339_millis(last.at_ms), last.by));
        if let Some(note) = &last.note {
            text.push_str(&format!(" ({note})"));
        }
    }
    if entry.replays > 0 {
        text.push_str(&format!("; replayed {} time(s)", entry.replays));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_gives_its_trace_id() {
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            // W3C: lowercase hex only.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_of_day_are_utc_with_milliseconds() {
        assert_eq!(time_of_day(1_767_000_001_230), "09:20:01.230");
    }
}
