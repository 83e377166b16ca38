//! `[redis]`: where Redis is, how the dedupe keys are laid out and kept, and how hookline authenticates to it
//! (`redis.username`, `redis.password` as a secret, `[redis.tls]`), with the checks that need no file. Reading the
//! files and telling a refusal from an outage is [`crate::redis_security`]'s.

use serde::{Deserialize, Serialize};

use super::{Problems, SecretRef, env, redact};

/// How to reach Redis and lay out the dedupe keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port`; with `cluster = true`, a comma-separated list of seed nodes. Printed without the
    /// password of a `redis://user:password@host` URL.
    #[serde(serialize_with = "redact::url_list_passwords")]
    pub url: String,
    /// Connect to a Redis Cluster. Every dedupe script touches one event's keys, which share a hash tag.
    pub cluster: bool,
    /// Every dedupe key starts with it (docs/dedupe.md).
    pub key_prefix: String,
    /// How long a processed event id is remembered. 72 hours covers the retry windows of the providers we
    /// know (Stripe retries for up to 3 days, GitHub does not redeliver on its own, Shopify for 48 hours).
    pub dedupe_ttl_s: u64,
    /// How long a consumer's claim on an event lives if the consumer dies while processing it.
    pub claim_lease_ms: u64,
    /// A rolling upgrade from the previous dedupe layout (one key per event): for this long after a service's first
    /// start on the bucketed layout, its consumers also claim and mark the previous layout's keys, so instances of
    /// the previous build running beside them never process an event twice (docs/dedupe.md). Cover the whole
    /// rollout, and any rollback: after it, a previous build would not see what the new one processed.
    pub dedupe_upgrade_period_s: u64,
    /// Bound on each Redis command; a timed-out claim is treated as uncertain and read back.
    pub response_timeout_ms: u64,
    /// Redis 6 ACL user (`AUTH <username> <password>`); without it, the `default` user.
    pub username: Option<String>,
    /// The password of `username` (or of the default user), a secret reference; never in `url`.
    pub password: Option<SecretRef>,
    /// Send `password` over a plain `redis://` connection anyway (AUTH in clear text, readable by anyone on the
    /// path). Refused without it: use `rediss://`, or set this only where the network itself is private.
    pub allow_plaintext_password: bool,
    /// For a `rediss://` URL: the CA to trust instead of the built-in roots, and a client certificate
    /// ([`crate::redis_security`]).
    pub tls: Option<RedisTls>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:16379".to_owned(),
            cluster: false,
            key_prefix: "hookline:dedupe".to_owned(),
            dedupe_ttl_s: 72 * 3600,
            claim_lease_ms: 30_000,
            dedupe_upgrade_period_s: 6 * 3600,
            response_timeout_ms: 2_000,
            username: None,
            password: None,
            allow_plaintext_password: false,
            tls: None,
        }
    }
}

impl RedisConfig {
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(
            self.url.starts_with("redis://") || self.url.starts_with("rediss://"),
            "redis.url must be redis:// or rediss://",
        );
        problems.check(!self.key_prefix.is_empty(), "redis.key_prefix is empty");
        problems.check(self.dedupe_ttl_s >= 60, "redis.dedupe_ttl_s must be at least 60");
        problems.check(
            self.dedupe_ttl_s <= crate::wire::dedupe_layout::MAX_WINDOW_S,
            "redis.dedupe_ttl_s must be at most 2592000 (30 days)",
        );
        problems.check(self.claim_lease_ms >= 1_000, "redis.claim_lease_ms must be at least 1000");
        problems.check(self.response_timeout_ms >= 50, "redis.response_timeout_ms must be at least 50");
        validate_security(self, problems);
    }

    /// The node URLs in `url`.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim).filter(|url| !url.is_empty())
    }

    pub fn apply_env(&mut self) {
        if let Ok(url) = std::env::var(env::REDIS_URL) {
            self.url = url;
        }
    }
}

/// `[redis.tls]`: whom to trust and what to present on a `rediss://` connection.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisTls {
    /// PEM file of the CA certificate(s) that sign the server's certificate. Replaces the built-in Mozilla roots:
    /// give it for a private CA (Redis Cloud, a self-managed Redis), omit it for a public one (ElastiCache, Azure
    /// Cache, Upstash).
    pub ca_file: Option<String>,
    /// PEM client certificate (chain) for a Redis that asks for one (`tls-auth-clients yes`); with `client_key`.
    pub client_cert_file: Option<String>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1), a secret.
    pub client_key: Option<SecretRef>,
}

/// The problems of `[redis]` that need no file: a credential in the URL, TLS settings on a plain URL, a URL that
/// switches verification off, a client certificate without its key.
fn validate_security(config: &RedisConfig, problems: &mut Problems) {
    let urls: Vec<&str> = config.urls().collect();
    for url in &urls {
        let rest = url.split_once("://").map_or(*url, |(_, rest)| rest);
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if authority.contains('@') {
            problems.push(format!(
                "redis.url carries credentials ({}): remove them from the URL and set redis.username and \
                 redis.password = {{ id = \"redis\", env = \"...\" }} (or file = \"...\")",
                redact::url_password(url)
            ));
        }
        if url.contains("#insecure") {
            problems.push(
                "redis.url ends in #insecure, which would skip certificate verification: give the server's CA in \
                 redis.tls.ca_file instead"
                    .to_owned(),
            );
        }
    }
    let tls_urls = urls.iter().filter(|url| url.starts_with("rediss://")).count();
    if tls_urls != 0 && tls_urls != urls.len() {
        problems.push("redis.url mixes rediss:// and redis:// nodes: use rediss:// for every one".to_owned());
    }
    if let Some(tls) = &config.tls {
        if tls_urls == 0 {
            problems.push("redis.tls is set but redis.url is redis://: use rediss:// to connect with TLS".to_owned());
        }
        if tls.client_cert_file.is_some() != tls.client_key.is_some() {
            problems.push("redis.tls.client_cert_file and redis.tls.client_key go together".to_owned());
        }
    }
    if config.username.as_deref().is_some_and(str::is_empty) {
        problems.push("redis.username is empty".to_owned());
    }
    if config.username.is_some() && config.password.is_none() {
        problems.push("redis.username needs redis.password (a secret reference)".to_owned());
    }
    if config.password.is_some() && tls_urls < urls.len() && !config.allow_plaintext_password {
        problems.push(
            "redis.password would be sent in clear text over redis://: use rediss:// (TLS), or set \
             redis.allow_plaintext_password = true where the network itself is private"
                .to_owned(),
        );
    }
}
