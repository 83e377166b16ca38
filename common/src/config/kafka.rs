//! `[kafka]`: the brokers, the topics, the librdkafka properties an operator may add (and those refused because a
//! guarantee or a security setting owns them), `[kafka.tls]` and `[kafka.sasl]` with their checks, and
//! `[kafka.record_auth]`. Turning these into client settings is [`crate::kafka`]'s and [`crate::kafka_security`]'s.
//!
//! `security.protocol` follows from what is set: `[kafka.sasl]` means `SASL_SSL` (SASL is never sent without TLS:
//! there is no `SASL_PLAINTEXT`), `[kafka.tls]` alone means `SSL`, neither means `PLAINTEXT`. Credentials are
//! [`SecretRef`]s, read when a client is built, never printed.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde::{Deserialize, Serialize};

use super::{Problems, RecordAuthConfig, SecretRef, env, redact};
use crate::wire::default_topic;

/// How to reach Kafka, and the topic for each role.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list.
    pub brokers: String,
    pub inbound_topic: String,
    pub dlq_topic: String,
    pub dlq_status_topic: String,
    /// The base name of the consumer services' retry topics: service `S` parks events between handler attempts
    /// in `<retry_topic>.<S>`, which only it writes and reads. (Before services had names, every consumer shared
    /// this topic itself; an upgraded service drains what is left in it.)
    pub retry_topic: String,
    /// Compacted: operators' instructions to the consumer services (route pauses, [`crate::control`]), written
    /// by the replayer and read whole by every consumer.
    pub control_topic: String,
    /// How long the gateway waits for the broker's acknowledgement before answering 503.
    /// Keep it below the providers' HTTP timeouts (GitHub: 10 s).
    pub produce_timeout_ms: u64,
    /// Consumer group of the consumer service (one group per service; also the service's name unless the
    /// consumer sets `service.name`).
    pub group_id: String,
    /// Extra librdkafka properties (for example TLS or SASL settings), applied last. Keys that would break a
    /// guarantee (`acks`, `enable.idempotence`, `enable.auto.offset.store`, ...: see
    /// [`REFUSED_PROPERTIES`]) are refused. Printed with credentials redacted.
    #[serde(serialize_with = "redact::kafka_properties")]
    pub properties: std::collections::BTreeMap<String, String>,
    /// `[kafka.record_auth]`: the internal keys every record is signed and verified with.
    pub record_auth: RecordAuthConfig,
    /// `[kafka.tls]`: TLS to the brokers (applied by [`crate::kafka_security`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<KafkaTlsConfig>,
    /// `[kafka.sasl]`: SASL authentication, always over TLS (applied by [`crate::kafka_security`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSaslConfig>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:19092".to_owned(),
            inbound_topic: default_topic::INBOUND.to_owned(),
            dlq_topic: default_topic::DEAD_LETTER.to_owned(),
            dlq_status_topic: default_topic::DEAD_LETTER_STATUS.to_owned(),
            retry_topic: default_topic::RETRY.to_owned(),
            control_topic: default_topic::CONTROL.to_owned(),
            produce_timeout_ms: 5_000,
            group_id: "hookline-consumer".to_owned(),
            properties: Default::default(),
            record_auth: Default::default(),
            tls: None,
            sasl: None,
        }
    }
}

