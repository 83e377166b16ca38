//! The gateway's configuration: listeners, Kafka, limits and the sources it serves.

use std::path::Path;

use hookline_common::{
    config::{self, ConfigError, KafkaConfig, Problems, SecretRef, env},
    telemetry::traces::TelemetryConfig,
};
use hookline_signature::{
    FieldSource, GenericHmacOptions, body_fields::BodyFieldsOptions, handshake::Challenge, jwt::JwtOptions,
    structured::StructuredOptions, token::TokenOptions,
};
use serde::{Deserialize, Serialize};

pub use crate::batching::ProducerConfig;
use crate::key_fetch::KeyFetchConfig;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Public listener for `POST /webhooks/{source}`.
    pub listen_addr: String,
    /// Admin listener for `/livez`, `/readyz`, `/metrics`.
    pub admin_addr: String,
    pub kafka: KafkaConfig,
    /// `[producer]`: batching that follows the load (see [`crate::batching`]).
    pub producer: ProducerConfig,
    pub limits: Limits,
    /// Bearer token `POST /admin/reload` requires from callers other than loopback (an env var or a file, like
    /// source secrets). Without one, only loopback callers (`kubectl exec`, `kubectl port-forward`, the host
    /// itself) may reload; SIGHUP always works.
    pub reload_token: Option<SecretRef>,
    /// Bearer token `GET /admin/rejections` accepts (read-only: it does not authorise a reload), for the replayer's
    /// Rejections page (its `gateways.token`). The `reload_token` is accepted for reading too, so a replayer that
    /// still sends it keeps working while both are redeployed; set this one and give the replayer it instead.
    pub rejections_token: Option<SecretRef>,
    /// Traces (on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; see docs/operations.md, "Traces").
    pub telemetry: TelemetryConfig,
    /// `[key_fetch]`: fetching the keys of the SNS and PayPal sources (`crate::key_fetch`).
    pub key_fetch: KeyFetchConfig,
    pub sources: Vec<SourceConfig>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen_addr: "127.0.0.1:8080".to_owned(),
            admin_addr: "127.0.0.1:9090".to_owned(),
            kafka: KafkaConfig::default(),
            producer: ProducerConfig::default(),
            limits: Limits::default(),
            reload_token: None,
            rejections_token: None,
            telemetry: TelemetryConfig::default(),
            key_fetch: KeyFetchConfig::default(),
            sources: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Requests being handled at once; past it the gateway answers 503 at once rather than queueing.
    pub max_in_flight: usize,
    /// A client that has not sent its whole request head by then is disconnected.
    pub header_read_timeout_ms: u64,
    /// A client that has not sent its whole body by then gets 408.
    pub body_read_timeout_ms: u64,
    /// How long in-flight requests may take to finish on shutdown.
    pub drain_deadline_ms: u64,
    /// On shutdown, how long the gateway keeps accepting and answering after `/readyz` starts failing, so the
    /// load balancer stops routing here first: every answer meanwhile carries `Connection: close`, so clients
    /// leave their kept-alive connections cleanly instead of sending into one being closed. Then the listener
    /// closes and `drain_deadline_ms` begins.
    pub drain_grace_ms: u64,
    /// Seconds advertised in `Retry-After` on a 503.
    pub retry_after_s: u64,
    /// Bound on a whole request, socket to answer: a body still arriving then is a 408, a produce still
    /// unacknowledged a 503. Keep it below the providers' timeouts (Slack 3 s, GitHub 10 s) where you can.
    pub request_deadline_ms: u64,
    /// Largest request head a client may send (HTTP/1.1 headers, HTTP/2 header list), at least 8192.
    pub max_header_bytes: usize,
    /// A connection with no request in progress for this long after its last one is closed. A new connection
    /// gets `header_read_timeout_ms` to start its first request.
    pub idle_timeout_ms: u64,
    /// Public connections open at once; more are closed on accept. Lowered at start-up, with a warning, to what
    /// the process's open-file limit leaves after a reserve for the admin listener, Kafka and files.
    pub max_connections: usize,
    /// Public connections open at once from one IP address (an IPv6 address by its /64). Behind a proxy or load
    /// balancer every client shares its address: raise it to `max_connections` there.
    pub max_connections_per_peer: usize,
    /// HTTP/2 streams one connection may have open at once (advertised in SETTINGS; a stream past it is refused
    /// with `REFUSED_STREAM`). Each open stream may hold a request head of up to `max_header_bytes` while its body
    /// is awaited, so this multiplies what one connection can hold; providers barely multiplex, hence 8.
    pub max_concurrent_streams: u32,
    /// Requests in progress at once over all connections and streams, counted from when a request's head has
    /// arrived (before its body is read) until it is answered; past it a request is answered 503
    /// `too_many_requests_in_progress` with `Retry-After` at once. Unlike `max_in_flight` (taken once a body is
    /// complete) this bounds the requests that wait for a body that never comes.
    pub max_requests_in_progress: usize,
    /// The share of `max_requests_in_progress` one client address (an IPv6 address by its /64) may hold; past it
    /// that address's requests get the same 503. One flooding address then cannot take the whole cap, and every
    /// other client's answer with it. Behind a proxy or load balancer that hides client addresses, raise it to
    /// `max_requests_in_progress`.
    pub max_requests_in_progress_per_peer: usize,
    /// Bytes of request bodies and heads held at once, over all requests (read buffers included, being read or in
    /// flight; a head is charged its header list size, name and value plus 32 bytes a header, from when it arrives
    /// until the answer): past it a request is answered 503 `body_buffer_full` with `Retry-After`. With
    /// `max_connections x max_header_bytes` (the one head each connection may be receiving) this bounds the
    /// gateway's memory (see docs/operations.md).
    pub max_body_buffer_bytes: usize,
    /// Costly verifications one source may run at once, on the blocking pool: public-key schemes (Discord
    /// Ed25519, SendGrid ECDSA: 5 to 20 times an HMAC), Twilio (parses and sorts the form) and the URL-signing
    /// Square and HubSpot. Past it that source's requests get 503 `verify_busy` with `Retry-After`, so a forged
    /// flood on one source cannot take the CPU others need. Default: half the cores, at least 1. Read under its
    /// former name `max_asymmetric_verifications_per_source` too.
    #[serde(alias = "max_asymmetric_verifications_per_source")]
    pub max_costly_verifications_per_source: usize,
    /// Requests per second one client IP address (an IPv6 address by its /64) may send, checked before anything
    /// else (see `peer_limit`): a request over it waits for its turn up to `peer_max_wait_ms`, beyond that it is
    /// held that long and answered 429 with `Retry-After`. 0 (the default) turns it off; leave it off behind a
    /// proxy or load balancer that hides client addresses (every client would share one limit) and rate-limit
    /// there.
    pub peer_rate_per_s: f64,
    /// Requests one address may send at once above `peer_rate_per_s` before pacing starts; 0 means one second's
    /// worth.
    pub peer_burst: u32,
    /// Longest a request over its address's rate waits for its turn.
    pub peer_max_wait_ms: u64,
    /// Verified requests per second each source may send when it sets no `rate_per_s` of its own (see
    /// `crate::quota`): past its burst, a source's requests are answered 429 `quota_exceeded` with `Retry-After`
    /// and nothing is produced. 0 (the default) leaves every such source unlimited: a quota is a choice made per
    /// deployment, since some providers (GitHub) do not re-send a refused delivery by themselves. Unlike the other
    /// limits it applies on a reload.
    pub source_rate_per_s: f64,
    /// Requests a source may send at once above its rate, when it sets no `burst` of its own; 0 means one second's
    /// worth.
    pub source_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            drain_deadline_ms: 15_000,
            drain_grace_ms: 2_000,
            retry_after_s: 5,
            request_deadline_ms: 9_000,
            max_header_bytes: 64 * 1024,
            idle_timeout_ms: 30_000,
            max_connections: 4096,
            max_connections_per_peer: 1024,
            max_concurrent_streams: 8,
            max_requests_in_progress: 4096,
            max_requests_in_progress_per_peer: 512,
            max_body_buffer_bytes: 256 * 1024 * 1024,
            max_costly_verifications_per_source: default_verifications_per_source(),
            peer_rate_per_s: 0.0,
            peer_burst: 0,
            peer_max_wait_ms: 1_000,
            source_rate_per_s: 0.0,
            source_burst: 0,
        }
    }
}

