//! Is the webhook still registered at the provider? A URL deleted or disabled at Stripe, GitHub or Paddle, or an
//! event type unticked there, stops a source's flow without a sound; reconciliation would find the missed events
//! only after the fact. This check asks each provider for its webhook registrations ([`ProviderClient::endpoints`],
//! reads only) and judges them against the source's `webhook_url` and expected event types
//! ([`SourceConfig::expected_event_types`]). It reports drift and changes nothing at the provider: there is no
//! write call on this path.
//!
//! `hookline-reconciler registrations` runs it once; `serve` runs it every `registration_interval_s` and sets
//! `hookline_reconciler_registration_ok{source,check}` (the alert's signal).

use std::{collections::HashMap, fmt::Write as _, sync::Arc, time::Duration};

use hookline_common::wire;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{
    config::SourceConfig,
    error::ReconcileError,
    metrics::Metrics,
    provider::{Endpoint, ProviderClient},
};

/// What is checked, in order; each check is judged only when the one before it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// An endpoint at `webhook_url` exists.
    Registered,
    /// One of those endpoints is enabled (the provider sends to it).
    Enabled,
    /// The enabled endpoints together are subscribed to every expected event type.
    EventTypes,
    /// The endpoint at `webhook_url` is the one whose log reconciliation reads (GitHub's `hook`, Paddle's
    /// `notification_setting_id`); otherwise missed events of this URL are never found.
    ReconciledEndpoint,
}

impl Check {
    pub const ALL: [Check; 4] = [Check::Registered, Check::Enabled, Check::EventTypes, Check::ReconciledEndpoint];

    /// The `check` label of `hookline_reconciler_registration_ok`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Registered => "registered",
            Self::Enabled => "enabled",
            Self::EventTypes => "event_types",
            Self::ReconciledEndpoint => "reconciled_endpoint",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Drift,
    /// Not judged: an earlier check failed, nothing is expected, or it does not apply to the provider.
    NotJudged,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub check: Check,
    pub verdict: Verdict,
    pub detail: String,
}

/// A source's registration as the provider reports it, and what was judged.
#[derive(Debug, Clone, Serialize)]
pub struct SourceRegistration {
    pub source: String,
    pub provider: &'static str,
    pub webhook_url: String,
    /// `ok`, `drift`, or `error` (the provider could not be asked; see `error`).
    pub status: Status,
    pub checks: Vec<CheckResult>,
    /// The endpoints registered at `webhook_url` (others are not shown: they belong to other receivers).
    pub endpoints: Vec<Endpoint>,
    /// Expected event types no enabled endpoint at the URL is subscribed to.
    pub missing_event_types: Vec<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Drift,
    Error,
}

/// Every checked source, and the sources left out because they have no `webhook_url`.
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationReport {
    pub sources: Vec<SourceRegistration>,
    pub not_checked: Vec<String>,
}

impl RegistrationReport {
    pub fn drift(&self) -> bool {
        self.sources.iter().any(|source| source.status == Status::Drift)
    }

    pub fn errors(&self) -> bool {
        self.sources.iter().any(|source| source.status == Status::Error)
    }

    /// The CLI's exit status: 0 every source as expected, 2 drift found (whatever else happened), 1 a source
    /// could not be checked.
    pub fn exit_status(&self) -> u8 {
        if self.drift() {
            2
        } else if self.errors() {
            1
        } else {
            0
        }
    }

    /// The report for a terminal: one line per source, one per check.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for source in &self.sources {
            let status = match source.status {
                Status::Ok => "ok",
                Status::Drift => "DRIFT",
                Status::Error => "ERROR",
            };
            let _ = writeln!(out, "{} ({}) {}: {status}", source.source, source.provider, source.webhook_url);
            if let Some(error) = &source.error {
                let _ = writeln!(out, "  could not check: {error}");
            }
            for check in &source.checks {
                let verdict = match check.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Drift => "DRIFT",
                    Verdict::NotJudged => "-",
                };
                let _ = writeln!(out, "  {:<20} {verdict:<6} {}", check.check.name(), check.detail);
            }
        }
        for name in &self.not_checked {
            let _ = writeln!(out, "{name}: not checked (no webhook_url)");
        }
        out.push_str("nothing was changed at any provider\n");
        out
    }
}

/// The URL as providers compare it, near enough: scheme and host case-insensitive, one trailing `/` ignored.
fn normalized(url: &str) -> String {
    let url = url.trim();
    let url = url.strip_suffix('/').unwrap_or(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
            format!("{}://{}{path}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase())
        }
        None => url.to_owned(),
    }
}

