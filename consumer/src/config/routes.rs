//! The `[[routes]]` of a service and how they share its events: first match, or fan-out to named destinations
//! (`service.routing`), and the one rule by which the handler, the scheduler and the filters choose an event's
//! route ([`chosen`]).

use hookline_common::config::Problems;
use serde::{Deserialize, Serialize};

use super::{ConsumerConfig, HandlerConfig, RetryConfig};

/// Longest route name: a metric label value, a header value and part of its destination's dedupe hashes.
const MAX_ROUTE_NAME_BYTES: usize = 64;

/// How a service's routes share its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// The first route that takes an event gets it.
    #[default]
    FirstMatch,
    /// Every route that takes an event gets it, each route a destination named by its `name`.
    FanOut,
}

/// `Default` is for building one in code (tests): `source` and `handler` have no default in a file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name (letters, digits, `.`, `-`, `_`; unique in the service): required with
    /// `service.routing = "fan_out"`, where it is the destination's identity in its dedupe keys, metrics, pauses,
    /// retry records and dead letters (and must not change while it has any). Optional in first-match mode, where
    /// it only replaces the route's label in metrics and pauses.
    #[serde(default)]
    pub name: Option<String>,
    pub source: String,
    /// Only these event types; absent: every type of the source.
    pub event_types: Option<Vec<String>>,
    pub handler: HandlerConfig,
    /// This destination's own retry budget (default: the service's `[retry]`): `retry.max_attempts` and
    /// `retry.max_total_ms`, counted per destination. Only in fan-out mode, where a failure is a destination's own.
    #[serde(default)]
    pub retry: Option<RouteRetryConfig>,
    /// Records of this route in the handler stage at once (default `processing.route_max_in_flight`): what its
    /// downstream can take, and all a slow or failing downstream can hold of the consumer's capacity.
    pub max_in_flight: Option<usize>,
    /// Handler calls started per second, at most (default: unlimited).
    pub rate_per_s: Option<f64>,
    /// Consecutive retryable failures that open this route's circuit breaker (default
    /// `processing.breaker_failures`; 0: no breaker).
    pub breaker_failures: Option<u32>,
    /// How long an open breaker waits before letting one probe call through (default
    /// `processing.breaker_cooldown_ms`).
    pub breaker_cooldown_ms: Option<u64>,
    /// Events this route skips: the first filter all of whose conditions hold skips the event for this service,
    /// recorded as filtered with the filter's name (never handled, never poison; `reprocess` still runs it). See
    /// [`crate::filter`] and docs/configuration/consumer.md, "Filters".
    #[serde(default)]
    pub filters: Vec<FilterConfig>,
    /// A jq program applied to the event's JSON body before the route's handler: its one output, as compact JSON,
    /// is the body the handler gets (what an `http` handler forwards and signs). Compiled when the config loads; a
    /// program that does not compile is a config problem. An event whose body is not JSON, or on which the program
    /// fails, outputs nothing or more than one value, is poison. See [`crate::handler::transform`] and
    /// docs/configuration/consumer.md, "Transforms".
    #[serde(default)]
    pub transform: Option<String>,
}

/// A destination's own retry budget (`[routes.retry]`): what it leaves out is the service's `[retry]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteRetryConfig {
    /// Handler attempts before a retryable failure is dead-lettered.
    pub max_attempts: Option<u32>,
    /// Dead-letter once this much time has passed since the first failure, whatever the attempt count.
    pub max_total_ms: Option<u64>,
}

impl RouteRetryConfig {
    /// The service's `retry` with this budget's settings over it.
    pub fn over(&self, retry: &RetryConfig) -> RetryConfig {
        RetryConfig {
            max_attempts: self.max_attempts.unwrap_or(retry.max_attempts),
            max_total_ms: self.max_total_ms.unwrap_or(retry.max_total_ms),
            ..retry.clone()
        }
    }
}

impl RouteConfig {
    /// The route's name in metrics and pauses: its `name` when it has one, else its source, and its event types
    /// (sorted) when it has some: `github:issues,push`.
    pub fn label(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match &self.event_types {
            Some(types) => {
                let mut types: Vec<&str> = types.iter().map(String::as_str).collect();
                types.sort_unstable();
                types.dedup();
                format!("{}:{}", self.source, types.join(","))
            }
            None => self.source.clone(),
        }
    }

