//! Route filters: which events a service skips on purpose, and why. A `[[routes]]` entry may carry
//! `[[routes.filters]]`, each a name and conditions on the event's verified JSON body (`skip_when`, the syntax of
//! event search's `--where`, [`hookline_common::predicate`]); an event whose route (the first `[[routes]]` entry
//! that takes its source and type, as for its handler) has a filter all of whose conditions hold is skipped for
//! this service, with that filter's name as the reason. The pipeline records the skip (a filtered marker in place
//! of the claim, `hookline_consumer_filtered_total`); this module only answers "skip, and why" ([`Filters::skip`]).
//!
//! Defined results, never poison and never a panic: a body that is not JSON is never skipped (it goes on to the
//! source's checks and the handler, as it would without filters); a pointer the body lacks fails every operator but
//! `!=`, exactly as in event search, so `events --where` with a filter's conditions finds what it skips. A re-drive
//! of a dead letter and a re-processing run are an operator's explicit choice: filters never skip them.

use std::collections::HashSet;

use hookline_common::{predicate::Condition, wire::InboundEvent};

use crate::config::{self, RouteConfig, RouteMatch};

/// Longest filter name: it is a metric label value and part of every marker it writes.
const MAX_FILTER_NAME_BYTES: usize = 64;

/// Every route's filters, in route order (a route without filters is kept: it is still the first route of its
/// events, and it skips nothing).
#[derive(Debug, Default)]
pub struct Filters {
    routes: Vec<RouteFilters>,
}

#[derive(Debug)]
struct RouteFilters {
    matcher: RouteMatch,
    label: String,
    filters: Vec<Filter>,
}

#[derive(Debug)]
struct Filter {
    name: String,
    conditions: Vec<Condition>,
}

/// Why an event is skipped: its route (as metrics name it) and the filter that matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skip<'a> {
    pub route: &'a str,
    pub filter: &'a str,
}

