//! A configured source, ready to verify requests: its scheme, its loaded secrets, and what to do with what
//! verifies (topic, identity, forwarded headers). A [`SourceTable`] is every source of one config; reloads swap
//! whole tables, so a request always sees one consistent config.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use hookline_common::{
    signature::{self, IdentityRule, Scheme, SchemeOptions, Secret, handshake::Challenge},
    wire::now_ms,
};
use http::HeaderName;

use crate::{
    config::{GatewayConfig, SourceConfig, default_verifications_per_source},
    reply::Reply,
};

#[derive(Debug)]
pub struct Source {
    pub name: String,
    pub scheme: Box<dyn Scheme>,
    pub secrets: Vec<Secret>,
    pub max_body_bytes: usize,
    pub topic: String,
    pub identity: IdentityRule,
    pub ordering_key: Option<signature::FieldSource>,
    pub forward_headers: Vec<HeaderName>,
    pub public_url: Option<String>,
    /// For public-key schemes (Discord, SendGrid): the verifications of this source that may run at once. A
    /// forged flood of one source then costs at most this many cores, never another source's.
    pub verify_budget: Option<Arc<tokio::sync::Semaphore>>,
    /// Whether a request's `traceparent` is continued (`trust_traceparent`); otherwise ignored.
    pub trust_traceparent: bool,
    /// The handshakes answered besides the scheme's own: its preset's and the configured ones.
    pub handshakes: Vec<Challenge>,
    /// Meta's verify tokens (the `meta_hub` handshake), as configured (no decoding).
    pub verify_tokens: Vec<Secret>,
    /// The configured answer to an accepted request, if any (before the scheme's own).
    pub reply: Option<Reply>,
}

impl Source {
    /// Builds a source, loading and decoding its secrets; every problem is returned at once.
    pub fn from_config(config: &SourceConfig, default_topic: &str) -> Result<Self, Vec<String>> {
        Self::from_config_with(config, default_topic, default_verifications_per_source())
    }