/// `id (state), ...` of `endpoints`.
fn described<'a>(endpoints: impl IntoIterator<Item = &'a Endpoint>) -> String {
    endpoints.into_iter().map(|endpoint| format!("{} ({})", endpoint.id, endpoint.state)).collect::<Vec<_>>().join(", ")
}

/// Judges `endpoints` (everything the provider listed) against `source`'s expectations. Pure: the tests call it.
pub fn judge(
    source: &SourceConfig,
    webhook_url: &str,
    endpoints: &[Endpoint],
    reconciled_endpoint: Option<&str>,
) -> SourceRegistration {
    let wanted = normalized(webhook_url);
    let at_url: Vec<Endpoint> =
        endpoints.iter().filter(|endpoint| normalized(&endpoint.url) == wanted).cloned().collect();
    let enabled: Vec<&Endpoint> = at_url.iter().filter(|endpoint| endpoint.enabled).collect();
    let not_judged =
        |check, detail: &str| CheckResult { check, verdict: Verdict::NotJudged, detail: detail.to_owned() };
    let mut checks = Vec::with_capacity(Check::ALL.len());
    let mut missing_event_types = Vec::new();

    if at_url.is_empty() {
        checks.push(CheckResult {
            check: Check::Registered,
            verdict: Verdict::Drift,
            detail: format!("no endpoint at this URL among the {} registered", endpoints.len()),
        });
        checks.push(not_judged(Check::Enabled, "not registered"));
        checks.push(not_judged(Check::EventTypes, "not registered"));
        checks.push(not_judged(Check::ReconciledEndpoint, "not registered"));
    } else {
        checks.push(CheckResult { check: Check::Registered, verdict: Verdict::Ok, detail: described(&at_url) });
        if enabled.is_empty() {
            checks.push(CheckResult {
                check: Check::Enabled,
                verdict: Verdict::Drift,
                detail: format!("no endpoint at this URL is enabled: {}", described(&at_url)),
            });
            checks.push(not_judged(Check::EventTypes, "no enabled endpoint"));
        } else {
            checks.push(CheckResult {
                check: Check::Enabled,
                verdict: Verdict::Ok,
                detail: described(enabled.iter().copied()),
            });
            let expected = source.expected_event_types();
            let subscribed: Vec<&str> =
                enabled.iter().flat_map(|endpoint| endpoint.event_types.iter().map(String::as_str)).collect();
            if expected.is_empty() {
                checks.push(not_judged(Check::EventTypes, "no event types expected (webhook_event_types)"));
            } else if subscribed.contains(&"*") {
                checks.push(CheckResult {
                    check: Check::EventTypes,
                    verdict: Verdict::Ok,
                    detail: "subscribed to every type (*)".to_owned(),
                });
            } else {
                missing_event_types =
                    expected.iter().filter(|event_type| !subscribed.contains(&event_type.as_str())).cloned().collect();
                checks.push(if missing_event_types.is_empty() {
                    CheckResult {
                        check: Check::EventTypes,
                        verdict: Verdict::Ok,
                        detail: format!("subscribed to all {} expected", expected.len()),
                    }
                } else {
                    CheckResult {
                        check: Check::EventTypes,
                        verdict: Verdict::Drift,
                        detail: format!("not subscribed: {}", missing_event_types.join(", ")),
                    }
                });
            }
        }
        checks.push(match reconciled_endpoint {
            None => not_judged(Check::ReconciledEndpoint, "reconciliation reads the account's events"),
            Some(id) if at_url.iter().any(|endpoint| endpoint.id == id) => CheckResult {
                check: Check::ReconciledEndpoint,
                verdict: Verdict::Ok,
                detail: format!("reconciliation reads {id}"),
            },
            Some(id) => CheckResult {
                check: Check::ReconciledEndpoint,
                verdict: Verdict::Drift,
                detail: format!("reconciliation reads {id}, which is not registered at this URL"),
            },
        });
    }
    let status = if checks.iter().any(|check| check.verdict == Verdict::Drift) { Status::Drift } else { Status::Ok };
    SourceRegistration {
        source: source.name.clone(),
        provider: source.provider.name(),
        webhook_url: webhook_url.to_owned(),
        status,
        checks,
        endpoints: at_url,
        missing_event_types,
        error: None,
    }
}

