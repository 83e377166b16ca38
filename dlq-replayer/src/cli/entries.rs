//! The dead-letter entries: `list`, `stats`, `show`, `replay` and `discard`.

use std::io::Write;

use anyhow::Context;
use hookline_common::time::format_rfc3339_millis;
use hookline_dlq_replayer::{
    filter::Filter,
    index::Entry,
    ops::{DiscardRequest, ReplayRequest, Replayer, Report},
};

use super::{printable, write_json};

/// `list`: a page of entries, as a table or one JSON object per line; the next page's cursor on stderr.
pub(super) async fn list(
    replayer: &Replayer,
    filter: &Filter,
    cursor: Option<&str>,
    limit: Option<usize>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let page = replayer.page(filter, cursor, limit.unwrap_or(usize::MAX)).await?;
    if json {
        for entry in &page.entries {
            writeln!(out, "{}", serde_json::to_string(entry)?)?;
        }
    } else {
        print_table(out, &page.entries, page.total_matching)?;
    }
    if let Some(next) = &page.next_cursor {
        eprintln!("more: --cursor {next}");
    }
    Ok(())
}

/// `stats`: counts by source, service, error class and status.
pub(super) async fn stats(
    replayer: &Replayer,
    filter: &Filter,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let stats = replayer.stats(filter).await?;
    if json {
        return write_json(out, &stats);
    }
    writeln!(out, "{} entries", stats.total)?;
    for (title, counts) in [
        ("by source", &stats.by_source),
        ("by service", &stats.by_service),
        ("by error class", &stats.by_error_class),
        ("by status", &stats.by_status),
    ] {
        writeln!(out, "{title}:")?;
        for (name, count) in counts {
            writeln!(out, "  {name:<24} {count}")?;
        }
    }
    Ok(())
}

/// `show`: everything about one entry: headers, attempts, error, timestamps and the raw body.
pub(super) async fn show(replayer: &Replayer, id: &str, json: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let detail = replayer.show(id).await?.with_context(|| format!("no entry `{id}`"))?;
    if json {
        return write_json(out, &detail);
    }
    let entry = &detail.entry;
    writeln!(out, "entry      {}", entry.entry.id)?;
    writeln!(out, "service    {}", entry.entry.service.as_deref().unwrap_or("- (every service)"))?;
    writeln!(out, "status     {}{}", entry.status.as_str(), if entry.flagged { " (flagged)" } else { "" })?;
    writeln!(out, "replays    {}   failed again: {}", entry.replays, entry.failed_again)?;
    writeln!(out, "record mac {}", detail.authenticity)?;
    if let Some(last) = &entry.last_status {
        writeln!(out, "last       {:?} at {} by {}", last.status, format_rfc3339_millis(last.at_ms), last.by)?;
    }
    writeln!(out, "headers")?;
    for (key, value) in &detail.headers {
        writeln!(out, "  {key}: {}", printable(value))?;
    }
    match (&detail.body, &detail.body_base64) {
        (Some(text), _) => writeln!(out, "body ({} bytes, text)\n{}", entry.entry.body_bytes, printable(text))?,
        (None, Some(b64)) => writeln!(out, "body ({} bytes, binary, base64)\n{b64}", entry.entry.body_bytes)?,
        (None, None) => writeln!(out, "body (empty)")?,
    }
    Ok(())
}

/// `replay`: re-drives entries to the inbound topic.
pub(super) async fn replay(
    replayer: &Replayer,
    request: &ReplayRequest,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let report = replayer.replay(request).await?;
    print_report(out, &report, if request.dry_run { "would replay" } else { "replayed" }, json)
}

/// `discard`: records entries as discarded.
pub(super) async fn discard(
    replayer: &Replayer,
    request: &DiscardRequest,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let report = replayer.discard(request).await?;
    print_report(out, &report, if request.dry_run { "would discard" } else { "discarded" }, json)
}

fn print_table(out: &mut impl Write, entries: &[Entry], total_matching: usize) -> anyhow::Result<()> {
    writeln!(out, "{} dead-letter entries ({} shown)", total_matching, entries.len())?;
    let dash = || "-".to_owned();
    for entry in entries {
        let e = &entry.entry;
        writeln!(
            out,
            "{}  {}{}  source={}  service={}  event_id={}  type={}  class={}  attempts={}  failed={}  error={}",
            e.id,
            entry.status.as_str(),
            if entry.flagged { "(flagged)" } else { "" },
            e.source.clone().unwrap_or_else(dash),
            e.service.clone().unwrap_or_else(dash),
            e.event_id.clone().unwrap_or_else(dash),
            e.event_type.clone().unwrap_or_else(dash),
            e.error_class.clone().unwrap_or_else(dash),
            e.attempts.map_or_else(dash, |n| n.to_string()),
            e.last_failure_at_ms.map_or_else(dash, format_rfc3339_millis),
            printable(e.error.as_deref().unwrap_or("-")),
        )?;
    }
    Ok(())
}

fn print_report(out: &mut impl Write, report: &Report, verb: &str, json: bool) -> anyhow::Result<()> {
    if json {
        return write_json(out, report);
    }
    writeln!(out, "{verb} {} entries", report.done.len())?;
    for id in &report.done {
        writeln!(out, "  {id}")?;
    }
    if !report.skipped.is_empty() {
        writeln!(out, "skipped {}", report.skipped.len())?;
        for skipped in &report.skipped {
            writeln!(out, "  {}: {}", skipped.id, skipped.reason)?;
        }
    }
    Ok(())
}