    /// [`Self::from_config`], with a public-key scheme allowed `verifications_per_source` at once.
    pub fn from_config_with(
        config: &SourceConfig,
        default_topic: &str,
        verifications_per_source: usize,
    ) -> Result<Self, Vec<String>> {
        let verifications_per_source = verifications_per_source.max(1);
        let mut problems = Vec::new();
        let options = SchemeOptions {
            tolerance_s: config.tolerance_s,
            hmac: config.hmac.clone(),
            structured: config.structured.clone(),
            body_fields: config.body_fields.clone(),
            token: config.token.clone(),
        };
        let scheme = signature::build(&config.scheme, &options).map_err(|problem| problems.push(problem)).ok();
        let tables = [
            ("hmac", config.hmac.is_some()),
            ("structured", config.structured.is_some()),
            ("body_fields", config.body_fields.is_some()),
            ("token", config.token.is_some()),
        ];
        for (table, given) in tables {
            if given && config.scheme != table {
                problems.push(format!("a [sources.{table}] table is only read by scheme = \"{table}\""));
            }
        }
        if config.tolerance_s == Some(0) {
            problems.push("tolerance_s must be at least 1 (timestamp checks cannot be turned off)".to_owned());
        }
        let secrets = match scheme.as_deref() {
            Some(scheme) => load_secrets(config, scheme, &mut problems),
            None if config.secrets.is_empty() => {
                problems.push("has no secrets: it would accept nothing, or worse".to_owned());
                Vec::new()
            }
            None => {
                // The scheme is unknown, but the secrets can still be checked: every problem at once.
                for secret_ref in &config.secrets {
                    problems.extend(secret_ref.load().err());
                    problems.extend(secret_ref.validity_ms().err());
                }
                Vec::new()
            }
        };
        if config.max_body_bytes == 0 {
            problems.push("max_body_bytes must be positive".to_owned());
        }
        let topic = config.topic.clone().unwrap_or_else(|| default_topic.to_owned());
        if topic.is_empty() {
            problems.push("topic is empty".to_owned());
        }
        for field in config.event_id.iter().chain(&config.event_type).chain(&config.ordering_key) {
            problems.extend(field.problem());
        }
        if config.ordering_key.as_ref().is_some_and(|key| {
            matches!(key, signature::FieldSource::BodySha256 | signature::FieldSource::BodySha256Without(_))
        }) {
            problems.push("ordering_key must be a header or a json_pointer (a body digest orders nothing)".to_owned());
        }
        let mut forward_headers = Vec::new();
        for name in &config.forward_headers {
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(header) if is_credential(header.as_str()) => {
                    problems.push(format!("forward_headers: `{name}` carries a credential; it must not reach Kafka"));
                }
                Ok(header)
                    if is_untimed_signature(&config.scheme, header.as_str()) && !config.forward_untimed_signature =>
                {
                    problems.push(format!(
                        "forward_headers: `{name}` is the signature of scheme `{}`, which signs no timestamp: with \
                         the body it is a delivery anyone who reads it can re-send at any time, and Kafka and the DLQ \
                         keep it; leave it out, or set forward_untimed_signature = true (docs/security.md)",
                        config.scheme
                    ));
                }
                Ok(header) => forward_headers.push(header),
                Err(_) => problems.push(format!("forward_headers: `{name}` is not a valid header name")),
            }
        }
        if let Some(scheme) = &scheme {
            match &config.public_url {
                None if scheme.signs_url() => {
                    problems.push(format!("scheme `{}` signs the URL: set public_url", scheme.name()));
                }
                Some(url) if !(url.starts_with("https://") || url.starts_with("http://")) || url.contains('?') => {
                    problems.push(format!("public_url `{url}` must be an http(s) URL without a query string"));
                }
                _ => {}
            }
        }
        if let (Some(scheme), Some(signature::FieldSource::Header(name))) = (&scheme, &config.ordering_key) {
            let signed = scheme.signable_headers().iter().any(|signed| signed.eq_ignore_ascii_case(name));
            if scheme.is_verifying() && !signed {
                problems.push(format!(
                    "ordering_key: header `{name}` is not covered by scheme `{}`'s signature, so whoever relays or \
                     captures a request could choose it; use a json_pointer into the signed body",
                    scheme.name()
                ));
            }
        }
        let handshakes =
            scheme.as_deref().map(|scheme| handshakes_of(config, scheme, &mut problems)).unwrap_or_default();
        let verify_tokens = load_verify_tokens(config, &mut problems);
        let reply = config.reply.as_ref().and_then(|reply| Reply::from_config(reply, &mut problems));
        let Some(scheme) = scheme.filter(|_| problems.is_empty()) else { return Err(problems) };
        let scheme_is_costly = scheme.is_costly();
        let mut identity = scheme.identity();
        if let Some(event_id) = &config.event_id {
            identity.event_id = vec![event_id.clone()];
        }
        if let Some(event_type) = &config.event_type {
            identity.event_type = vec![event_type.clone()];
        }
        Ok(Self {
            name: config.name.clone(),
            scheme,
            secrets,
            max_body_bytes: config.max_body_bytes,
            topic,
            identity,
            ordering_key: config.ordering_key.clone(),
            forward_headers,
            public_url: config.public_url.clone(),
            verify_budget: scheme_is_costly.then(|| Arc::new(tokio::sync::Semaphore::new(verifications_per_source))),
            trust_traceparent: config.trust_traceparent,
            handshakes,
            verify_tokens,
            reply,
        })
    }

    /// Whether this source answers some `GET` (a handshake); every other source answers `GET` 405.
    pub fn answers_get(&self) -> bool {
        self.handshakes.iter().any(|challenge| challenge.is_get())
    }

    /// The URL the provider signed: `public_url` plus the request's query string.
    pub fn signed_url(&self, query: Option<&str>) -> Option<String> {
        let base = self.public_url.as_deref()?;
        Some(match query {
            Some(query) => format!("{base}?{query}"),
            None => base.to_owned(),
        })
    }
}