/// `kafka.properties` keys that would break a guarantee, each with the guarantee it would break. Refused by
/// [`KafkaConfig::validate`] (and never applied): the producer's
/// acknowledgement settings are what make a 2xx mean "stored", the consumer's offset settings what make
/// processing at-least-once, and the rest are set from their own config keys.
pub const REFUSED_PROPERTIES: &[(&str, &str)] = &[
    ("acks", "a 2xx means every in-sync replica has the event (acks=all)"),
    ("request.required.acks", "a 2xx means every in-sync replica has the event (acks=all)"),
    ("enable.idempotence", "a retried produce is written once (idempotent producer)"),
    ("enable.gapless.guarantee", "the idempotent producer's ordering is managed by hookline"),
    ("max.in.flight.requests.per.connection", "the idempotent producer keeps per-partition order"),
    ("max.in.flight", "the idempotent producer keeps per-partition order"),
    ("retries", "a produce is retried until the produce timeout"),
    ("message.send.max.retries", "a produce is retried until the produce timeout"),
    ("message.timeout.ms", "set it with kafka.produce_timeout_ms, which the gateway's 503 relies on"),
    ("delivery.timeout.ms", "set it with kafka.produce_timeout_ms, which the gateway's 503 relies on"),
    ("transactional.id", "the producer is idempotent, not transactional"),
    ("enable.auto.offset.store", "an offset is stored only after its record was handled (at-least-once)"),
    ("enable.auto.commit", "offsets are committed only once stored after handling"),
    ("auto.offset.reset", "a new consumer group starts from the earliest record, so nothing is skipped"),
    ("isolation.level", "consumers read only committed records"),
    ("partition.assignment.strategy", "the consumer's rebalance handling assumes cooperative-sticky"),
    ("enable.partition.eof", "the consumer does not expect end-of-partition events"),
    ("group.id", "set it with kafka.group_id"),
    ("bootstrap.servers", "set it with kafka.brokers"),
    ("metadata.broker.list", "set it with kafka.brokers"),
];

/// Why `key` may not be set through `kafka.properties`, if it may not.
pub fn refused_property(key: &str) -> Option<&'static str> {
    let lower = key.trim().to_ascii_lowercase();
    REFUSED_PROPERTIES
        .iter()
        .find(|(refused, _)| *refused == lower)
        .map(|(_, why)| *why)
        .or_else(|| refused_security_property(key))
}

impl KafkaConfig {
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(!self.brokers.trim().is_empty(), "kafka.brokers is empty");
        for (key, topic) in [
            ("kafka.inbound_topic", &self.inbound_topic),
            ("kafka.dlq_topic", &self.dlq_topic),
            ("kafka.dlq_status_topic", &self.dlq_status_topic),
            ("kafka.retry_topic", &self.retry_topic),
            ("kafka.control_topic", &self.control_topic),
        ] {
            problems.check(!topic.is_empty(), format!("{key} is empty"));
        }
        problems.check(
            (100..=120_000).contains(&self.produce_timeout_ms),
            "kafka.produce_timeout_ms must be between 100 and 120000",
        );
        problems.check(!self.group_id.is_empty(), "kafka.group_id is empty");
        for key in self.properties.keys() {
            if let Some(why) = refused_property(key) {
                problems.push(format!("kafka.properties.\"{key}\" is refused: {why}"));
            }
        }
        self.record_auth.validate(problems);
        if let Some(tls) = &self.tls {
            validate_tls(tls, problems);
        }
        if let Some(sasl) = &self.sasl {
            validate_sasl(sasl, problems);
        }
    }

    pub fn apply_env(&mut self) {
        if let Ok(brokers) = std::env::var(env::KAFKA_BROKERS) {
            self.brokers = brokers;
        }
    }
}

/// `[kafka.tls]`: talk TLS to the brokers. An empty table means TLS with the system's CA roots.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaTlsConfig {
    /// PEM file of the CA certificates that sign the brokers' certificates (a private CA); the system roots when
    /// absent. The brokers' host names are always verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// PEM file of the client certificate (and its chain) for mutual TLS; needs `client_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<String>,
    /// The client certificate's unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1), a secret reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<SecretRef>,
}

/// SASL mechanisms hookline supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAuth 2 bearer tokens fetched by librdkafka from `token_endpoint_url` with the client-credentials grant.
    #[serde(rename = "OAUTHBEARER")]
    OauthBearer,
}

impl SaslMechanism {
    /// librdkafka's (and Kafka's) name of the mechanism.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OauthBearer => "OAUTHBEARER",
        }
    }
}

/// `[kafka.sasl]`: authenticate with SASL, always over TLS (`SASL_SSL`; `[kafka.tls]` optional).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSaslConfig {
    pub mechanism: SaslMechanism,
    /// PLAIN and SCRAM: the user name (Confluent Cloud: the API key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// PLAIN and SCRAM: the password (Confluent Cloud: the API secret), a secret reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretRef>,
    /// OAUTHBEARER: the identity provider's token endpoint (`https://`; `http://` only on loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_url: Option<String>,
    /// OAUTHBEARER: the client id of the client-credentials grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// OAUTHBEARER: the client secret, a secret reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretRef>,
    /// OAUTHBEARER: the scope to ask for (space-separated), if the provider wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// `kafka.properties` keys that carry a credential inline, would fight `[kafka.tls]` / `[kafka.sasl]`, change TLS
