//! What a failed PostgreSQL call means for the event that caused it, decided by its SQLSTATE alone, never by the
//! message text (which changes with the server's version and `lc_messages`). One function, [`classify`], and one
//! table that states every decision ([`tests`]), so a reviewer reads the policy in one place.

/// The fate of an event whose database work failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A retry may succeed: the connection was lost, the server is shutting down, restarting or read-only (a
    /// failover), a serialization failure or deadlock, a lock or statement timeout, resources exhausted.
    Retryable,
    /// The schema or the grants changed under a running consumer (an undefined table or column, a permission
    /// denied, a database or role gone). Retryable, never poison: every event would fail alike, so dead-lettering
    /// them would empty the stream into the DLQ; instead the route's breaker stops the burn and the alert fires,
    /// and the events wait for the schema to be put right.
    SchemaChanged,
    /// A prepared statement no longer matches the schema (`0A000`, "cached plan must not change result type", after
    /// DDL; `26000`, the statement is gone): prepare it again, once. A second failure is [`Self::SchemaChanged`].
    Reprepare,
    /// This event's data can never be stored: a data exception (22), an integrity constraint (23, on a user's
    /// table), a user's trigger or function refusing (P0), a cardinality or check-option violation. Dead-lettered
    /// at once, re-drivable once the data or the rules change.
    Poison,
}

/// Classifies an error by its SQLSTATE; `None` is an error without one (the connection closed or failed, an I/O
/// error, a timeout waiting for the server): retryable.
pub fn classify(sqlstate: Option<&str>) -> Disposition {
    let Some(code) = sqlstate else { return Disposition::Retryable };
    match code {
        // Stale prepared statements: re-prepared once.
        "0A000" | "26000" => return Disposition::Reprepare,
        // Class 40 is retryable, except an integrity violation reported at commit (a deferred constraint): the
        // same data fails the same way on every attempt.
        "40002" => return Disposition::Poison,
        // WITH CHECK OPTION: the row the event writes is outside the view it writes through.
        "44000" => return Disposition::Poison,
        _ => {}
    }
    match code.get(..2).unwrap_or(code) {
        // Connection exception; transaction rollback (40001 serialization, 40P01 deadlock, 40003 completion
        // unknown); insufficient resources (53: out of connections, disk full, memory); object not in prerequisite
        // state (55P03 lock not available, 55006 object in use); operator intervention (57014 statement timeout or
        // cancel, 57P01-57P05 shutdown, crash, cannot connect now, idle session timeout); system error (58: I/O);
        // invalid transaction state (25006 read-only transaction: the server became a standby; 25P02 a failed
        // transaction); snapshot too old (72); foreign data wrapper (HV); configuration file (F0); internal (XX).
        "08" | "40" | "53" | "55" | "57" | "58" | "25" | "72" | "HV" | "F0" | "XX" => Disposition::Retryable,
        // Data exception (22: invalid text, out of range, division by zero...), integrity constraint (23),
        // cardinality (21: a subquery returned more than one row), PL/pgSQL (P0: RAISE, NO_DATA_FOUND,
        // TOO_MANY_ROWS, ASSERT), routine exceptions (2F, 38, 39), triggered action and data change (09, 27),
        // case not found (20), program limit exceeded (54: a value too large for an index row).
        "22" | "23" | "21" | "P0" | "2F" | "38" | "39" | "09" | "27" | "20" | "54" => Disposition::Poison,
        // Syntax error or access rule violation (42: undefined table, column or function, insufficient privilege),
        // invalid authorization (28), catalog or schema gone (3D, 3F), grantor or role (0L, 0P), dependent
        // privileges (2B).
        "42" | "28" | "3D" | "3F" | "0L" | "0P" | "2B" => Disposition::SchemaChanged,
        // Anything else (a class added by a later server): a retry costs little and ends in the DLQ, re-drivable,
        // if it never succeeds; poison would dead-letter a stream on a guess.
        _ => Disposition::Retryable,
    }
}