/// The scheme's own handshakes and the configured ones, and every problem with the scheme's opt-ins: a token
/// scheme without `allow_token`, identity overrides for a scheme that signs only some body fields, `meta_hub`
/// without verify tokens.
fn handshakes_of(config: &SourceConfig, scheme: &dyn Scheme, problems: &mut Vec<String>) -> Vec<Challenge> {
    if scheme.is_token() && !config.allow_token {
        problems.push(format!(
            "scheme `{}` accepts a shared token, which proves who sent a request but not what it holds and does \
             not stop a replay (docs/security.md, 'Token schemes'): set allow_token = true to accept that",
            scheme.name()
        ));
    }
    if config.allow_token && !scheme.is_token() {
        problems.push(format!("allow_token is only read by token schemes, and `{}` is not one", scheme.name()));
    }
    let identity_overrides = [&config.event_id, &config.event_type, &config.ordering_key];
    if !scheme.covers_whole_body() && identity_overrides.iter().any(|field| field.is_some()) {
        problems.push(format!(
            "scheme `{}` signs only some fields of the body, so the event id and type come from those fields and \
             nothing else in the body may decide anything: remove event_id, event_type and ordering_key",
            scheme.name()
        ));
    }
    let mut handshakes: Vec<Challenge> = scheme.handshakes().to_vec();
    for challenge in &config.handshakes {
        if !handshakes.contains(challenge) {
            handshakes.push(*challenge);
        }
    }
    let needs_tokens = handshakes.iter().any(|challenge| challenge.needs_verify_tokens());
    if needs_tokens && config.verify_tokens.is_empty() {
        problems.push("the meta_hub handshake needs verify_tokens (Meta's verify token)".to_owned());
    }
    if !needs_tokens && !config.verify_tokens.is_empty() {
        problems.push("verify_tokens are only read by the meta_hub handshake".to_owned());
    }
    handshakes
}

/// Meta's verify tokens, used as configured.
fn load_verify_tokens(config: &SourceConfig, problems: &mut Vec<String>) -> Vec<Secret> {
    let mut tokens = Vec::new();
    for token_ref in &config.verify_tokens {
        let validity = token_ref.validity_ms().map_err(|problem| problems.push(problem)).ok();
        let raw = token_ref.load().map_err(|problem| problems.push(problem)).ok();
        match (raw, validity) {
            (Some(raw), _) if raw.iter().all(u8::is_ascii_whitespace) => {
                problems.push(format!("verify token `{}` is blank", token_ref.id));
            }
            (Some(raw), Some((not_before, not_after))) => {
                tokens.push(Secret::new(&token_ref.id, raw).with_validity(not_before, not_after));
            }
            _ => {}
        }
    }
    tokens
}

/// Whether a header (lowercase name) may carry a credential: never forwarded into Kafka, where every consumer,
/// the DLQ and its replays would hold it. A provider's signature (`Stripe-Signature`, `X-Hub-Signature-256`) is
/// not one: it is a MAC of this one request that reveals nothing of the secret, and a downstream may verify it
/// again (the consumer's `http` handler forwards it when its route allows it); re-sent to the gateway it only
/// makes a duplicate.
fn is_credential(name: &str) -> bool {
    const EXACT: &[&str] = &["authorization", "proxy-authorization", "cookie", "set-cookie", "x-gitlab-token"];
    const PARTS: &[&str] = &["token", "secret", "api-key", "apikey", "password", "auth"];
    EXACT.contains(&name) || PARTS.iter().any(|part| name.contains(part))
}

/// Whether `name` (lowercase) is a signature header of `scheme` when the scheme signs no timestamp
/// ([`signature::UNTIMED_SCHEMES`]): every header of theirs whose name says signature or HMAC.
fn is_untimed_signature(scheme: &str, name: &str) -> bool {
    signature::UNTIMED_SCHEMES.contains(&scheme) && (name.contains("signature") || name.contains("hmac"))
}

fn load_secrets(config: &SourceConfig, scheme: &dyn Scheme, problems: &mut Vec<String>) -> Vec<Secret> {
    if !scheme.is_verifying() {
        if !config.secrets.is_empty() {
            problems.push("scheme `none` verifies nothing and takes no secrets".to_owned());
        }
        return Vec::new();
    }
    if config.secrets.is_empty() {
        problems.push("has no secrets: it would accept nothing, or worse".to_owned());
    }
    let mut ids = HashSet::new();
    let mut secrets = Vec::new();
    for secret_ref in &config.secrets {
        if secret_ref.id.is_empty() {
            problems.push("a secret has an empty id".to_owned());
        } else if !ids.insert(secret_ref.id.as_str()) {
            problems.push(format!("secret id `{}` is used twice", secret_ref.id));
        }
        let validity = secret_ref.validity_ms().map_err(|problem| problems.push(problem)).ok();
        let key = secret_ref.load().map_err(|problem| problems.push(problem)).ok().and_then(|raw| {
            scheme
                .decode_secret(&raw)
                .and_then(|key| key_strength(scheme, &raw, key, &secret_ref.id))
                .map_err(|problem| problems.push(format!("secret `{}`: {problem}", secret_ref.id)))
                .ok()
        });
        if let (Some(key), Some((not_before, not_after))) = (key, validity) {
            secrets.push(Secret::new(&secret_ref.id, key).with_validity(not_before, not_after));
        }
    }
    let now = now_ms();
    if !secrets.is_empty() && secrets.len() == config.secrets.len() && !secrets.iter().any(|s| s.is_active_at(now)) {
        problems.push("no secret is active now (check not_before / not_after)".to_owned());
    }
    secrets
}