/// Default body limit: a little under the broker's default `message.max.bytes` (1 MiB), so an accepted body
/// always fits in one record. Raise it together with the inbound, retry and DLQ topics' `max.message.bytes`
/// (docs/operations.md, "Topic sizes").
pub const DEFAULT_MAX_BODY_BYTES: usize = 1_000_000;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    /// Served at `POST /webhooks/{name}`. Required, like `scheme`: empty, it is refused when the source is built.
    pub name: String,
    /// Signature scheme name (see `hookline_signature::SCHEME_NAMES`). `none` accepts unsigned requests:
    /// an explicit opt-in for trusted internal senders, logged as a warning at every (re)load.
    pub scheme: String,
    /// Secrets tried in order; more than one during a rotation. Required by every scheme but `none`.
    pub secrets: Vec<SecretRef>,
    pub max_body_bytes: usize,
    /// Timestamp tolerance in seconds, both directions; default: the scheme's own (Stripe, Slack, Standard
    /// Webhooks, HubSpot 300, Twitch 600, Linear 60, Paddle 5; Zoom none).
    pub tolerance_s: Option<u64>,
    /// Kafka topic for this source's events; default `kafka.inbound_topic`.
    pub topic: Option<String>,
    /// Where the event id (the dedupe key) comes from; default: the scheme's.
    pub event_id: Option<FieldSource>,
    /// Where the event type comes from; default: the scheme's.
    pub event_type: Option<FieldSource>,
    /// Whether a header the signature does not cover may give the event type (GitHub's `X-GitHub-Event`,
    /// Shopify's `X-Shopify-Topic`, WooCommerce's `X-WC-Webhook-Topic`, ...). Required (`true` or `false`) for a
    /// source whose type could come from such a header, which is refused until it chooses: `true` routes on it,
    /// though a captured delivery re-sent with a forged value picks the route of the event's first copy; `false`
    /// takes the type from signed bytes only (docs/security.md).
    pub type_from_header: Option<bool>,
    /// Where the ordering key comes from: `{ header = "..." }` or `{ json_pointer = "/data/object/id" }` into the
    /// verified body. Events of one key are handled in order (the record is keyed by it, and it rides in
    /// `hookline-ordering-key`); a request without the value is keyed by its event id, as if the source had none.
    pub ordering_key: Option<FieldSource>,
    /// Request headers carried into Kafka, each as a record header named `http-` + its
    /// lowercase name.
    pub forward_headers: Vec<String>,
    /// Allow `forward_headers` to carry the signature header of a scheme that signs no timestamp (GitHub's
    /// `X-Hub-Signature-256`, Shopify's, WooCommerce's, Twilio's, ...). Off by default: such a body and signature
    /// are a delivery anyone can re-send at any time, and in Kafka (the DLQ keeps records for ever) every reader
    /// of the topics, the DLQ and the replayer's console would hold one. Turn it on only for a downstream that
    /// must verify the provider's signature itself, and accept that every DLQ reader can replay the event once
    /// `dedupe_ttl_s` has passed.
    pub forward_untimed_signature: bool,
    /// The URL the provider sends to, as the provider sees it (scheme, host, path; no query): signed by Twilio,
    /// Square and HubSpot, and required for them. The request's query string is appended.
    pub public_url: Option<String>,
    /// Settings of the generic HMAC scheme (`scheme = "hmac"`).
    pub hmac: Option<GenericHmacOptions>,
    /// Settings of the structured-header family (`scheme = "structured"`).
    pub structured: Option<StructuredOptions>,
    /// Settings of the body-fields family (`scheme = "body_fields"`).
    pub body_fields: Option<BodyFieldsOptions>,
    /// Settings of the token family (`scheme = "token"`).
    pub token: Option<TokenOptions>,
    /// Settings of the JWT family (`scheme = "jwt"`).
    pub jwt: Option<JwtOptions>,
    /// Settings of the `paypal` scheme: the REST credentials its events are confirmed with, or the opt-in to its
    /// CRC-bound signature alone (docs/security.md, "PayPal").
    pub paypal: Option<crate::paypal_api::PayPalOptions>,
    /// Must be `true` for a token scheme (`token` and its presets: Okta, Postmark, Telegram, ...): a shared token
    /// proves who sent a request but not what it holds, and does not stop a replay (docs/security.md).
    pub allow_token: bool,
    /// Handshakes answered besides the scheme's own (`meta_hub`, `okta`, `x_crc`, `challenge_echo`,
    /// `graph_validation`, `event_grid`); a preset turns on its provider's.
    pub handshakes: Vec<Challenge>,
    /// Meta's verify token (`hub.verify_token`), checked by the `meta_hub` handshake; references like `secrets`.
    pub verify_tokens: Vec<SecretRef>,
    /// The answer to an accepted request instead of `202 {"status":"accepted",...}` (Adyen: `[accepted]`).
    pub reply: Option<ReplyConfig>,
    /// Whether the request span links to a W3C `traceparent` sent with the request. It never continues it: the
    /// span starts before the request is verified, and a header must not choose the trace (and its sampling) of our
    /// spans. Turn it on only for a sender inside your own tracing (an internal service behind `scheme = "none"` or
    /// your own proxy).
    pub trust_traceparent: bool,
    /// Verified requests per second this source may send (its quota, see `crate::quota`); past its burst, 429
    /// `quota_exceeded` with `Retry-After`. Absent: `limits.source_rate_per_s`; 0: unlimited, whatever the default.
    pub rate_per_s: Option<f64>,
    /// Requests this source may send at once above its rate; absent: `limits.source_burst`; 0: one second's worth.
    pub burst: Option<u32>,
}

