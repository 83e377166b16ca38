//! Chooses the handler for each event (per source, optionally per event type) and applies the checks that make
//! an event poison before any handler runs: an event type outside the source's allowlist, a body that is not
//! JSON for a JSON source, a body that fails the source's JSON Schema. Then a route with a transform hands its
//! handler the transformed body ([`super::transform`]); a transform that fails makes the event poison.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::Arc,
    time::Duration,
};

use hookline_common::wire::{EventMeta, InboundEvent};

use super::{
    BoxFuture, Handler, HandlerError, StartContext, StartError,
    http::HttpHandler,
    log::LogHandler,
    postgres::PostgresHandler,
    transform::{Transform, TransformError},
};
use crate::config::{self, HandlerConfig, RouteConfig, RouteMatch, SourceRulesConfig};

/// Wildcard key in `schemas`: applies to every event type without a schema of its own.
pub const ANY_EVENT_TYPE: &str = "*";

#[derive(Debug)]
pub struct Router {
    default: Box<dyn Handler>,
    routes: Vec<Route>,
    rules: HashMap<String, SourceRules>,
}

#[derive(Debug)]
struct Route {
    matcher: RouteMatch,
    handler: Box<dyn Handler>,
    transform: Option<RouteTransform>,
}

/// A route's compiled transform, and how a poison message names it.
#[derive(Debug)]
struct RouteTransform {
    transform: Arc<Transform>,
    /// `routes[0] (`github:push`)`.
    place: String,
}

impl RouteTransform {
    /// `event` with its body transformed (and said to be JSON), or the poison error that names the transform.
    async fn apply(&self, event: &InboundEvent) -> Result<InboundEvent, HandlerError> {
        let body = self.transform.apply_off_runtime(event.body.clone()).await.map_err(|error| {
            let message = format!("transform of {} failed: {error}", self.place);
            // A thread the system refused may be had later; every other failure is the body's.
            if error == TransformError::NoThread {
                HandlerError::retryable(message)
            } else {
                HandlerError::poison(message)
            }
        })?;
        let meta = EventMeta { content_type: Some("application/json".to_owned()), ..event.meta.clone() };
        Ok(InboundEvent { meta, body, ..event.clone() })
    }
}

struct SourceRules {
    json: bool,
    event_types: Option<HashSet<String>>,
    schemas: HashMap<String, jsonschema::Validator>,
}