/// Shortest key the generic `hmac` scheme accepts (bytes): 128 bits, so one captured request cannot be used to
/// guess the key offline.
pub const MIN_GENERIC_KEY_BYTES: usize = 16;

/// Refuses a secret that is blank (a file or variable of only whitespace) or decodes to an empty key (hex or base64
/// of whitespace), and a key under [`MIN_GENERIC_KEY_BYTES`] for a configurable family (`hmac`, `structured`,
/// `body_fields`, `token`: a user-chosen secret, and a short token can be guessed online); warns about a short key for a
/// provider's scheme, whose secrets the provider issues (its test vectors use short ones) or the user chose.
fn key_strength(scheme: &dyn Scheme, raw: &[u8], key: Vec<u8>, id: &str) -> Result<Vec<u8>, String> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err("is blank (only whitespace)".to_owned());
    }
    if key.is_empty() {
        return Err("decodes to an empty key".to_owned());
    }
    let configurable = matches!(scheme.name(), "hmac" | "structured" | "body_fields" | "token");
    if key.len() < MIN_GENERIC_KEY_BYTES && configurable {
        return Err(format!(
            "decodes to a {}-byte key; scheme `{}` needs at least {MIN_GENERIC_KEY_BYTES} (e.g. `openssl rand -hex 32`)",
            key.len(),
            scheme.name()
        ));
    }
    if key.len() < MIN_GENERIC_KEY_BYTES {
        tracing::warn!(
            secret_id = id,
            key_bytes = key.len(),
            "a short HMAC key: one captured request lets anyone guess it offline; use the longest the provider allows"
        );
    }
    Ok(key)
}

/// Every source of one config, by name.
#[derive(Debug, Default)]
pub struct SourceTable {
    sources: HashMap<String, Arc<Source>>,
}

impl SourceTable {
    /// Builds every source of `config`, loading every secret once, or returns every problem.
    pub fn build(config: &GatewayConfig) -> Result<Self, Vec<String>> {
        let mut sources = HashMap::new();
        let mut problems = Vec::new();
        let mut seen = HashSet::new();
        for source_config in &config.sources {
            let name = &source_config.name;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                problems
                    .push(format!("source name `{name}` must be non-empty and use only letters, digits, `-` and `_`"));
            }
            if !seen.insert(name.as_str()) {
                problems.push(format!("source `{name}` is declared twice"));
            }
            let per_source = config.limits.max_costly_verifications_per_source;
            match Source::from_config_with(source_config, &config.kafka.inbound_topic, per_source) {
                Ok(source) => {
                    sources.insert(source.name.clone(), Arc::new(source));
                }
                Err(found) => {
                    problems
                        .extend(found.into_iter().map(|problem| format!("source `{}`: {problem}", source_config.name)));
                }
            }
        }
        if problems.is_empty() { Ok(Self { sources }) } else { Err(problems) }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Source>> {
        self.sources.get(name)
    }