/// Checks every source with a `webhook_url` (or only `only`), one provider call at a time, and records each
/// verdict in the metrics. A source the provider could not be asked about is `error`, not drift.
pub async fn check_all(
    sources: &[SourceConfig],
    providers: &HashMap<String, ProviderClient>,
    only: Option<&str>,
    metrics: &Metrics,
) -> Result<RegistrationReport, ReconcileError> {
    let mut report = RegistrationReport { sources: Vec::new(), not_checked: Vec::new() };
    if let Some(name) = only {
        let source = sources
            .iter()
            .find(|source| source.name == name)
            .ok_or_else(|| ReconcileError::UnknownSource(name.to_owned()))?;
        if source.webhook_url.is_none() {
            return Err(ReconcileError::NoWebhookUrl(name.to_owned()));
        }
    }
    for source in sources.iter().filter(|source| only.is_none_or(|name| source.name == name)) {
        let Some(webhook_url) = &source.webhook_url else {
            report.not_checked.push(source.name.clone());
            continue;
        };
        let provider = providers.get(&source.name).ok_or_else(|| ReconcileError::UnknownSource(source.name.clone()))?;
        let checked = match provider.endpoints().await {
            Ok(endpoints) => judge(source, webhook_url, &endpoints, provider.reconciled_endpoint()),
            Err(error) => SourceRegistration {
                source: source.name.clone(),
                provider: source.provider.name(),
                webhook_url: webhook_url.clone(),
                status: Status::Error,
                checks: Vec::new(),
                endpoints: Vec::new(),
                missing_event_types: Vec::new(),
                error: Some(error.to_string()),
            },
        };
        record(metrics, &checked, source);
        report.sources.push(checked);
    }
    Ok(report)
}

/// `registration_ok` per judged check (1 ok, 0 drift; a check not judged has no series, so one deleted URL is
/// one alert, not four), the checks' outcome, and the time of the last completed check.
fn record(metrics: &Metrics, checked: &SourceRegistration, source: &SourceConfig) {
    let outcome = match checked.status {
        Status::Ok => "ok",
        Status::Drift => "drift",
        Status::Error => "error",
    };
    metrics.registration_checks.with_label_values(&[&source.name, outcome]).inc();
    if checked.status == Status::Error {
        tracing::warn!(source = %source.name, error = checked.error.as_deref().unwrap_or(""), "registration check failed");
        return;
    }
    for result in &checked.checks {
        let labels = [source.name.as_str(), result.check.name()];
        match result.verdict {
            Verdict::Ok => metrics.registration_ok.with_label_values(&labels).set(1),
            Verdict::Drift => {
                tracing::warn!(source = %source.name, check = result.check.name(), detail = %result.detail, "webhook registration drift");
                metrics.registration_ok.with_label_values(&labels).set(0);
            }
            Verdict::NotJudged => {
                let _ = metrics.registration_ok.remove_label_values(&labels);
            }
        }
    }
    metrics.registration_last_check.with_label_values(&[&source.name]).set(wire::now_ms() as f64 / 1000.0);
}