/// `reply = { status = 200, content_type = "text/plain", body = "[accepted]" }`: what an accepted request is
/// answered, once the broker acknowledged it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyConfig {
    /// A 2xx status.
    pub status: u16,
    /// Default `text/plain; charset=utf-8`; ignored without a body.
    #[serde(default = "default_reply_content_type")]
    pub content_type: String,
    #[serde(default)]
    pub body: String,
}

fn default_reply_content_type() -> String {
    "text/plain; charset=utf-8".to_owned()
}

impl SourceConfig {
    /// A source with the given name, scheme and secrets and every other setting at its default.
    pub fn new(name: impl Into<String>, scheme: impl Into<String>, secrets: Vec<SecretRef>) -> Self {
        Self { name: name.into(), scheme: scheme.into(), secrets, ..Self::default() }
    }
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            scheme: String::new(),
            secrets: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            tolerance_s: None,
            topic: None,
            event_id: None,
            event_type: None,
            type_from_header: None,
            ordering_key: None,
            forward_headers: Vec::new(),
            forward_untimed_signature: false,
            public_url: None,
            hmac: None,
            structured: None,
            body_fields: None,
            token: None,
            jwt: None,
            paypal: None,
            allow_token: false,
            handshakes: Vec::new(),
            verify_tokens: Vec::new(),
            reply: None,
            trust_traceparent: false,
            rate_per_s: None,
            burst: None,
        }
    }
}