    /// The configured name equal to `name`, borrowed from the table (a bounded metric label).
    pub fn name_of(&self, name: &str) -> Option<&str> {
        self.sources.get_key_value(name).map(|(key, _)| key.as_str())
    }

    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Every source.
    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.sources.values().map(|source| source.as_ref())
    }

    /// The topics these sources produce to.
    pub fn topics(&self) -> Vec<String> {
        self.sources.values().map(|source| source.topic.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Logs what operators must know about a table about to serve: unsigned sources, and secrets that are not
    /// (or no longer) accepted.
    pub fn log_warnings(&self) {
        let now = now_ms();
        for source in self.sources.values() {
            if !source.scheme.is_verifying() {
                tracing::warn!(
                    source = %source.name,
                    "source accepts UNVERIFIED requests (scheme = \"none\"): only for trusted internal senders"
                );
            }
            for secret in source.secrets.iter().filter(|secret| !secret.is_active_at(now)) {
                tracing::info!(source = %source.name, secret_id = %secret.id, "secret is outside its not_before/not_after window");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hookline_common::config::SecretRef;

    use super::*;

    fn secret_file(contents: &str) -> String {
        let path = std::env::temp_dir().join(format!("hookline-source-test-{}", uuid_like()));
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }

    fn uuid_like() -> String {
        format!("{}-{:?}", std::process::id(), std::time::SystemTime::now())
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect()
    }

    fn problems_of(config: &SourceConfig) -> String {
        Source::from_config(config, "inbound").err().unwrap_or_default().join("\n")
    }

    #[test]
    fn the_signature_of_an_untimed_scheme_is_not_forwarded_without_an_opt_in() {
        let file = secret_file("a-github-webhook-secret");
        for (scheme, header) in [
            ("github", "X-Hub-Signature-256"),
            ("github", "X-Hub-Signature"),
            ("shopify", "X-Shopify-Hmac-Sha256"),
            ("woocommerce", "X-WC-Webhook-Signature"),
        ] {
            let mut config = SourceConfig::new("s", scheme, vec![SecretRef::from_file("a", &file)]);
            config.forward_headers = vec![header.into(), "User-Agent".into()];
            assert!(problems_of(&config).contains("signs no timestamp"), "{scheme} {header}: {}", problems_of(&config));
            config.forward_untimed_signature = true;
            assert!(!problems_of(&config).contains("signs no timestamp"), "{scheme}: the opt-in");
        }
        // A timed scheme's signature expires with its tolerance: forwarded as before.
        let mut stripe = SourceConfig::new("s", "stripe", vec![SecretRef::from_file("a", &file)]);
        stripe.forward_headers = vec!["Stripe-Signature".into()];
        assert!(!problems_of(&stripe).contains("signs no timestamp"));
    }

    #[test]
    fn schemes_that_sign_the_url_need_public_url() {
        let file = secret_file("token");
        let mut config = SourceConfig::new("sms", "twilio", vec![SecretRef::from_file("a", &file)]);
        assert!(problems_of(&config).contains("set public_url"));
        config.public_url = Some("https://hooks.example.com/twilio?x=1".into());
        assert!(problems_of(&config).contains("without a query string"));
        config.public_url = Some("https://hooks.example.com/twilio".into());
        let source = Source::from_config(&config, "inbound").unwrap();
        assert_eq!(source.signed_url(Some("a=1")).as_deref(), Some("https://hooks.example.com/twilio?a=1"));
        assert_eq!(source.topic, "inbound");
    }

    #[test]
    fn none_takes_no_secrets_and_everything_else_needs_one() {
        assert!(Source::from_config(&SourceConfig::new("internal", "none", vec![]), "t").is_ok());
        let file = secret_file("x");
        assert!(
            problems_of(&SourceConfig::new("internal", "none", vec![SecretRef::from_file("a", &file)]))
                .contains("takes no secrets")
        );
        assert!(problems_of(&SourceConfig::new("gh", "github", vec![])).contains("has no secrets"));
        assert!(problems_of(&SourceConfig::new("gh", "githup", vec![])).contains("unknown scheme `githup`"));
    }

    #[test]
    fn secrets_are_decoded_by_the_scheme_and_checked() {
        let bad = secret_file("whsec_***");
        let problems =
            problems_of(&SourceConfig::new("sw", "standard_webhooks", vec![SecretRef::from_file("a", &bad)]));
        assert!(problems.contains("secret `a`: the secret is not base64"), "{problems}");
        let good = secret_file("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let twice = vec![SecretRef::from_file("a", &good), SecretRef::from_file("a", &good)];
        assert!(problems_of(&SourceConfig::new("sw", "standard_webhooks", twice)).contains("used twice"));
        let expired =
            SecretRef { not_after: Some("2001-01-01T00:00:00Z".into()), ..SecretRef::from_file("old", &good) };
        assert!(problems_of(&SourceConfig::new("sw", "svix", vec![expired.clone()])).contains("no secret is active"));
        let current = SecretRef::from_file("new", &good);
        assert!(Source::from_config(&SourceConfig::new("sw", "svix", vec![current, expired]), "t").is_ok());
    }

    #[test]
    fn blank_empty_and_short_keys_are_refused_with_the_reason() {
        use signature::generic::{Encoding, SecretEncoding, TimestampUnit};
        let hmac = |file: &str, secret_encoding: SecretEncoding| SourceConfig {
            hmac: Some(signature::GenericHmacOptions {
                signature_header: "x-sig".into(),
                prefix: String::new(),
                encoding: Encoding::Hex,
                algorithm: signature::generic::Algorithm::Sha256,
                signed_content: "{body}".into(),
                id_header: None,
                timestamp_header: None,
                timestamp_unit: TimestampUnit::Seconds,
                secret_encoding,
            }),
            ..SourceConfig::new("acme", "hmac", vec![SecretRef::from_file("a", file)])
        };
        let blank = secret_file("   \t  \n");
        assert!(
            problems_of(&hmac(&blank, SecretEncoding::Utf8)).contains("secret `a`: is blank"),
            "{}",
            problems_of(&hmac(&blank, SecretEncoding::Utf8))
        );
        assert!(
            problems_of(&SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", &blank)]))
                .contains("is blank")
        );
        let short = secret_file("0123456789abcdef0123456789abcd");
        assert!(
            problems_of(&hmac(&short, SecretEncoding::Hex)).contains("a 15-byte key; scheme `hmac` needs at least 16")
        );
        let long = secret_file("0123456789abcdef0123456789abcdef");
        assert!(Source::from_config(&hmac(&long, SecretEncoding::Hex), "t").is_ok());
        // A provider's own test vector key stays usable (with a warning): its secrets are the provider's to issue.
        assert!(
            Source::from_config(&SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", &short)]), "t")
                .is_ok()
        );
    }

    #[test]
    fn an_ordering_key_from_a_header_the_signature_does_not_cover_is_refused() {
        let file = secret_file("It's a Secret to Everybody");
        let github = SourceConfig {
            ordering_key: Some(signature::FieldSource::header("X-GitHub-Hook-ID")),
            ..SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", &file)])
        };
        assert!(
            problems_of(&github).contains("ordering_key: header `X-GitHub-Hook-ID` is not covered"),
            "{}",
            problems_of(&github)
        );
        let from_body =
            SourceConfig { ordering_key: Some(signature::FieldSource::pointer("/repository/id")), ..github };
        assert!(Source::from_config(&from_body, "t").is_ok());
        let whsec = secret_file("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let signed_header = SourceConfig {
            ordering_key: Some(signature::FieldSource::header("webhook-id")),
            ..SourceConfig::new("sw", "standard_webhooks", vec![SecretRef::from_file("a", &whsec)])
        };
        assert!(Source::from_config(&signed_header, "t").is_ok());
    }

    #[test]
    fn a_generic_token_needs_sixteen_bytes() {
        let short = secret_file("short-token");
        let token = SourceConfig {
            allow_token: true,
            token: Some(signature::token::TokenOptions { header: Some("x-token".into()), ..Default::default() }),
            ..SourceConfig::new("t", "token", vec![SecretRef::from_file("a", &short)])
        };
        assert!(problems_of(&token).contains("scheme `token` needs at least 16"), "{}", problems_of(&token));
        let long = secret_file("a-token-of-twenty-bytes");
        let token = SourceConfig { secrets: vec![SecretRef::from_file("a", &long)], ..token };
        assert!(Source::from_config(&token, "t").is_ok());
    }

    #[test]
    fn a_token_scheme_needs_allow_token_and_nothing_else_takes_it() {
        let file = secret_file("okta-token");
        let okta = SourceConfig::new("okta", "okta", vec![SecretRef::from_file("a", &file)]);
        assert!(problems_of(&okta).contains("set allow_token = true"), "{}", problems_of(&okta));
        let allowed = SourceConfig { allow_token: true, ..okta.clone() };
        let source = Source::from_config(&allowed, "t").unwrap();
        assert_eq!(source.handshakes, vec![Challenge::Okta], "the preset's handshake");
        assert!(source.answers_get());
        let github = SourceConfig { allow_token: true, ..SourceConfig::new("gh", "github", okta.secrets.clone()) };
        assert!(problems_of(&github).contains("allow_token is only read by token schemes"));
        let token = SourceConfig { allow_token: true, ..SourceConfig::new("t", "token", okta.secrets.clone()) };
        assert!(problems_of(&token).contains("needs a [sources.token] table"));
        let misplaced =
            SourceConfig { token: Some(Default::default()), ..SourceConfig::new("gh", "github", okta.secrets) };
        assert!(problems_of(&misplaced).contains("only read by scheme = \"token\""));
    }

    #[test]
    fn meta_needs_its_verify_token_and_replies_are_2xx() {
        let file = secret_file("meta-app-secret");
        let meta = SourceConfig::new("wa", "meta", vec![SecretRef::from_file("app", &file)]);
        assert!(problems_of(&meta).contains("meta_hub handshake needs verify_tokens"));
        let token = secret_file("verify-me");
        let with_token = SourceConfig { verify_tokens: vec![SecretRef::from_file("v", &token)], ..meta.clone() };
        let source = Source::from_config(&with_token, "t").unwrap();
        assert_eq!(source.verify_tokens.len(), 1);
        let stray = SourceConfig {
            verify_tokens: vec![SecretRef::from_file("v", &token)],
            ..SourceConfig::new("gh", "github", meta.secrets.clone())
        };
        assert!(problems_of(&stray).contains("only read by the meta_hub handshake"));
        let redirect =
            crate::config::ReplyConfig { status: 302, content_type: "text/plain".into(), body: String::new() };
        let bad_reply = SourceConfig { reply: Some(redirect), ..with_token.clone() };
        assert!(problems_of(&bad_reply).contains("must be a 2xx status"));
        let echo = SourceConfig { handshakes: vec![Challenge::ChallengeEcho, Challenge::MetaHub], ..with_token };
        let source = Source::from_config(&echo, "t").unwrap();
        assert_eq!(
            source.handshakes,
            vec![Challenge::MetaHub, Challenge::ChallengeEcho],
            "the preset's, then the rest once"
        );
    }

    #[test]
    fn a_scheme_signing_some_fields_refuses_identity_overrides() {
        let file = secret_file("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056");
        let adyen = SourceConfig {
            event_id: Some(signature::FieldSource::pointer("/live")),
            ..SourceConfig::new("adyen", "adyen", vec![SecretRef::from_file("a", &file)])
        };
        assert!(problems_of(&adyen).contains("remove event_id, event_type and ordering_key"));
        let ordered = SourceConfig {
            event_id: None,
            ordering_key: Some(signature::FieldSource::pointer(
                "/notificationItems/0/NotificationRequestItem/pspReference",
            )),
            ..adyen
        };
        assert!(problems_of(&ordered).contains("and ordering_key"));
    }

    #[test]
    fn overrides_replace_the_schemes_identity() {
        let file = secret_file("k");
        let config = SourceConfig {
            event_id: Some(signature::FieldSource::pointer("/delivery")),
            event_type: Some(signature::FieldSource::header("x-kind")),
            forward_headers: vec!["User-Agent".into(), "bad header".into()],
            ..SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", &file)])
        };
        assert!(problems_of(&config).contains("`bad header` is not a valid header name"));
        for credential in ["Authorization", "Cookie", "X-Gitlab-Token", "X-Api-Key", "X-Webhook-Secret"] {
            let config = SourceConfig { forward_headers: vec![credential.into()], ..config.clone() };
            assert!(problems_of(&config).contains("carries a credential"), "{credential}");
        }
        let allowed = ["User-Agent", "X-Hub-Signature-256", "Stripe-Signature", "X-Shopify-Hmac-Sha256"];
        let config = SourceConfig {
            forward_headers: allowed.map(str::to_owned).to_vec(),
            forward_untimed_signature: true,
            ..config
        };
        let source = Source::from_config(&config, "t").unwrap();
        assert_eq!(source.identity.event_id, vec![signature::FieldSource::pointer("/delivery")]);
        assert_eq!(source.forward_headers[0].as_str(), "user-agent");
        assert_eq!(source.forward_headers[2].as_str(), "stripe-signature");
    }
}
