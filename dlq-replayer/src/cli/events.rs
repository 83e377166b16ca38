//! The events of the inbound topic: `events` (search), `reprocess` and `lookup`.

use std::io::Write;

use hookline_common::time::format_rfc3339_millis;
use hookline_dlq_replayer::{
    events::{self, SearchRequest},
    lookup::{Lookup, render_text},
    ops::{Replayer, ReprocessReport, ReprocessRequest},
};

use super::{printable, write_json};

/// `events --reprocess`: the service the matches are handed to, whether to apply, and who asks.
pub(super) struct ReprocessMatches {
    pub(super) service: String,
    pub(super) apply: bool,
    pub(super) by: String,
}

/// `events`: the matches and the search's summary; with `reprocess`, the matches of the inbound topic handed to
/// `reprocess`.
pub(super) async fn search(
    replayer: &Replayer,
    request: &SearchRequest,
    reprocess: Option<ReprocessMatches>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let report =
        replayer.search_events(request, |progress| eprintln!("{}", events::render::progress_line(progress))).await?;
    if json {
        write_json(out, &report)?;
    } else {
        for found in &report.matches {
            writeln!(out, "{}", printable(&events::render::match_line(found)))?;
        }
        for line in events::render::summary_lines(&report) {
            writeln!(out, "{}", printable(&line))?;
        }
    }
    if let Some(ReprocessMatches { service, apply, by }) = reprocess {
        let request = events::reprocess_request(&report, request, service, apply, by);
        if request.event_ids.is_empty() {
            writeln!(out, "nothing to re-process: no match in the inbound topic")?;
        } else {
            let report = replayer.reprocess(&request).await?;
            print_reprocess(out, &report, json)?;
        }
    }
    Ok(())
}

/// `reprocess`: re-drives processed events to one service (a dry run unless the request applies).
pub(super) async fn reprocess(
    replayer: &Replayer,
    request: &ReprocessRequest,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let report = replayer.reprocess(request).await?;
    print_reprocess(out, &report, json)
}

/// `lookup`: where the event is, per service. `false` when hookline knows nothing of it.
pub(super) async fn lookup(
    replayer: Replayer,
    source: &str,
    event_id: &str,
    json: bool,
    trace: bool,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    let answer = Lookup::new(replayer).lookup(source, event_id).await?;
    if json {
        write_json(out, &answer)?;
    } else {
        for line in render_text(&answer, trace) {
            writeln!(out, "{}", printable(&line))?;
        }
    }
    Ok(answer.found)
}

fn print_reprocess(out: &mut impl Write, report: &ReprocessReport, json: bool) -> anyhow::Result<()> {
    if json {
        return write_json(out, report);
    }
    let n = report.records.len();
    match &report.run_id {
        Some(run_id) => {
            writeln!(out, "re-processing run {run_id}: {n} records re-driven to service {}", report.service)?
        }
        None if report.applied => writeln!(out, "nothing to re-process for service {}", report.service)?,
        None => writeln!(out, "would re-process {n} records for service {} (dry run: add --apply)", report.service)?,
    }
    let dash = || "-".to_owned();
    for record in &report.records {
        writeln!(
            out,
            "  {}  source={}  event_id={}  received={}",
            record.position,
            printable(record.source.as_deref().unwrap_or("-")),
            printable(record.event_id.as_deref().unwrap_or("-")),
            record.received_at_ms.map_or_else(dash, format_rfc3339_millis),
        )?;
    }
    Ok(())
}