    /// Which events this route takes: the rule its handler, its scheduling and its filters all choose by.
    pub fn matcher(&self) -> RouteMatch {
        RouteMatch {
            name: self.name.clone(),
            source: self.source.clone(),
            event_types: self.event_types.as_ref().map(|types| types.iter().cloned().collect()),
        }
    }
}

/// Which events a `[[routes]]` entry takes: those of its source and, when it names event types, of one of them (an
/// event without a type is then not taken). An event's route is the first entry that takes it, or, for an event
/// addressed to one destination of a fan-out service, the entry of that name ([`Self::chosen`]): for its handler
/// ([`crate::handler::router`]), its scheduling ([`crate::schedule`]) and its filters ([`crate::filter`]) alike:
/// written once here so the three never disagree.
#[derive(Debug, Clone)]
pub struct RouteMatch {
    name: Option<String>,
    source: String,
    event_types: Option<std::collections::HashSet<String>>,
}

/// The route of an event among `routes` (each with its [`RouteMatch`]): with a `destination` (an event of a
/// fan-out service, which its consumer addressed to one destination), the route of that name, or none when no route
/// has it any more; without one (every event of a first-match service), the first route that takes its source and
/// type, as before fan-out existed.
pub fn chosen<'a, T>(
    routes: &'a [T],
    matcher: impl Fn(&T) -> &RouteMatch,
    source: &str,
    event_type: Option<&str>,
    destination: Option<&str>,
) -> Option<&'a T> {
    chosen_index(routes, matcher, source, event_type, destination).map(|index| &routes[index])
}

/// [`chosen`], as the route's position.
pub fn chosen_index<T>(
    routes: &[T],
    matcher: impl Fn(&T) -> &RouteMatch,
    source: &str,
    event_type: Option<&str>,
    destination: Option<&str>,
) -> Option<usize> {
    match destination {
        Some(destination) => routes.iter().position(|route| matcher(route).name.as_deref() == Some(destination)),
        None => routes.iter().position(|route| matcher(route).takes(source, event_type)),
    }
}

impl RouteMatch {
    /// The route's name, when it has one (every route of a fan-out service does).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The source this route takes.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the route takes an event of `source` and `event_type`.
    pub fn takes(&self, source: &str, event_type: Option<&str>) -> bool {
        self.source == source
            && self.event_types.as_ref().is_none_or(|types| event_type.is_some_and(|t| types.contains(t)))
    }
}

/// One filter of a route (`[[routes.filters]]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    /// The reason recorded for what it skips (the dedupe marker, `hookline_consumer_filtered_total{filter}`,
    /// `lookup`): letters, digits, `.`, `-`, `_`, unique within its route.
    pub name: String,
    /// Conditions on the event's verified JSON body (`'/livemode == false'`, the syntax of event search's
    /// `--where`), all of which must hold for the event to be skipped.
    pub skip_when: Vec<String>,
}

impl ConsumerConfig {
    /// Each destination's retry budget, by name, for the destinations with one of their own.
    pub fn destination_retries(&self) -> std::collections::HashMap<String, RetryConfig> {
        self.routes
            .iter()
            .filter_map(|route| Some((route.name.clone()?, route.retry.as_ref()?.over(&self.retry))))
            .collect()
    }

