//! The reconciler: finds the events a provider sent that never reached hookline (a DNS outage, an expired
//! certificate, a misrouted ingress, a secret rotated at the provider first, a provider that gave up retrying)
//! and gets each one in exactly once.
//!
//! Per configured source it reads the provider's event log for a window ([`provider`]), compares it with the
//! index of accepted events that its indexer builds from the inbound topic ([`index`]), and for each event
//! hookline never accepted asks the provider to redeliver it (GitHub, Paddle: it then arrives signed through the
//! gateway) or fetches it from the API over TLS and produces it with `hookline-origin: reconciled` (Stripe).
//! Every action goes through a ledger in Redis first ([`store`]), so no run asks twice; a source's first
//! scheduled run, and every CLI run without `--apply`, is a dry run.
//!
//! Per source with a `webhook_url` it also checks that the provider still has the gateway's URL registered,
//! enabled and subscribed to the expected event types ([`registration`]): it reports drift and changes nothing.
//!
//! [`run`] is the service (indexer, schedules, admin listener); the CLI calls [`Reconciler::run`] and
//! [`registration::check_all`] directly.

pub mod api;
pub mod config;
pub mod error;
pub mod index;
pub mod load;
pub mod metrics;
pub mod provider;
pub mod reconcile;
pub mod registration;
pub mod store;

use std::{sync::Arc, time::Duration};

use hookline_common::{http::Readiness, wire};
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use config::{Provider, ReconcilerConfig, SourceConfig};
pub use error::ReconcileError;
pub use load::Loaded;
pub use reconcile::{Mode, Outcome, Reconciler, Report, RunRequest};

/// Runs the indexer and, every `interval_s`, a reconciliation of each source over `[now - lookback, now -
/// settle)`, until `shutdown`. A source's first run is a dry run; later ones act when the source says `apply`.
/// Returns an error (and cancels everything) if the indexer fails: the orchestrator restarts a clean process.
pub async fn run(loaded: Loaded, admin: TcpListener, shutdown: CancellationToken) -> Result<(), ReconcileError> {
    let config = loaded.config.clone();
    // A broker that refuses our TLS or SASL settings is a configuration error, not an outage to wait out.
    hookline_common::kafka_security::check_broker_accepts(
        &config.kafka,
        hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
    )
    .await?;
    let registry = Registry::new();
    let metrics = Arc::new(
        metrics::Metrics::register(&registry)
            .map_err(|error| ReconcileError::Setup { source_name: "-".to_owned(), error: error.to_string() })?,
    );
    let readiness = Arc::new(Readiness::default());
    let redis_ready = readiness.check("redis");
    let tracker = TaskTracker::new();
    tracker.spawn(hookline_common::http::serve_admin(admin, registry, readiness.clone(), shutdown.child_token()));

    let reconciler = Arc::new(Reconciler::connect(loaded, metrics.clone()).await?);
    redis_ready.store(true, std::sync::atomic::Ordering::Relaxed);
    let indexer = tokio::spawn(index::run_indexer(
        config.kafka.clone(),
        config.index_group_id.clone(),
        config.sources.clone(),
        config.index_complete_since_ms().unwrap_or(None),
        reconciler.store().clone(),
        metrics.clone(),
        shutdown.child_token(),
    ));
    let schedule = tracker.spawn(schedule(reconciler.clone(), redis_ready, shutdown.child_token()));
    tracker.spawn(registration::schedule(
        config.sources.clone(),
        reconciler.providers(),
        metrics.clone(),
        Duration::from_secs(config.registration_interval_s),
        shutdown.child_token(),
    ));
    tracker.close();
    let result = match indexer.await {
        Ok(result) => result,
        Err(error) => {
            Err(ReconcileError::Provider { source_name: "-".to_owned(), error: format!("indexer task: {error}") })
        }
    };
    if let Err(error) = &result {
        tracing::error!(error = %error, "indexer failed; stopping");
    }
    shutdown.cancel();
    let _ = schedule.await;
    tracker.wait().await;
    result
}

async fn schedule(
    reconciler: Arc<Reconciler>,
    redis_ready: Arc<std::sync::atomic::AtomicBool>,
    shutdown: CancellationToken,
) {
    let interval = Duration::from_secs(reconciler.config().interval_s);
    loop {
        for source in reconciler.config().sources.clone() {
            if shutdown.is_cancelled() {
                return;
            }
            let result = scheduled_run(&reconciler, &source).await;
            if let Err(error) = &result {
                tracing::error!(source = %source.name, error = %error, "reconciliation failed");
            }
            redis_ready.store(!matches!(result, Err(ReconcileError::Redis(_))), std::sync::atomic::Ordering::Relaxed);
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One scheduled run of `source` over `[now - lookback, now - settle)`: a dry run if the source never had one
/// (or does not `apply`), otherwise acting.
pub async fn scheduled_run(reconciler: &Reconciler, source: &SourceConfig) -> Result<Report, ReconcileError> {
    let store = reconciler.store();
    let first_done = store.first_run_done(&source.name).await?;
    let now = wire::now_ms();
    let to_ms = now - i64::try_from(source.settle_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    let from_ms = now - i64::try_from(source.lookback().as_millis()).unwrap_or(i64::MAX);
    let mode = if first_done && source.apply { Mode::Apply } else { Mode::DryRun };
    let request = RunRequest { source: source.name.clone(), from_ms, to_ms, mode, again_after_request: false };
    let report = reconciler.run(&request).await?;
    if !first_done {
        tracing::info!(
            source = %source.name,
            would_recover = report.count(Outcome::WouldRecover),
            "first run was a dry run; later runs act"
        );
        store.mark_first_run(&source.name, now).await?;
    }
    Ok(report)
}
