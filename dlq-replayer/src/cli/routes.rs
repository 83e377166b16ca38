//! The routes' pauses: `pause`, `resume` and `paused`.

use std::io::Write;

use hookline_common::time::format_rfc3339_millis;
use hookline_dlq_replayer::ops::{PauseRequest, Replayer};

use super::{printable, write_json};

/// `pause`: pauses one route of a consumer service.
pub(super) async fn pause(replayer: &Replayer, request: &PauseRequest, out: &mut impl Write) -> anyhow::Result<()> {
    let pause = replayer.pause(request).await?;
    writeln!(out, "paused {} {} (by {}: {})", pause.service, pause.route, pause.by, pause.reason)?;
    Ok(())
}

/// `resume`: resumes a paused route.
pub(super) async fn resume(replayer: &Replayer, request: &PauseRequest, out: &mut impl Write) -> anyhow::Result<()> {
    let pause = replayer.resume(request).await?;
    writeln!(out, "resumed {} {} (by {}: {})", pause.service, pause.route, pause.by, pause.reason)?;
    Ok(())
}

/// `paused`: the routes paused now.
pub(super) async fn paused(replayer: &Replayer, json: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let pauses = replayer.pauses().await?;
    if json {
        return write_json(out, &pauses);
    }
    if pauses.is_empty() {
        writeln!(out, "no route is paused")?;
        return Ok(());
    }
    writeln!(out, "{:<20} {:<32} {:<22} {:<12} reason", "service", "route", "since", "by")?;
    for pause in &pauses {
        writeln!(
            out,
            "{:<20} {:<32} {:<22} {:<12} {}",
            pause.service,
            pause.route,
            format_rfc3339_millis(pause.at_ms),
            pause.by,
            printable(&pause.reason)
        )?;
    }
    Ok(())
}