/// [`classify`] of a `tokio_postgres` error: its SQLSTATE when the server sent one; otherwise (the connection closed
/// or failed, an I/O error) retryable.
pub fn classify_error(error: &tokio_postgres::Error) -> Disposition {
    classify(error.code().map(tokio_postgres::error::SqlState::code))
}

#[cfg(test)]
mod tests {
    use super::{Disposition::*, *};

    /// Every decision the handler relies on, with the server's name for the code.
    const TABLE: &[(Option<&str>, Disposition, &str)] = &[
        (None, Retryable, "no SQLSTATE: connection closed, I/O error, timeout"),
        (Some("08000"), Retryable, "connection_exception"),
        (Some("08006"), Retryable, "connection_failure"),
        (Some("40001"), Retryable, "serialization_failure"),
        (Some("40P01"), Retryable, "deadlock_detected"),
        (Some("40003"), Retryable, "statement_completion_unknown"),
        (Some("40002"), Poison, "transaction_integrity_constraint_violation (deferred constraint at commit)"),
        (Some("53000"), Retryable, "insufficient_resources"),
        (Some("53100"), Retryable, "disk_full"),
        (Some("53200"), Retryable, "out_of_memory"),
        (Some("53300"), Retryable, "too_many_connections"),
        (Some("55P03"), Retryable, "lock_not_available (lock_timeout)"),
        (Some("55006"), Retryable, "object_in_use"),
        (Some("57014"), Retryable, "query_canceled (statement_timeout)"),
        (Some("57P01"), Retryable, "admin_shutdown"),
        (Some("57P02"), Retryable, "crash_shutdown"),
        (Some("57P03"), Retryable, "cannot_connect_now (starting up, in recovery)"),
        (Some("57P05"), Retryable, "idle_session_timeout"),
        (Some("58030"), Retryable, "io_error"),
        (Some("25006"), Retryable, "read_only_sql_transaction (a failover: the server is now a standby)"),
        (Some("25P02"), Retryable, "in_failed_sql_transaction"),
        (Some("72000"), Retryable, "snapshot_too_old"),
        (Some("XX000"), Retryable, "internal_error"),
        (Some("22P02"), Poison, "invalid_text_representation"),
        (Some("22003"), Poison, "numeric_value_out_of_range"),
        (Some("22001"), Poison, "string_data_right_truncation"),
        (Some("22012"), Poison, "division_by_zero"),
        (Some("23505"), Poison, "unique_violation"),
        (Some("23503"), Poison, "foreign_key_violation"),
        (Some("23502"), Poison, "not_null_violation"),
        (Some("23514"), Poison, "check_violation"),
        (Some("21000"), Poison, "cardinality_violation"),
        (Some("P0001"), Poison, "raise_exception (a user's trigger refusing)"),
        (Some("P0004"), Poison, "assert_failure"),
        (Some("44000"), Poison, "with_check_option_violation"),
        (Some("54000"), Poison, "program_limit_exceeded"),
        (Some("42P01"), SchemaChanged, "undefined_table"),
        (Some("42703"), SchemaChanged, "undefined_column"),
        (Some("42883"), SchemaChanged, "undefined_function"),
        (Some("42501"), SchemaChanged, "insufficient_privilege"),
        (Some("42601"), SchemaChanged, "syntax_error"),
        (Some("28000"), SchemaChanged, "invalid_authorization_specification"),
        (Some("28P01"), SchemaChanged, "invalid_password"),
        (Some("3D000"), SchemaChanged, "invalid_catalog_name (the database is gone)"),
        (Some("3F000"), SchemaChanged, "invalid_schema_name"),
        (Some("0A000"), Reprepare, "feature_not_supported (cached plan must not change result type)"),
        (Some("26000"), Reprepare, "invalid_sql_statement_name (the prepared statement is gone)"),
        (Some("ZZ999"), Retryable, "a class this table does not know"),
    ];

    #[test]
    fn every_sqlstate_decision_in_one_table() {
        let wrong: Vec<String> = TABLE
            .iter()
            .filter(|(code, expected, _)| classify(*code) != *expected)
            .map(|(code, expected, name)| format!("{code:?} ({name}): {:?}, expected {expected:?}", classify(*code)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