/// trust (the brokers' or the OIDC token endpoint's) or load code into the process, each with the reason or the
/// key to use instead.
const REFUSED_SECURITY_PROPERTIES: &[(&str, &str)] = &[
    ("security.protocol", "it follows from [kafka.tls] (SSL) and [kafka.sasl] (SASL_SSL); set those"),
    ("sasl.mechanism", "set kafka.sasl.mechanism"),
    ("sasl.mechanisms", "set kafka.sasl.mechanism"),
    ("sasl.username", "set kafka.sasl.username"),
    ("sasl.password", "set kafka.sasl.password (a secret reference)"),
    ("sasl.jaas.config", "set [kafka.sasl] (mechanism, username, password as a secret reference)"),
    ("sasl.oauthbearer.method", "kafka.sasl.mechanism = \"OAUTHBEARER\" uses OIDC client credentials"),
    ("sasl.oauthbearer.client.id", "set kafka.sasl.client_id"),
    ("sasl.oauthbearer.client.secret", "set kafka.sasl.client_secret (a secret reference)"),
    ("sasl.oauthbearer.token.endpoint.url", "set kafka.sasl.token_endpoint_url"),
    ("sasl.oauthbearer.scope", "set kafka.sasl.scope"),
    ("sasl.oauthbearer.config", "set kafka.sasl.token_endpoint_url, client_id and client_secret"),
    ("ssl.key.pem", "set kafka.tls.client_key (a secret reference)"),
    ("ssl.key.location", "set kafka.tls.client_key (a secret reference)"),
    ("ssl.key.password", "kafka.tls.client_key must be an unencrypted PEM key, kept in a secret"),
    ("ssl.keystore.location", "set kafka.tls.client_cert_file and kafka.tls.client_key (PEM)"),
    ("ssl.keystore.password", "set kafka.tls.client_cert_file and kafka.tls.client_key (PEM)"),
    ("ssl.certificate.location", "set kafka.tls.client_cert_file"),
    ("ssl.certificate.pem", "set kafka.tls.client_cert_file"),
    ("ssl.ca.location", "set kafka.tls.ca_file"),
    ("ssl.ca.pem", "set kafka.tls.ca_file"),
    ("ssl.endpoint.identification.algorithm", "the brokers' host names are always verified"),
    ("enable.ssl.certificate.verification", "the brokers' certificates are always verified"),
    // Trust for the OIDC token endpoint, which receives the client secret: the system roots only.
    ("https.ca.location", "the OIDC token endpoint is verified against the system roots"),
    ("https.ca.pem", "the OIDC token endpoint is verified against the system roots"),
    ("enable.sasl.oauthbearer.unsecure.jwt", "OAUTHBEARER tokens come from the OIDC token endpoint"),
    // Code loaded into the process, and the TLS parameters librdkafka and OpenSSL choose well by themselves.
    ("plugin.library.paths", "hookline loads no librdkafka plugins"),
    ("ssl.engine.location", "hookline loads no OpenSSL engines"),
    ("ssl.engine.id", "hookline loads no OpenSSL engines"),
    ("ssl.providers", "hookline loads no OpenSSL providers"),
    ("ssl.cipher.suites", "OpenSSL's default cipher suites are used"),
];

/// Why `key` may not be set through `kafka.properties` because a security setting owns it, if so.
pub fn refused_security_property(key: &str) -> Option<&'static str> {
    let key = key.trim().to_ascii_lowercase();
    REFUSED_SECURITY_PROPERTIES.iter().find(|(refused, _)| *refused == key).map(|(_, why)| *why)
}