impl std::fmt::Debug for SourceRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceRules")
            .field("json", &self.json)
            .field("event_types", &self.event_types)
            .field("schemas", &self.schemas.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a built-in handler does not build from its config.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Http(#[from] super::http::HttpConfigError),
    #[error("a `postgres` handler needs a [handler.postgres] table")]
    NoPostgresTable,
    #[error(transparent)]
    Postgres(#[from] super::postgres::PostgresError),
    #[error("unknown handler kind `{0}` (known: log, http, postgres)")]
    UnknownKind(String),
}

/// Builds a built-in handler from its config; relative paths in it are resolved from `config_dir`.
pub fn build_handler(
    config: &HandlerConfig,
    timeout: Duration,
    config_dir: &Path,
) -> Result<Box<dyn Handler>, BuildError> {
    match config.kind.as_str() {
        "log" => Ok(Box::new(LogHandler::default())),
        "http" => Ok(Box::new(HttpHandler::from_config(config, timeout, config_dir)?)),
        "postgres" => {
            let postgres = config.postgres.as_ref().ok_or(BuildError::NoPostgresTable)?;
            Ok(Box::new(PostgresHandler::from_config(postgres, config_dir)?))
        }
        other => Err(BuildError::UnknownKind(other.to_owned())),
    }
}

impl Router {
    /// Builds every handler and compiles every schema; any problem is reported, none ignored.
    pub fn new(
        default: &HandlerConfig,
        routes: &[RouteConfig],
        rules: &HashMap<String, SourceRulesConfig>,
        config_dir: &Path,
    ) -> Result<Self, Vec<String>> {
        let timeout = Duration::from_millis(default.timeout_ms);
        let mut problems = Vec::new();
        let default_handler =
            build_handler(default, timeout, config_dir).map_err(|problem| vec![format!("[handler]: {problem}")]);
        let mut built_routes = Vec::new();
        for (index, route) in routes.iter().enumerate() {
            let handler = build_handler(&route.handler, timeout, config_dir)
                .map_err(|problem| problems.push(format!("routes[{index}] (source `{}`): {problem}", route.source)))
                .ok();
            let transform = match route.transform.as_deref().map(Transform::compile) {
                None => Ok(None),
                Some(Ok(transform)) => Ok(Some(RouteTransform {
                    transform: Arc::new(transform),
                    place: format!("routes[{index}] (`{}`)", route.label()),
                })),
                Some(Err(problem)) => {
                    problems.push(format!("routes[{index}] (source `{}`): transform {problem}", route.source));
                    Err(())
                }
            };
            if let (Some(handler), Ok(transform)) = (handler, transform) {
                built_routes.push(Route { matcher: route.matcher(), handler, transform });
            }
        }
        let mut built_rules = HashMap::new();
        for (source, source_rules) in rules {
            let mut schemas = HashMap::new();
            for (event_type, path) in &source_rules.schemas {
                match load_schema(&config_dir.join(path)) {
                    Ok(validator) => {
                        schemas.insert(event_type.clone(), validator);
                    }
                    Err(problem) => problems.push(format!("sources.{source}.schemas.{event_type}: {problem}")),
                }
            }
            built_rules.insert(
                source.clone(),
                SourceRules {
                    // A schema implies JSON.
                    json: source_rules.json || !schemas.is_empty(),
                    event_types: source_rules.event_types.as_ref().map(|types| types.iter().cloned().collect()),
                    schemas,
                },
            );
        }
        match default_handler {
            Ok(default) if problems.is_empty() => Ok(Self { default, routes: built_routes, rules: built_rules }),
            Ok(_) => Err(problems),
            Err(mut first) => {
                first.append(&mut problems);
                Err(first)
            }
        }
    }

    /// Hands events no route matches to `handler` (a Rust handler: see [`crate::Loaded::build_with_work`]).
    pub fn set_default(&mut self, handler: Box<dyn Handler>) {
        self.default = handler;
    }

    /// The event's route: the first that takes it, or, for an event addressed to one destination of a fan-out
    /// service, the route of that name ([`config::chosen`]).
    fn route_for(&self, event: &InboundEvent) -> Option<&Route> {
        let (event_type, destination) = (event.meta.event_type.as_deref(), event.destination.as_deref());
        config::chosen(&self.routes, |route| &route.matcher, &event.meta.source, event_type, destination)
    }

    fn handler_for(&self, event: &InboundEvent) -> &dyn Handler {
        self.route_for(event).map_or(self.default.as_ref(), |route| route.handler.as_ref())
    }

    /// The checks that make an event poison before any handler runs.
    fn validate(&self, event: &InboundEvent) -> Result<(), HandlerError> {
        let Some(rules) = self.rules.get(&event.meta.source) else { return Ok(()) };
        let event_type = event.meta.event_type.as_deref();
        if let Some(allowed) = &rules.event_types {
            if !event_type.is_some_and(|t| allowed.contains(t)) {
                return Err(HandlerError::poison(format!(
                    "event type `{}` is not in the allowlist of source `{}`",
                    event_type.unwrap_or(""),
                    event.meta.source
                )));
            }
        }
        if !rules.json {
            return Ok(());
        }
        let body: serde_json::Value = serde_json::from_slice(&event.body)
            .map_err(|error| HandlerError::poison(format!("body is not valid JSON: {error}")))?;
        let schema = event_type.and_then(|t| rules.schemas.get(t)).or_else(|| rules.schemas.get(ANY_EVENT_TYPE));
        if let Some(schema) = schema {
            let errors: Vec<String> =
                schema.iter_errors(&body).take(3).map(|e| format!("{e} at {}", e.instance_path())).collect();
            if !errors.is_empty() {
                return Err(HandlerError::poison(format!("body fails the JSON Schema: {}", errors.join("; "))));
            }
        }
        Ok(())
    }
}

fn load_schema(path: &Path) -> Result<jsonschema::Validator, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
    jsonschema::validator_for(&schema)
        .map_err(|error| format!("{} is not a valid JSON Schema: {error}", path.display()))
}

impl Handler for Router {
    fn name(&self) -> &str {
        "router"
    }

    fn name_for(&self, event: &InboundEvent) -> &str {
        self.handler_for(event).name()
    }

    fn allowlists_type(&self, event: &InboundEvent) -> bool {
        let allowlist = self.rules.get(&event.meta.source).and_then(|rules| rules.event_types.as_ref());
        allowlist.is_some_and(|types| event.meta.event_type.as_ref().is_some_and(|t| types.contains(t)))
    }

    fn refuses_type(&self, event: &InboundEvent) -> bool {
        let allowlist = self.rules.get(&event.meta.source).and_then(|rules| rules.event_types.as_ref());
        allowlist.is_some_and(|types| !event.meta.event_type.as_ref().is_some_and(|t| types.contains(t)))
    }

    fn start<'a>(&'a self, context: &'a StartContext) -> BoxFuture<'a, Result<(), StartError>> {
        let within = |place: String| move |problem| StartError::In { place, problem: Box::new(problem) };
        Box::pin(async move {
            self.default.start(context).await.map_err(within("[handler]".to_owned()))?;
            for (index, route) in self.routes.iter().enumerate() {
                let place = format!("routes[{index}] (source `{}`)", route.matcher.source());
                route.handler.start(context).await.map_err(within(place))?;
            }
            Ok(())
        })
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.validate(event)?;
            let Some(route) = self.route_for(event) else {
                if let Some(destination) = &event.destination {
                    // A retry or re-drive of a destination since removed from the config: kept in the DLQ, where
                    // it can be replayed once the destination is back, rather than handed to another handler.
                    return Err(HandlerError::poison(format!("destination `{destination}` is not configured")));
                }
                return self.default.handle(event).await;
            };
            match &route.transform {
                None => route.handler.handle(event).await,
                Some(transform) => route.handler.handle(&transform.apply(event).await?).await,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hookline_common::wire::EventMeta;

    use super::*;

    fn event(source: &str, event_type: Option<&str>, body: &'static [u8]) -> InboundEvent {
        InboundEvent {
            meta: EventMeta {
                source: source.into(),
                event_id: "e-1".into(),
                event_type: event_type.map(str::to_owned),
                received_at_ms: 0,
                content_type: None,
                secret_id: "s".into(),
                ordering_key: None,
            },
            body: Bytes::from_static(body),
            topic: "t".into(),
            partition: 0,
            offset: 0,
            replay_of: None,
            replay_count: None,
            provider_event_id: None,
            origin: None,
            forwarded_headers: Vec::new(),
            service: None,
            reprocess_id: None,
            destination: None,
        }
    }

    fn router(rules: SourceRulesConfig, schema_dir: &Path) -> Router {
        let rules = HashMap::from([("github".to_owned(), rules)]);
        Router::new(&HandlerConfig::default(), &[], &rules, schema_dir).unwrap()
    }

    #[tokio::test]
    async fn allowlist_json_and_schema_make_events_poison_before_the_handler() {
        let dir = std::env::temp_dir().join(format!("hookline-schema-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("push.json"), r#"{"type":"object","required":["ref"]}"#).unwrap();
        let rules = SourceRulesConfig {
            json: true,
            event_types: Some(vec!["push".into(), "ping".into()]),
            schemas: HashMap::from([("push".to_owned(), "push.json".to_owned())]),
            ..SourceRulesConfig::default()
        };
        let router = router(rules, &dir);

        assert_eq!(router.handle(&event("github", Some("push"), br#"{"ref":"main"}"#)).await, Ok(()));
        assert_eq!(router.handle(&event("github", Some("ping"), br#"{}"#)).await, Ok(()));
        assert_eq!(router.handle(&event("other", None, b"not json")).await, Ok(()), "no rules for `other`");
        for (event_type, body, expected) in [
            (Some("issues"), &br#"{}"#[..], "allowlist"),
            (None, br#"{}"#, "allowlist"),
            (Some("ping"), b"{not json", "not valid JSON"),
            (Some("push"), br#"{"no_ref":1}"#, "JSON Schema"),
        ] {
            let result = router.handle(&event("github", event_type, body)).await;
            assert!(
                matches!(&result, Err(HandlerError::Poison(message)) if message.contains(expected)),
                "{event_type:?}: {result:?}"
            );
        }
    }

    #[test]
    fn bad_handlers_and_schemas_are_all_reported() {
        let routes = [RouteConfig {
            source: "github".into(),
            handler: HandlerConfig { kind: "http".into(), url: None, ..HandlerConfig::default() },
            ..RouteConfig::default()
        }];
        let rules = HashMap::from([(
            "github".to_owned(),
            SourceRulesConfig {
                schemas: HashMap::from([("*".to_owned(), "missing.json".to_owned())]),
                ..Default::default()
            },
        )]);
        let default = HandlerConfig { kind: "nope".into(), ..HandlerConfig::default() };
        let problems = Router::new(&default, &routes, &rules, Path::new("/nonexistent")).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[tokio::test]
    async fn routes_pick_handlers_by_source_and_event_type() {
        let routes = [RouteConfig {
            source: "github".into(),
            event_types: Some(vec!["push".into()]),
            handler: HandlerConfig {
                kind: "http".into(),
                url: Some("http://127.0.0.1:9/x".into()),
                ..HandlerConfig::default()
            },
            ..RouteConfig::default()
        }];
        let router = Router::new(&HandlerConfig::default(), &routes, &HashMap::new(), Path::new(".")).unwrap();
        assert_eq!(router.name_for(&event("github", Some("push"), b"{}")), "http");
        assert_eq!(router.name_for(&event("github", Some("ping"), b"{}")), "log");
        assert_eq!(router.name_for(&event("stripe", Some("push"), b"{}")), "log");
    }
}