impl Filters {
    /// Parses every route's filters; on failure, every problem, each naming its place
    /// (`routes[0].filters[1].skip_when[0]`).
    pub fn build(routes: &[RouteConfig]) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut built = Vec::new();
        for (route_index, route) in routes.iter().enumerate() {
            let mut names = HashSet::new();
            let mut filters = Vec::new();
            for (filter_index, filter) in route.filters.iter().enumerate() {
                let place = format!("routes[{route_index}].filters[{filter_index}]");
                let name = filter.name.as_str();
                if !valid_name(name) {
                    problems.push(format!(
                        "{place}.name `{name}` must be 1 to {MAX_FILTER_NAME_BYTES} letters, digits, `.`, `-` or `_`"
                    ));
                } else if !names.insert(name) {
                    problems.push(format!("{place}.name `{name}` is used twice in this route"));
                }
                if filter.skip_when.is_empty() {
                    problems
                        .push(format!("{place}.skip_when needs at least one condition (none would skip every event)"));
                }
                let mut conditions = Vec::new();
                for (condition_index, text) in filter.skip_when.iter().enumerate() {
                    match text.parse::<Condition>() {
                        Ok(condition) => conditions.push(condition),
                        Err(error) => problems.push(format!("{place}.skip_when[{condition_index}]: {error}")),
                    }
                }
                filters.push(Filter { name: name.to_owned(), conditions });
            }
            built.push(RouteFilters { matcher: route.matcher(), label: route.label(), filters });
        }
        if problems.is_empty() { Ok(Self { routes: built }) } else { Err(problems) }
    }

    /// The filter that skips `event` for this service, if one does (see the module's doc): `None` for a re-drive or
    /// a re-processing run, for an event whose route has no filter that holds, and for a body that is not JSON.
    /// The body is parsed only when its route has filters.
    pub fn skip(&self, event: &InboundEvent) -> Option<Skip<'_>> {
        if event.replay_of.is_some() || event.reprocess_id.is_some() {
            return None;
        }
        let (event_type, destination) = (event.meta.event_type.as_deref(), event.destination.as_deref());
        let route = config::chosen(&self.routes, |route| &route.matcher, &event.meta.source, event_type, destination)?;
        if route.filters.is_empty() {
            return None;
        }
        let body: serde_json::Value = serde_json::from_slice(&event.body).ok()?;
        let filter = route.filters.iter().find(|filter| filter.conditions.iter().all(|c| c.matches(&body)))?;
        Some(Skip { route: &route.label, filter: &filter.name })
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FILTER_NAME_BYTES
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hookline_common::wire::EventMeta;

    use super::*;
    use crate::config::{FilterConfig, HandlerConfig};

    fn route(source: &str, event_types: Option<&[&str]>, filters: &[(&str, &[&str])]) -> RouteConfig {
        RouteConfig {
            source: source.to_owned(),
            event_types: event_types.map(|types| types.iter().map(|t| (*t).to_owned()).collect()),
            handler: HandlerConfig::default(),
            filters: filters
                .iter()
                .map(|(name, conditions)| FilterConfig {
                    name: (*name).to_owned(),
                    skip_when: conditions.iter().map(|c| (*c).to_owned()).collect(),
                })
                .collect(),
            ..RouteConfig::default()
        }
    }

    fn event(source: &str, event_type: &str, body: &str) -> InboundEvent {
        InboundEvent {
            meta: EventMeta {
                source: source.into(),
                event_id: "evt_1".into(),
                event_type: Some(event_type.to_owned()),
                received_at_ms: 0,
                content_type: None,
                secret_id: "s".into(),
                ordering_key: None,
            },
            body: Bytes::from(body.to_owned()),
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

    fn skipped_by(filters: &Filters, event: &InboundEvent) -> Option<String> {
        filters.skip(event).map(|skip| format!("{} {}", skip.route, skip.filter))
    }

    #[test]
    fn every_operator_skips_what_it_matches_and_nothing_else() {
        let body = r#"{"livemode": false, "type": "invoice.paid", "amount": 1500, "tags": ["a"], "sender": {"login": "dependabot[bot]"}}"#;
        for (condition, skips) in [
            ("/livemode == false", true),
            ("/livemode == true", false),
            ("/livemode != true", true),
            ("/livemode != false", false),
            ("/type in [\"invoice.paid\", \"charge.refunded\"]", true),
            ("/type in [\"charge.refunded\"]", false),
            ("/tags/0 exists", true),
            ("/tags/1 exists", false),
            ("/sender/login prefix \"dependabot\"", true),
            ("/sender/login prefix \"renovate\"", false),
            ("/amount < 1501", true),
            ("/amount < 1500", false),
            ("/amount <= 1500", true),
            ("/amount <= 1499", false),
            ("/amount > 1499", true),
            ("/amount > 1500", false),
            ("/amount >= 1500", true),
            ("/amount >= 1501", false),
            ("/amount == 1500.0", true),
        ] {
            let filters = Filters::build(&[route("stripe", None, &[("f", &[condition])])]).unwrap();
            let got = skipped_by(&filters, &event("stripe", "invoice.paid", body));
            assert_eq!(got.is_some(), skips, "{condition}: {got:?}");
        }
    }

    #[test]
    fn a_missing_pointer_fails_every_operator_but_not_equal_and_a_body_that_is_not_json_is_never_skipped() {
        let body = r#"{"type": "invoice.paid"}"#;
        for condition in [
            "/livemode == false",
            "/livemode in [false]",
            "/livemode exists",
            "/livemode prefix \"x\"",
            "/livemode < 1",
            "/livemode >= 1",
        ] {
            let filters = Filters::build(&[route("stripe", None, &[("f", &[condition])])]).unwrap();
            assert_eq!(skipped_by(&filters, &event("stripe", "t", body)), None, "{condition}");
        }
        let not_equal = Filters::build(&[route("stripe", None, &[("f", &["/livemode != true"])])]).unwrap();
        assert!(not_equal.skip(&event("stripe", "t", body)).is_some(), "absent is not equal, as in event search");
        for not_json in ["livemode=false", "", "{", "\u{0}\u{ff}"] {
            assert_eq!(skipped_by(&not_equal, &event("stripe", "t", not_json)), None, "{not_json:?}");
        }
    }

    #[test]
    fn all_conditions_of_a_filter_must_hold_and_the_first_filter_that_holds_is_the_reason() {
        let filters = Filters::build(&[route(
            "github",
            None,
            &[
                ("bot_push", &["/sender/type == \"Bot\"", "/ref prefix \"refs/heads/dependabot/\""]),
                ("any_bot", &["/sender/type == \"Bot\""]),
            ],
        )])
        .unwrap();
        let both = r#"{"sender": {"type": "Bot"}, "ref": "refs/heads/dependabot/npm"}"#;
        let bot_only = r#"{"sender": {"type": "Bot"}, "ref": "refs/heads/main"}"#;
        let human = r#"{"sender": {"type": "User"}, "ref": "refs/heads/dependabot/npm"}"#;
        assert_eq!(skipped_by(&filters, &event("github", "push", both)).as_deref(), Some("github bot_push"));
        assert_eq!(skipped_by(&filters, &event("github", "push", bot_only)).as_deref(), Some("github any_bot"));
        assert_eq!(skipped_by(&filters, &event("github", "push", human)), None);
    }

    #[test]
    fn only_the_events_first_route_filters_and_never_a_re_drive_or_a_re_processing() {
        let filters = Filters::build(&[
            route("stripe", Some(&["charge.refunded"]), &[]),
            route("stripe", Some(&["invoice.paid", "charge.refunded"]), &[("test_mode", &["/livemode == false"])]),
        ])
        .unwrap();
        let test_mode = r#"{"livemode": false}"#;
        assert_eq!(
            skipped_by(&filters, &event("stripe", "invoice.paid", test_mode)).as_deref(),
            Some("stripe:charge.refunded,invoice.paid test_mode"),
            "the route as metrics and pauses name it"
        );
        assert_eq!(
            skipped_by(&filters, &event("stripe", "charge.refunded", test_mode)),
            None,
            "its first route has none"
        );
        assert_eq!(skipped_by(&filters, &event("stripe", "customer.created", test_mode)), None, "no route");
        assert_eq!(skipped_by(&filters, &event("github", "invoice.paid", test_mode)), None, "another source");
        let mut redrive = event("stripe", "invoice.paid", test_mode);
        redrive.replay_of = Some("webhooks.dlq:0:7".to_owned());
        assert_eq!(skipped_by(&filters, &redrive), None, "a re-drive is an operator's choice");
        let mut reprocess = event("stripe", "invoice.paid", test_mode);
        reprocess.reprocess_id = Some("run-1".to_owned());
        assert_eq!(skipped_by(&filters, &reprocess), None, "so is a re-processing run");
    }

    #[test]
    fn every_problem_of_every_filter_is_reported_with_its_place() {
        let problems = Filters::build(&[
            route("stripe", None, &[("test mode", &["livemode == false"]), ("ok", &[])]),
            route(
                "github",
                None,
                &[("dup", &["/a ~ 1", "/a in 1"]), ("dup", &["/a < \"x\"", "/a prefix 1", "/a exists 1", "/a~2 == 1"])],
            ),
        ])
        .unwrap_err();
        for (place, says) in [
            ("routes[0].filters[0].name `test mode`", "letters, digits"),
            ("routes[0].filters[0].skip_when[0]", "starts with `/`"),
            ("routes[0].filters[1].skip_when", "at least one condition"),
            ("routes[1].filters[0].skip_when[0]", "is not one of"),
            ("routes[1].filters[0].skip_when[1]", "JSON array"),
            ("routes[1].filters[1].name `dup`", "used twice"),
            ("routes[1].filters[1].skip_when[0]", "compares numbers"),
            ("routes[1].filters[1].skip_when[1]", "takes a string"),
            ("routes[1].filters[1].skip_when[2]", "takes no value"),
            ("routes[1].filters[1].skip_when[3]", "followed by 0"),
        ] {
            assert!(
                problems.iter().any(|problem| problem.starts_with(place) && problem.contains(says)),
                "{place} ({says}) not in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), 10, "{problems:#?}");
    }
}
