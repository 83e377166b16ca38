//! Where a source's event type comes from, and the one choice a source must make about it: whether a header the
//! provider's signature does not cover may give the type (`type_from_header`).
//!
//! The type picks the route (the consumer's handler, its allowlist, its schema). GitHub, Shopify, WooCommerce and a
//! few more sign the body but send the type only in a header; whoever holds one genuine delivery (a provider's
//! delivery log, a DLQ reader, a proxy) can re-send it with another type, and the first copy to arrive picks the
//! route of the event. A source whose type could come from such a header is therefore refused until its config
//! says which it wants: `type_from_header = true` (route on the header, knowing that) or `false` (the type only
//! from signed bytes; without one the event has no type, and is routed by its source alone). Refusing, rather than
//! defaulting either way, is what keeps an upgrade from silently changing where events go: defaulting to `false`
//! would stop routing every GitHub event by type, defaulting to `true` would keep the weaker behaviour unasked.

use hookline_signature::{HeaderType, IdentityRule, Scheme};

use super::Source;
use crate::config::SourceConfig;

/// The source's identity rule: the scheme's, with the config's overrides and its `type_from_header` choice. A
/// source whose type could come from an unsigned header and that has not chosen is a problem naming the key.
pub(super) fn identity_of(config: &SourceConfig, scheme: &dyn Scheme, problems: &mut Vec<String>) -> IdentityRule {
    let mut identity = scheme.identity();
    if let Some(event_id) = &config.event_id {
        identity.event_id = vec![event_id.clone()];
    }
    if let Some(event_type) = &config.event_type {
        identity.event_type = vec![event_type.clone()];
    }
    let unsigned = unsigned_type_headers(scheme, &identity);
    match config.type_from_header {
        Some(true) => identity.header_type = HeaderType::Accepted,
        Some(false) => identity.header_type = HeaderType::Refused,
        // A shared token covers no byte of the request: whoever holds it chooses the body as freely as a header,
        // so a header type is no weaker than a body one, and is taken as before.
        None if scheme.is_token() => identity.header_type = HeaderType::Accepted,
        None if unsigned.is_empty() => {}
        None => problems.push(format!(
            "scheme `{}` does not sign the event type, which would come from the header `{}`: anyone re-sending a \
             captured delivery with another value picks the route of its first copy. Set type_from_header = true \
             to route on that header anyway, or type_from_header = false to take the type from signed bytes only \
             (none for this provider: its events are then routed by source alone) (docs/security.md, 'What an \
             unsigned header can still decide')",
            scheme.name(),
            unsigned.join("`, `"),
        )),
    }
    identity
}

/// The headers `identity` would take the type from that `scheme` does not sign. `none` vouches for every header,
/// and a scheme signing only body fields types the event from them: none for either.
fn unsigned_type_headers<'a>(scheme: &dyn Scheme, identity: &'a IdentityRule) -> Vec<&'a str> {
    if scheme.is_verifying() && scheme.covers_whole_body() {
        identity.unsigned_type_headers(&scheme.signable_headers())
    } else {
        Vec::new()
    }
}

/// At every (re)load: a source that takes its type from an unsigned header says so, once.
pub(super) fn log_header_type(source: &Source) {
    if source.identity.header_type != HeaderType::Accepted || source.scheme.is_token() {
        return;
    }
    let unsigned = unsigned_type_headers(source.scheme.as_ref(), &source.identity);
    if !unsigned.is_empty() {
        tracing::info!(
            source = %source.name,
            headers = %unsigned.join(", "),
            "event type from a header the signature does not cover (type_from_header = true): a captured delivery \
             re-sent with another value picks the route of its first copy"
        );
    }
}

#[cfg(test)]
mod tests {
    use hookline_common::config::SecretRef;
    use hookline_signature as signature;

    use super::*;

    fn secret_file() -> String {
        let path = std::env::temp_dir().join(format!("hookline-event-type-test-{}", std::process::id()));
        std::fs::write(&path, "a-long-enough-test-secret-for-any-scheme").unwrap();
        path.display().to_string()
    }

    /// Every scheme whose type could come from an unsigned header, as the loader finds it.
    fn schemes_with_header_types() -> Vec<&'static str> {
        let file = secret_file();
        signature::all_names()
            .filter(|name| {
                let config = SourceConfig {
                    allow_token: true,
                    public_url: Some("https://example.test/hook".to_owned()),
                    ..SourceConfig::new("s", *name, vec![SecretRef::from_file("a", &file)])
                };
                let Ok(scheme) = signature::build(name, &Default::default()) else { return false };
                let mut problems = Vec::new();
                identity_of(&config, scheme.as_ref(), &mut problems);
                problems.iter().any(|problem| problem.contains("type_from_header"))
            })
            .collect()
    }

    #[test]
    fn a_source_whose_type_could_come_from_an_unsigned_header_must_choose() {
        let file = secret_file();
        let github = SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", &file)]);
        let problems = Source::from_config(&github, "t").expect_err("github without a choice is refused");
        assert!(
            problems.iter().any(|problem| problem.contains("type_from_header") && problem.contains("x-github-event")),
            "the problem names the key and the header: {problems:?}"
        );
        let accepted = Source::from_config(&SourceConfig { type_from_header: Some(true), ..github.clone() }, "t")
            .expect("opted in");
        assert_eq!(accepted.identity.header_type, HeaderType::Accepted);
        let refused = Source::from_config(&SourceConfig { type_from_header: Some(false), ..github.clone() }, "t")
            .expect("opted out");
        assert_eq!(refused.identity.header_type, HeaderType::Refused);

        let stripe = SourceConfig::new("st", "stripe", vec![SecretRef::from_file("a", &file)]);
        assert!(Source::from_config(&stripe, "t").is_ok(), "a signed type needs no choice");
        let header_override =
            SourceConfig { event_type: Some(signature::FieldSource::header("X-Kind")), ..stripe.clone() };
        assert!(
            Source::from_config(&header_override, "t").is_err_and(|p| p.join("").contains("type_from_header")),
            "a configured header type is an unsigned header too"
        );
    }

    /// docs/security.md lists the schemes whose sources must set `type_from_header`; the list is the loader's.
    #[test]
    fn the_schemes_that_must_choose_are_the_ones_the_docs_name() {
        let docs = include_str!("../../../docs/security.md");
        let marker = "Schemes whose sources must set `type_from_header`: ";
        let start = docs.find(marker).expect("docs/security.md lists them") + marker.len();
        let listed = &docs[start..start + docs[start..].find('.').expect("the list ends with a full stop")];
        let mut listed: Vec<&str> = listed.split(',').map(|name| name.trim().trim_matches('`')).collect();
        listed.sort_unstable();
        let mut found = schemes_with_header_types();
        found.sort_unstable();
        assert_eq!(listed, found);
    }
}