/// Half the cores (at least one): a public-key flood on one source leaves the others the rest.
pub fn default_verifications_per_source() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1))
}

impl GatewayConfig {
    /// Defaults, then the file (if any), then environment overrides. Nothing is checked or built here: that is
    /// [`crate::load::Loaded::build`], which a config must pass before it serves.
    pub fn read(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config: Self = match path {
            Some(path) => config::load_file(path)?,
            None => Self::default(),
        };
        config.kafka.apply_env();
        config::env_override(env::LISTEN_ADDR, &mut config.listen_addr);
        config::env_override(env::ADMIN_ADDR, &mut config.admin_addr);
        Ok(config)
    }

    /// Adds every problem of the settings that need nothing loaded or built (sources and secrets are checked by
    /// building them).
    pub(crate) fn check(&self, problems: &mut Problems) {
        self.kafka.validate(problems);
        self.telemetry.validate(problems);
        for problem in self.key_fetch.problems() {
            problems.check(false, problem);
        }
        problems.check(self.limits.max_in_flight > 0, "limits.max_in_flight must be positive");
        problems.check(
            self.producer.batch_linger_ms.is_finite() && (0.0..=1_000.0).contains(&self.producer.batch_linger_ms),
            "producer.batch_linger_ms must be between 0 and 1000",
        );
        problems.check(!self.sources.is_empty(), "no [[sources]] configured: the gateway would serve nothing");
        problems.check(
            (1_000..=120_000).contains(&self.limits.request_deadline_ms),
            "limits.request_deadline_ms must be between 1000 and 120000",
        );
        problems.check(self.limits.max_header_bytes >= 8192, "limits.max_header_bytes must be at least 8192");
        problems.check(self.limits.max_connections > 0, "limits.max_connections must be positive");
        problems.check(self.limits.max_connections_per_peer > 0, "limits.max_connections_per_peer must be positive");
        problems.check(
            self.limits.peer_rate_per_s.is_finite() && self.limits.peer_rate_per_s >= 0.0,
            "limits.peer_rate_per_s must be 0 (off) or a positive number",
        );
        problems.check(self.limits.peer_max_wait_ms <= 60_000, "limits.peer_max_wait_ms must be at most 60000");
        problems.check(self.limits.max_concurrent_streams > 0, "limits.max_concurrent_streams must be positive");
        problems.check(self.limits.max_requests_in_progress > 0, "limits.max_requests_in_progress must be positive");
        problems.check(
            self.limits.max_requests_in_progress_per_peer > 0,
            "limits.max_requests_in_progress_per_peer must be positive",
        );
        problems.check(
            self.limits.header_read_timeout_ms > 0 && self.limits.idle_timeout_ms > 0,
            "limits.header_read_timeout_ms and limits.idle_timeout_ms must be positive",
        );
        let largest_body = self.sources.iter().map(|source| source.max_body_bytes).max().unwrap_or(0);
        problems.check(
            self.limits.max_body_buffer_bytes >= largest_body,
            format!(
                "limits.max_body_buffer_bytes ({}) is below the largest source max_body_bytes ({largest_body})",
                self.limits.max_body_buffer_bytes
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example gateway config of docs/configuration/gateway.md: it parses, names every scheme, and each source
    /// validates once its secrets point at files holding a key of the right shape.
    #[test]
    fn configuration_doc_gateway_example_is_valid_and_covers_every_scheme() {
        let doc = include_str!("../../docs/configuration/gateway.md");
        let start = doc.find("## Example: gateway.toml").expect("gateway example heading");
        let block = doc[start..].split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("block");
        let config: GatewayConfig =
            config::parse_str(block, "docs/configuration/gateway.md").expect("the example parses");
        let schemes: std::collections::HashSet<&str> = config.sources.iter().map(|s| s.scheme.as_str()).collect();
        for name in hookline_signature::SCHEME_NAMES {
            assert!(schemes.contains(name), "the documented example has no `{name}` source");
        }
        let directory = std::env::temp_dir().join(format!("hookline-config-doc-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        for source in &config.sources {
            let key = match source.scheme.as_str() {
                "standard_webhooks" | "svix" | "clerk" | "resend" | "gitlab_signing" => {
                    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
                }
                "discord" => "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
                "adyen" => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
                "sns" => "arn:aws:sns:us-east-1:123456789012:orders",
                "google_pubsub" => "pubsub-push@orders-project.iam.gserviceaccount.com",
                "plaid" | "plaid_sandbox" => "60e3ee4019a2a0001a2b3c4d:a1b2c3d4e5f60718293a4b5c6d7e8f",
                "sendgrid" => {
                    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
                }
                _ => "a-secret-of-sixteen-bytes-or-more",
            };
            let secrets = source
                .secrets
                .iter()
                .map(|secret| {
                    let path = directory.join(format!("{}-{}", source.name, secret.id));
                    std::fs::write(&path, key).unwrap();
                    SecretRef { env: None, file: Some(path.display().to_string()), ..secret.clone() }
                })
                .collect();
            let verify_tokens = source
                .verify_tokens
                .iter()
                .map(|token| {
                    let path = directory.join(format!("{}-verify-{}", source.name, token.id));
                    std::fs::write(&path, "a-verify-token").unwrap();
                    SecretRef { env: None, file: Some(path.display().to_string()), ..token.clone() }
                })
                .collect();
            let paypal = source.paypal.clone().map(|mut paypal| {
                paypal.api_credentials = paypal.api_credentials.map(|credentials| {
                    let path = directory.join(format!("{}-api-{}", source.name, credentials.id));
                    std::fs::write(&path, "AZ-client-id:EL-client-secret").unwrap();
                    SecretRef { env: None, file: Some(path.display().to_string()), ..credentials }
                });
                paypal
            });
            let source = SourceConfig { secrets, verify_tokens, paypal, ..source.clone() };
            if let Err(problems) = crate::source::Source::from_config(&source, &config.kafka.inbound_topic) {
                panic!("documented source `{}`: {problems:?}", source.name);
            }
        }
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn a_batching_linger_outside_0_to_1000_ms_is_a_problem_and_the_default_is_not() {
        let problems_of = |batch_linger_ms: f64| {
            let config = GatewayConfig {
                producer: ProducerConfig { batch_linger_ms, ..ProducerConfig::default() },
                ..GatewayConfig::default()
            };
            let mut problems = Problems::default();
            config.check(&mut problems);
            problems.into_lines().into_iter().filter(|line| line.contains("producer.batch_linger_ms")).count()
        };
        assert_eq!(problems_of(ProducerConfig::default().batch_linger_ms), 0);
        assert_eq!(problems_of(0.0), 0);
        assert_eq!(problems_of(0.5), 0);
        assert_eq!(problems_of(-1.0), 1);
        assert_eq!(problems_of(f64::NAN), 1);
        assert_eq!(problems_of(5_000.0), 1);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let parsed = config::parse_str::<GatewayConfig>("listen_adr = \"x\"", "test");
        assert!(matches!(parsed, Err(ConfigError::Parse { .. })));
    }
}

impl GatewayConfig {
    /// The effective config as `--print-config` prints it: every default applied, inline credentials redacted
    /// (secret references, an env var name or a file path, are not secrets and stay).
    pub fn effective(&self) -> Result<config::Table, config::PrintError> {
        config::effective_table(self)
    }
}

#[cfg(test)]
mod effective_tests {
    use super::*;

    #[test]
    fn the_effective_config_has_every_default_and_reads_back_the_same() {
        let parsed: GatewayConfig = config::parse_str(
            "[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [{ id = \"a\", env = \"GH_SECRET\" }]\n",
            "test",
        )
        .unwrap();
        let table = parsed.effective().unwrap();
        let limits = table["limits"].as_table().unwrap();
        assert_eq!(limits["drain_grace_ms"].as_integer(), Some(Limits::default().drain_grace_ms as i64));
        assert_eq!(
            table["kafka"]["produce_timeout_ms"].as_integer(),
            Some(KafkaConfig::default().produce_timeout_ms as i64)
        );
        let source = &table["sources"][0];
        assert_eq!(source["max_body_bytes"].as_integer(), Some(DEFAULT_MAX_BODY_BYTES as i64));
        assert_eq!(source["secrets"][0]["env"].as_str(), Some("GH_SECRET"), "a reference is not a secret");
        let printed = config::effective_toml(&parsed).unwrap();
        let again: GatewayConfig = config::parse_str(&printed, "printed").unwrap();
        assert_eq!(config::effective_toml(&again).unwrap(), printed);
    }
}