fn validate_tls(tls: &KafkaTlsConfig, problems: &mut Problems) {
    if let Some(path) = &tls.ca_file {
        if let Err(problem) = read_certificates(path) {
            problems.push(format!("kafka.tls.ca_file: {problem}"));
        }
    }
    match (&tls.client_cert_file, &tls.client_key) {
        (None, None) => {}
        (Some(path), Some(key)) => {
            if let Err(problem) = read_certificates(path) {
                problems.push(format!("kafka.tls.client_cert_file: {problem}"));
            }
            match key.load() {
                Err(problem) => problems.push(format!("kafka.tls.client_key: {problem}")),
                Ok(pem) => {
                    if let Err(problem) = parse_private_key(&pem) {
                        problems.push(format!("kafka.tls.client_key: secret `{}` {problem}", key.id));
                    }
                }
            }
        }
        (Some(_), None) => problems.push("kafka.tls.client_cert_file needs kafka.tls.client_key"),
        (None, Some(_)) => problems.push("kafka.tls.client_key needs kafka.tls.client_cert_file"),
    }
}

fn validate_sasl(sasl: &KafkaSaslConfig, problems: &mut Problems) {
    let mechanism = sasl.mechanism.name();
    let check_secret = |problems: &mut Problems, key: &str, secret: &SecretRef| {
        if let Err(problem) = secret.load() {
            problems.push(format!("kafka.sasl.{key}: {problem}"));
        }
    };
    match sasl.mechanism {
        SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            match &sasl.password {
                Some(password) => check_secret(problems, "password", password),
                None => problems.push(format!("kafka.sasl.password is required with {mechanism}")),
            }
            problems.check(
                sasl.username.as_deref().is_some_and(|name| !name.trim().is_empty()),
                format!("kafka.sasl.username is required with {mechanism}"),
            );
            for (key, set) in [
                ("token_endpoint_url", sasl.token_endpoint_url.is_some()),
                ("client_id", sasl.client_id.is_some()),
                ("client_secret", sasl.client_secret.is_some()),
                ("scope", sasl.scope.is_some()),
            ] {
                problems.check(!set, format!("kafka.sasl.{key} is for OAUTHBEARER, not {mechanism}"));
            }
        }
        SaslMechanism::OauthBearer => {
            match &sasl.client_secret {
                Some(secret) => check_secret(problems, "client_secret", secret),
                None => problems.push("kafka.sasl.client_secret is required with OAUTHBEARER"),
            }
            problems.check(
                sasl.client_id.as_deref().is_some_and(|id| !id.trim().is_empty()),
                "kafka.sasl.client_id is required with OAUTHBEARER",
            );
            match sasl.token_endpoint_url.as_deref() {
                None => problems.push("kafka.sasl.token_endpoint_url is required with OAUTHBEARER"),
                Some(url) => problems.check(
                    url.starts_with("https://") || is_loopback_http(url),
                    format!(
                        "kafka.sasl.token_endpoint_url `{url}` must be https:// (http:// only on 127.0.0.1 or \
                         localhost): the client secret travels in it"
                    ),
                ),
            }
            for (key, set) in [("username", sasl.username.is_some()), ("password", sasl.password.is_some())] {
                problems.check(!set, format!("kafka.sasl.{key} is for PLAIN and SCRAM, not OAUTHBEARER"));
            }
        }
    }
}

fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// Reads a PEM file that must hold at least one certificate.
fn read_certificates(path: &str) -> Result<usize, String> {
    let bytes = std::fs::read(path).map_err(|error| format!("cannot read {path}: {error}"))?;
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        certificate.map_err(|error| format!("{path} is not a PEM certificate file ({error})"))?;
        count += 1;
    }
    if count == 0 {
        return Err(format!("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(count)
}

fn parse_private_key(pem: &[u8]) -> Result<(), String> {
    if pem.windows(b"ENCRYPTED PRIVATE KEY".len()).any(|window| window == b"ENCRYPTED PRIVATE KEY") {
        return Err("is an encrypted private key; give the unencrypted PEM key (kept in a secret)".to_owned());
    }
    PrivateKeyDer::from_pem_slice(pem).map(|_| ()).map_err(|_| "holds no PEM private key".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_that_change_tls_trust_or_load_code_are_refused() {
        for key in [
            "https.ca.location",
            "https.ca.pem",
            "plugin.library.paths",
            "ssl.engine.location",
            "ssl.engine.id",
            "ssl.providers",
            "ssl.cipher.suites",
            "enable.sasl.oauthbearer.unsecure.jwt",
            " SSL.CA.Location ",
        ] {
            assert!(refused_property(key).is_some(), "{key}");
        }
        assert!(refused_property("linger.ms").is_none());
    }
}
