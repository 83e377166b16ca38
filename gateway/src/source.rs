//! A configured source, ready to verify requests: its scheme, its loaded secrets, and what to do with what
//! verifies (topic, identity, forwarded headers). A [`SourceTable`] is every source of one config; reloads swap
//! whole tables, so a request always sees one consistent config.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use hookline_common::wire::now_ms;
use hookline_signature::{self as signature, IdentityRule, Scheme, SchemeOptions, Secret, handshake::Challenge};
use http::HeaderName;

use crate::{
    config::{GatewayConfig, SourceConfig, default_verifications_per_source},
    paypal_api::PayPalApi,
    reply::Reply,
};

mod event_type;

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
    /// A `paypal` source's way to PayPal's event API, which confirms each delivery's body (`None` for every other
    /// scheme, and for a `paypal` source that opted in to `allow_crc_only`).
    pub paypal: Option<PayPalApi>,
    /// Its request quota (`rate_per_s`, `burst`, or the `[limits]` defaults), charged for each verified request
    /// ([`crate::quota`]); `None`: unlimited. Set by [`SourceTable::build`], which knows the defaults.
    pub quota: Option<crate::gcra::Gcra>,
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
        let scheme = signature::build(&config.scheme, &scheme_options(config))
            .map_err(|problem| problems.push(problem.to_string()))
            .ok();
        let tables = [
            ("hmac", config.hmac.is_some()),
            ("structured", config.structured.is_some()),
            ("body_fields", config.body_fields.is_some()),
            ("token", config.token.is_some()),
            ("jwt", config.jwt.is_some()),
            ("paypal", config.paypal.is_some()),
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
                    problems.extend(secret_ref.load().err().map(|problem| problem.to_string()));
                    problems.extend(secret_ref.validity_ms().err().map(|problem| problem.to_string()));
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
                    if is_untimed_signature(scheme.as_deref(), header.as_str())
                        && !config.forward_untimed_signature =>
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
        let paypal = PayPalApi::from_config(&config.scheme, config.paypal.as_ref(), &mut problems);
        let identity = scheme.as_deref().map(|scheme| event_type::identity_of(config, scheme, &mut problems));
        let (Some(scheme), Some(identity)) = (scheme.filter(|_| problems.is_empty()), identity) else {
            return Err(problems);
        };
        let scheme_is_costly = scheme.is_costly();
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
            paypal,
            quota: None,
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

/// The options a source's scheme is built with.
fn scheme_options(config: &SourceConfig) -> SchemeOptions {
    SchemeOptions {
        tolerance_s: config.tolerance_s,
        hmac: config.hmac.clone(),
        structured: config.structured.clone(),
        body_fields: config.body_fields.clone(),
        token: config.token.clone(),
        jwt: config.jwt.clone(),
    }
}

/// Whether `config` must still choose `type_from_header`, said without loading a secret: for `--print-config`
/// (and so `scripts/check-deploy`), which builds no source. A scheme that does not build is left to the build.
pub fn type_choice_problem(config: &SourceConfig) -> Option<String> {
    let scheme = signature::build(&config.scheme, &scheme_options(config)).ok()?;
    let mut problems = Vec::new();
    event_type::identity_of(config, scheme.as_ref(), &mut problems);
    problems.pop().map(|problem| format!("source `{}`: {problem}", config.name))
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
    if handshakes.contains(&Challenge::XCrc) && !scheme.refuses_non_object_bodies() {
        problems.push(format!(
            "the x_crc handshake answers, to anyone, an HMAC with this source's secret of a token they choose: only \
             scheme `x` (which accepts JSON object bodies only, so such an answer never signs a body it accepts) \
             may answer it, and `{}` is not `x`",
            scheme.name()
        ));
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
        let validity = token_ref.validity_ms().map_err(|problem| problems.push(problem.to_string())).ok();
        let raw = token_ref.load().map_err(|problem| problems.push(problem.to_string())).ok();
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

/// Whether `name` (lowercase) is a signature header of `scheme` when the built scheme signs no timestamp
/// ([`Scheme::signs_timestamp`]: a preset's `timed`, a family's options): every header of theirs whose name says
/// signature, HMAC or MAC (Airtable's `X-Airtable-Content-MAC`). A scheme that did not build is left to the
/// build's problem.
fn is_untimed_signature(scheme: Option<&dyn Scheme>, name: &str) -> bool {
    let says_signature = name.contains("signature")
        || name.contains("hmac")
        || name.split('-').any(|part| part == "mac" || part == "sig");
    scheme.is_some_and(|scheme| !scheme.signs_timestamp()) && says_signature
}

/// Why a source's deliveries can be replayed for ever, when it is a JWT source (the `jwt` family or one of its
/// presets) whose tokens bind the body but carry no time the scheme checks (no `require_iat`, no `require_exp`):
/// a captured delivery is then a duplicate only within `dedupe_ttl_s`, and processed again after it.
pub fn untimed_jwt_warning(source: &Source) -> Option<&'static str> {
    let scheme = source.scheme.as_ref();
    let jwt = signature::presets::is_jwt(scheme.name());
    (jwt && scheme.is_verifying() && !scheme.is_token() && !scheme.signs_timestamp()).then_some(
        "a JWT source whose tokens need no time claim (set jwt.require_iat or jwt.require_exp where the provider \
         sends one): a captured delivery verifies for ever, a duplicate only within dedupe_ttl_s",
    )
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
        let validity = secret_ref.validity_ms().map_err(|problem| problems.push(problem.to_string())).ok();
        let key = secret_ref.load().map_err(|problem| problems.push(problem.to_string())).ok().and_then(|raw| {
            scheme
                .decode_secret(&raw)
                .map_err(|problem| problem.to_string())
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
/// `body_fields`, `token`, `jwt`: a user-chosen secret, and a short token can be guessed online); warns about a short key for a
/// provider's scheme, whose secrets the provider issues (its test vectors use short ones) or the user chose.
fn key_strength(scheme: &dyn Scheme, raw: &[u8], key: Vec<u8>, id: &str) -> Result<Vec<u8>, String> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err("is blank (only whitespace)".to_owned());
    }
    if key.is_empty() {
        return Err("decodes to an empty key".to_owned());
    }
    let configurable = matches!(scheme.name(), "hmac" | "structured" | "body_fields" | "token" | "jwt");
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
                    let source = Source { quota: crate::quota::of_source(config, source_config), ..source };
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
            event_type::log_header_type(source);
            if let Some(warning) = untimed_jwt_warning(source) {
                tracing::warn!(source = %source.name, "{warning}");
            }
            for secret in source.secrets.iter().filter(|secret| !secret.is_active_at(now)) {
                tracing::info!(source = %source.name, secret_id = %secret.id, "secret is outside its not_before/not_after window");
            }
        }
    }
}

#[cfg(test)]
mod tests;