    /// Route names: valid and unique wherever given, and given on every route of a fan-out service.
    pub(super) fn check_route_names(&self, problems: &mut Problems) {
        let fan_out = self.service.routing == Routing::FanOut;
        let mut seen = std::collections::HashSet::new();
        for (index, route) in self.routes.iter().enumerate() {
            if let Some(retry) = &route.retry {
                problems.check(
                    fan_out,
                    format!("routes[{index}].retry: a route's own retry budget needs service.routing = \"fan_out\""),
                );
                problems.check(
                    retry.max_attempts != Some(0),
                    format!("routes[{index}].retry.max_attempts must be at least 1"),
                );
            }
            let Some(name) = &route.name else {
                problems.check(
                    !fan_out,
                    format!(
                        "routes[{index}] (source `{}`) needs a `name`: service.routing is `fan_out`, where a route's name is its destination's identity",
                        route.source
                    ),
                );
                continue;
            };
            problems.check(
                !name.is_empty()
                    && name.len() <= MAX_ROUTE_NAME_BYTES
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
                format!(
                    "routes[{index}].name `{name}` must be 1 to {MAX_ROUTE_NAME_BYTES} letters, digits, `.`, `-` or `_`"
                ),
            );
            problems.check(
                seen.insert(name.as_str()),
                format!("routes[{index}].name `{name}` is used by an earlier route"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use hookline_common::config;

    use super::*;

    /// The problems of `text` about its routes (the rest, such as a missing record key, is another test's).
    fn problems_of(text: &str) -> Vec<String> {
        let config: ConsumerConfig = config::parse_str(text, "test").expect("parses");
        let mut problems = Problems::default();
        config.check(&mut problems);
        problems.into_lines().into_iter().filter(|problem| problem.starts_with("routes[")).collect()
    }

    const ROUTES: &str = "[[routes]]\nsource = \"stripe\"\nhandler = { kind = \"log\" }\n[[routes]]\nsource = \"stripe\"\nhandler = { kind = \"log\" }\n";

    #[test]
    fn a_config_without_routing_is_first_match_and_needs_no_route_names() {
        let config: ConsumerConfig = config::parse_str(ROUTES, "test").unwrap();
        assert_eq!(config.service.routing, Routing::FirstMatch);
        assert!(!config.fans_out());
        assert_eq!(problems_of(ROUTES), Vec::<String>::new());
    }

    #[test]
    fn a_fan_out_service_needs_every_route_named_validly_and_once() {
        let unnamed = format!("[service]\nrouting = \"fan_out\"\n{ROUTES}");
        let problems = problems_of(&unnamed);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|problem| problem.contains("needs a `name`")), "{problems:?}");

        let named = |first: &str, second: &str| {
            format!(
                "[service]\nrouting = \"fan_out\"\n[[routes]]\nname = \"{first}\"\nsource = \"stripe\"\nhandler = {{ kind = \"log\" }}\n[[routes]]\nname = \"{second}\"\nsource = \"stripe\"\nhandler = {{ kind = \"log\" }}\n"
            )
        };
        assert_eq!(problems_of(&named("ledger", "audit.v2")), Vec::<String>::new());
        let twice = problems_of(&named("ledger", "ledger"));
        assert!(twice.len() == 1 && twice[0].contains("used by an earlier route"), "{twice:?}");
        let bad = problems_of(&named("ledger", "a:b"));
        assert!(bad.len() == 1 && bad[0].contains("routes[1].name `a:b`"), "{bad:?}");
    }

    #[test]
    fn a_destinations_own_retry_budget_is_over_the_services_and_only_in_fan_out_mode() {
        let text = |routing: &str| {
            format!(
                "[service]\nrouting = \"{routing}\"\n[retry]\nmax_attempts = 7\n[[routes]]\nname = \"flaky\"\nsource = \"stripe\"\nhandler = {{ kind = \"log\" }}\nretry = {{ max_attempts = 2 }}\n[[routes]]\nname = \"steady\"\nsource = \"stripe\"\nhandler = {{ kind = \"log\" }}\n"
            )
        };
        assert_eq!(problems_of(&text("fan_out")), Vec::<String>::new());
        let config: ConsumerConfig = config::parse_str(&text("fan_out"), "test").unwrap();
        let retries = config.destination_retries();
        assert_eq!(retries.len(), 1, "only `flaky` has its own");
        assert_eq!(retries["flaky"].max_attempts, 2);
        assert_eq!(retries["flaky"].max_total_ms, config.retry.max_total_ms, "what it leaves out is the service's");
        let first_match = problems_of(&text("first_match"));
        assert!(first_match.len() == 1 && first_match[0].contains("needs service.routing"), "{first_match:?}");
    }

    #[test]
    fn an_event_for_a_destination_takes_the_route_of_that_name_and_otherwise_the_first_that_takes_it() {
        let config: ConsumerConfig = config::parse_str(
            "[[routes]]\nname = \"one\"\nsource = \"stripe\"\nhandler = { kind = \"log\" }\n[[routes]]\nname = \"two\"\nsource = \"stripe\"\nhandler = { kind = \"log\" }\n",
            "test",
        )
        .unwrap();
        let matchers: Vec<RouteMatch> = config.routes.iter().map(RouteConfig::matcher).collect();
        let chosen = |destination| chosen_index(&matchers, |m| m, "stripe", None, destination);
        assert_eq!(chosen(None), Some(0), "first match");
        assert_eq!(chosen(Some("two")), Some(1));
        assert_eq!(chosen(Some("gone")), None);
        assert_eq!(config.routes[1].label(), "two", "a name is the route's label");
    }
}