/// `serve`'s periodic check: every `interval`, until `shutdown`. Does nothing when no source has a `webhook_url`.
pub async fn schedule(
    sources: Vec<SourceConfig>,
    providers: Arc<HashMap<String, ProviderClient>>,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    if sources.iter().all(|source| source.webhook_url.is_none()) {
        return;
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            result = check_all(&sources, &providers, None, &metrics) => {
                if let Err(error) = result {
                    tracing::error!(error = %error, "registration check failed");
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use hookline_common::config::SecretRef;

    use super::*;
    use crate::config::Provider;

    const URL: &str = "https://hooks.example.com/webhooks/github";

    fn endpoint(id: &str, url: &str, enabled: bool, event_types: &[&str]) -> Endpoint {
        Endpoint {
            id: id.to_owned(),
            url: url.to_owned(),
            enabled,
            state: if enabled { "active" } else { "inactive" }.to_owned(),
            event_types: event_types.iter().map(|name| (*name).to_owned()).collect(),
        }
    }

    fn source(expected: &[&str]) -> SourceConfig {
        SourceConfig {
            webhook_url: Some(URL.to_owned()),
            webhook_event_types: expected.iter().map(|name| (*name).to_owned()).collect(),
            ..SourceConfig::new("github", Provider::Github, SecretRef::from_env("t", "T"))
        }
    }

    fn verdicts(registration: &SourceRegistration) -> Vec<(Check, Verdict)> {
        registration.checks.iter().map(|check| (check.check, check.verdict)).collect()
    }

    #[test]
    fn a_registered_enabled_subscribed_endpoint_is_ok() {
        let endpoints = [
            endpoint("9", "https://elsewhere.example.com/hook", true, &["*"]),
            endpoint("1", "HTTPS://Hooks.Example.com/webhooks/github/", true, &["push", "pull_request"]),
        ];
        let judged = judge(&source(&["push"]), URL, &endpoints, Some("1"));
        assert_eq!(judged.status, Status::Ok);
        assert_eq!(
            verdicts(&judged),
            vec![
                (Check::Registered, Verdict::Ok),
                (Check::Enabled, Verdict::Ok),
                (Check::EventTypes, Verdict::Ok),
                (Check::ReconciledEndpoint, Verdict::Ok),
            ]
        );
        assert_eq!(judged.endpoints.len(), 1, "other receivers' endpoints are not shown");
    }

    #[test]
    fn a_missing_url_is_one_drift_and_the_rest_not_judged() {
        let endpoints = [endpoint("9", "https://hooks.example.com/webhooks/other", true, &["*"])];
        let judged = judge(&source(&["push"]), URL, &endpoints, Some("1"));
        assert_eq!(judged.status, Status::Drift);
        assert_eq!(
            verdicts(&judged),
            vec![
                (Check::Registered, Verdict::Drift),
                (Check::Enabled, Verdict::NotJudged),
                (Check::EventTypes, Verdict::NotJudged),
                (Check::ReconciledEndpoint, Verdict::NotJudged),
            ]
        );
        assert!(judged.checks[0].detail.contains("among the 1 registered"), "{:?}", judged.checks[0]);
    }

    #[test]
    fn a_disabled_endpoint_and_an_unsubscribed_type_are_drift() {
        let disabled = judge(&source(&["push"]), URL, &[endpoint("1", URL, false, &["push"])], Some("1"));
        assert_eq!(disabled.status, Status::Drift);
        assert_eq!(disabled.checks[1].verdict, Verdict::Drift);
        assert_eq!(disabled.checks[2].verdict, Verdict::NotJudged);

        let unsubscribed = judge(&source(&["push", "issues"]), URL, &[endpoint("1", URL, true, &["push"])], None);
        assert_eq!(unsubscribed.status, Status::Drift);
        assert_eq!(unsubscribed.missing_event_types, vec!["issues".to_owned()]);
        assert_eq!(unsubscribed.checks[2].detail, "not subscribed: issues");

        // A disabled endpoint's subscriptions do not count; `*` covers every type.
        let split = [endpoint("1", URL, false, &["issues"]), endpoint("2", URL, true, &["push"])];
        assert_eq!(judge(&source(&["push", "issues"]), URL, &split, Some("2")).missing_event_types, ["issues"]);
        assert_eq!(judge(&source(&["issues"]), URL, &[endpoint("1", URL, true, &["*"])], Some("1")).status, Status::Ok);
    }

    #[test]
    fn the_url_registered_at_another_endpoint_than_reconciliation_reads_is_drift() {
        let judged = judge(&source(&[]), URL, &[endpoint("42", URL, true, &["push"])], Some("1"));
        assert_eq!(
            verdicts(&judged),
            vec![
                (Check::Registered, Verdict::Ok),
                (Check::Enabled, Verdict::Ok),
                (Check::EventTypes, Verdict::NotJudged),
                (Check::ReconciledEndpoint, Verdict::Drift),
            ]
        );
    }

    #[test]
    fn the_exit_status_puts_drift_before_errors_and_the_text_names_each_check() {
        let drift = judge(&source(&["push"]), URL, &[], Some("1"));
        let mut error = drift.clone();
        error.status = Status::Error;
        error.checks.clear();
        error.error = Some("source `github`: the provider refused our credential (HTTP 401)".to_owned());
        let ok = judge(&source(&[]), URL, &[endpoint("1", URL, true, &[])], Some("1"));
        let report = |sources: Vec<SourceRegistration>| RegistrationReport { sources, not_checked: vec!["x".into()] };
        assert_eq!(report(vec![ok.clone()]).exit_status(), 0);
        assert_eq!(report(vec![ok.clone(), error.clone()]).exit_status(), 1);
        assert_eq!(report(vec![error.clone(), drift.clone()]).exit_status(), 2);
        let text = report(vec![drift, error]).to_text();
        assert!(
            text.contains(&format!("github (github) {URL}: DRIFT\n  registered           DRIFT  no endpoint")),
            "{text}"
        );
        assert!(text.contains("  enabled              -      not registered\n"), "{text}");
        assert!(text.contains(": ERROR\n  could not check: source `github`: the provider refused"), "{text}");
        assert!(text.contains("x: not checked (no webhook_url)\n"), "{text}");
        assert!(text.ends_with("nothing was changed at any provider\n"), "{text}");
    }
}
