//! The API tokens (`tokens create|revoke|list`) and the audit trail (`audit`).

use std::io::Write;

use anyhow::bail;
use hookline_common::time::format_rfc3339_millis;
use hookline_dlq_replayer::{identity::audit::AuditQuery, ops::Replayer};

use super::{args::TokensCommand, printable, write_json};

/// `tokens ...`: the CLI acts as an admin, with the Kafka credentials and record key of its config.
pub(super) async fn tokens(
    replayer: &Replayer,
    command: TokensCommand,
    operator: fn(Option<String>) -> String,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let book = replayer.token_book().await?;
    match command {
        TokensCommand::Create { name, scope, by, json } => {
            let (issued, _) = replayer.create_token(&book, &name, &scope, &operator(by)).await?;
            if json {
                return write_json(out, &issued);
            }
            writeln!(
                out,
                "created token {} for `{}` ({}); it is shown this once:",
                issued.info.id, issued.info.name, issued.info.scope
            )?;
            writeln!(out, "{}", issued.token)?;
        }
        TokensCommand::Revoke { id_or_name, by } => {
            match replayer.revoke_token(&book, &id_or_name, &operator(by)).await? {
                Some(revoked) => writeln!(out, "revoked token {} (`{}`)", revoked.id, revoked.name)?,
                None => bail!("no token `{id_or_name}`"),
            }
        }
        TokensCommand::List { json } => {
            let tokens = book.list();
            if json {
                return write_json(out, &tokens);
            }
            writeln!(out, "{:<16} {:<24} {:<8} {:<24} {:<24} revoked", "id", "name", "scope", "created", "by")?;
            for token in &tokens {
                let revoked = token.revoked_at_ms.map_or_else(|| "-".to_owned(), format_rfc3339_millis);
                writeln!(
                    out,
                    "{:<16} {:<24} {:<8} {:<24} {:<24} {}",
                    token.id,
                    printable(&token.name),
                    token.scope,
                    format_rfc3339_millis(token.created_at_ms),
                    printable(&token.created_by),
                    revoked
                )?;
            }
        }
    }
    Ok(())
}

/// `audit`: the trail, newest first.
pub(super) async fn audit(
    replayer: &Replayer,
    query: &AuditQuery,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let trail = replayer.audit_trail(query).await?;
    if json {
        return write_json(out, &trail);
    }
    writeln!(out, "{:<24} {:<28} {:<14} detail", "when", "who", "what")?;
    for record in &trail.records {
        writeln!(
            out,
            "{:<24} {:<28} {:<14} {}",
            format_rfc3339_millis(record.at_ms),
            printable(&record.subject),
            printable(&record.action),
            printable(&record.detail.to_string())
        )?;
    }
    if trail.refused > 0 {
        writeln!(out, "({} records without a valid MAC were not shown)", trail.refused)?;
    }
    Ok(())
}
