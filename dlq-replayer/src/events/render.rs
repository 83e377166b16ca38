//! A search's answer as the lines an operator reads (the CLI's output, the console's page), and its progress line.

use super::{Match, Progress, SearchReport};
use crate::lookup::DedupeState;
use hookline_common::time::format_rfc3339_millis;

/// `read 1200000 of 3600000 records (310000/s), 12 matches, 0 refused`: what the CLI prints to stderr each second.
pub fn progress_line(progress: &Progress) -> String {
    let per_s = (progress.records_read * 1000).checked_div(progress.elapsed_ms).unwrap_or(0);
    format!(
        "events: read {} of {} records ({per_s}/s), {} candidates, {} refused",
        progress.records_read,
        progress.records_to_read,
        progress.candidates,
        progress.refused.values().sum::<u64>()
    )
}

/// A service's state in a word or two.
pub fn state(dedupe: &DedupeState) -> String {
    match dedupe {
        DedupeState::NotConfigured => "not read".to_owned(),
        DedupeState::Absent => "not processed".to_owned(),
        DedupeState::Claimed { .. } => "being processed".to_owned(),
        DedupeState::Processed { processed_at_ms: Some(at), .. } => format!("processed {}", format_rfc3339_millis(*at)),
        DedupeState::Processed { .. } => "processed".to_owned(),
        DedupeState::Filtered { filter, filtered_at_ms, .. } => {
            format!("filtered by {filter} {}", format_rfc3339_millis(*filtered_at_ms))
        }
        DedupeState::DeadLettered { entry_id, .. } => format!("dead-lettered {entry_id}"),
        DedupeState::Unknown { value } => format!("dedupe key holds `{value}`"),
    }
}

/// One match: `webhooks.inbound 3@18233 accepted 2026-12-06T12:00:01.204Z invoice.paid evt_1: billing processed ...`.
pub fn match_line(found: &Match) -> String {
    let services: Vec<String> =
        found.services.iter().map(|service| format!("{} {}", service.service, state(&service.dedupe))).collect();
    format!(
        "{} {}@{} accepted {} {} {}{}",
        found.position.topic,
        found.position.partition,
        found.position.offset,
        found.accepted_at_ms.map_or_else(|| "?".to_owned(), format_rfc3339_millis),
        found.event_type.as_deref().unwrap_or("-"),
        found.event_id.as_deref().unwrap_or("-"),
        if services.is_empty() { String::new() } else { format!(": {}", services.join(", ")) }
    )
}

/// The summary after the matches: counts, refusals, why the scan stopped and what it left unread.
pub fn summary_lines(report: &SearchReport) -> Vec<String> {
    let p = &report.progress;
    let mut lines = vec![format!(
        "{} matches; {} of {} records read in {} ms from {}; {} of source {}{} in the time range, {} copies skipped",
        report.matches.len(),
        p.records_read,
        p.records_to_read,
        p.elapsed_ms,
        report.topics.join(", "),
        p.candidates,
        report.source,
        report.event_type.as_deref().map_or_else(String::new, |t| format!(" type {t}")),
        p.copies_skipped,
    )];
    let refused: u64 = p.refused.values().sum();
    if refused > 0 {
        let reasons: Vec<String> = p.refused.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
        lines.push(format!("refused (MAC check failed, not shown): {refused} ({})", reasons.join(", ")));
    }
    if p.not_json > 0 {
        lines.push(format!("{} candidates have a body that is not JSON (no condition matches them)", p.not_json));
    }
    if let Some(stopped) = &report.stopped_by {
        let unread: Vec<String> = report
            .unread
            .iter()
            .map(|u| format!("{} {}@{}..{}", u.topic, u.partition, u.from_offset, u.to_offset))
            .collect();
        lines.push(format!(
            "stopped by {stopped}: {} records left unread ({})",
            report.records_unread(),
            if unread.is_empty() { "none".to_owned() } else { unread.join(", ") }
        ));
    }
    if let Some(unread) = &report.dedupe_unread {
        lines.push(unread.clone());
    }
    lines
}
