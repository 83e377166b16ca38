//! Loading a config: read it, check it, and build what it describes, once. A config is valid exactly when its
//! build succeeds, so the binary runs what [`Loaded::build`] returns and nothing builds a handler twice.

use std::{path::Path, sync::Arc};

use hookline_common::config::{ConfigError, Problems};

use crate::{
    alert::AlertTarget,
    config::ConsumerConfig,
    filter::Filters,
    handler::{
        Handler,
        postgres::{PostgresHandler, checks, work::TransactionalHandler},
        router::Router,
    },
};

/// A config and everything built from it: the handler (the router over every route) and the alert target.
#[derive(Debug)]
pub struct Loaded {
    pub config: ConsumerConfig,
    /// What each event is handed to: the [`Router`] built from `[handler]`, `[[routes]]` and `[sources]`. Tests
    /// may put another handler here before running.
    pub handler: Arc<dyn Handler>,
    /// The routes' filters ([`Filters`]): which events this service skips, and why. They apply whatever the
    /// handler is.
    pub filters: Arc<Filters>,
    pub alerts: Option<AlertTarget>,
}

/// The `[handler.postgres]` tables' problems (their handlers are built by the router only when these pass).
fn postgres_problems(config: &ConsumerConfig, problems: &mut Problems) {
    let handlers = std::iter::once(("[handler]".to_owned(), &config.handler)).chain(
        config.routes.iter().enumerate().map(|(index, route)| (format!("routes[{index}].handler"), &route.handler)),
    );
    for (place, handler) in handlers {
        match (&handler.postgres, handler.kind.as_str()) {
            (Some(postgres), "postgres") => {
                let found = checks::problems(postgres, &checks::Limits::of(config), false);
                for problem in found {
                    problems.push(format!("{place}.postgres: {problem}"));
                }
            }
            (Some(_), kind) => problems.push(format!("{place}: a `{kind}` handler takes no [postgres] table")),
            (None, _) => {}
        }
    }
}

/// What [`build_parts`] builds: the router, the filters and the alert client, each when it built.
type Parts = (Option<Router>, Option<Filters>, Option<Option<AlertTarget>>);

/// Checks `config` and builds its router, filters and alert client, adding every problem to `problems`.
fn build_parts(config: &ConsumerConfig, problems: &mut Problems) -> Parts {
    config.check(problems);
    hookline_common::redis_security::check(&config.redis, problems);
    postgres_problems(config, problems);
    let router = Router::new(&config.handler, &config.routes, &config.sources, &config.config_dir)
        .map_err(|found| found.into_iter().for_each(|problem| problems.push(problem)))
        .ok();
    let filters = Filters::build(&config.routes)
        .map_err(|found| found.into_iter().for_each(|problem| problems.push(problem)))
        .ok();
    let alerts = AlertTarget::build(&config.alert, &config.config_dir)
        .map_err(|found| found.into_iter().for_each(|problem| problems.push(problem)))
        .ok();
    (router, filters, alerts)
}

impl Loaded {
    /// Reads the file (if any) with environment overrides, then [`Self::build`]s it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::build(ConsumerConfig::read(path)?)
    }

    /// The config as read, with the settings that need nothing built checked: no handler, schema or client is
    /// built. What `--print-config` prints, so its service name is resolved ([`ConsumerConfig::resolved`]).
    pub fn read_checked(path: Option<&Path>) -> Result<ConsumerConfig, ConfigError> {
        let config = ConsumerConfig::read(path)?;
        let mut problems = Problems::default();
        config.check(&mut problems);
        problems.into_result()?;
        Ok(config.resolved())
    }

    /// Checks `config` and builds its handlers, schemas and alert client; on failure returns every problem at once.
    pub fn build(config: ConsumerConfig) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        let (router, filters, alerts) = build_parts(&config, &mut problems);
        problems.into_result()?;
        let router = router.expect("a build without problems has its router");
        let filters = Arc::new(filters.expect("a build without problems has its filters"));
        Ok(Self { config, handler: Arc::new(router), filters, alerts: alerts.flatten() })
    }

    /// [`Self::build`] for a consumer binary of your own whose `[handler]` runs Rust code in each event's
    /// transaction: `[handler]` is `kind = "postgres"` with a `[handler.postgres]` table that gives the database and
    /// pool (no `statements`, no `inbox`), and `work` is what runs after the event's dedupe row is inserted. Routes
    /// and source rules apply as configured. `examples/orders-consumer` is such a binary.
    pub fn build_with_work(config: ConsumerConfig, work: Arc<dyn TransactionalHandler>) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        let postgres = match (config.handler.kind.as_str(), &config.handler.postgres) {
            ("postgres", Some(postgres)) => {
                let found = checks::problems(postgres, &checks::Limits::of(&config), true);
                let valid = found.is_empty();
                for problem in found {
                    problems.push(format!("[handler].postgres: {problem}"));
                }
                valid.then(|| postgres.clone())
            }
            _ => {
                problems
                    .push("[handler]: a Rust transactional handler needs kind = \"postgres\" and [handler.postgres]");
                None
            }
        };
        // Everything else as configured, with a placeholder default handler that `work` then replaces.
        let mut rest = config.clone();
        rest.handler.kind = "log".to_owned();
        rest.handler.postgres = None;
        let (router, filters, alerts) = build_parts(&rest, &mut problems);
        let handler = postgres.and_then(|postgres| {
            PostgresHandler::with_work(&postgres, &config.config_dir, work)
                .map_err(|problem| problems.push(format!("[handler].postgres: {problem}")))
                .ok()
        });
        problems.into_result()?;
        let mut router = router.expect("a build without problems has its router");
        router.set_default(Box::new(handler.expect("a build without problems has its handler")));
        let filters = Arc::new(filters.expect("a build without problems has its filters"));
        Ok(Self { config, handler: Arc::new(router), filters, alerts: alerts.flatten() })
    }

    /// This build, handing every event to `handler` instead of the configured routes.
    pub fn with_handler(self, handler: Arc<dyn Handler>) -> Self {
        Self { handler, ..self }
    }
}
