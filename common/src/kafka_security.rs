//! How every Kafka client of hookline authenticates the brokers and itself: `[kafka.tls]` (a CA file for a private
//! CA, a client certificate for mutual TLS) and `[kafka.sasl]` (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with OIDC
//! client credentials), turned into librdkafka settings in one place ([`apply`]), the `kafka.properties` keys that
//! would carry a credential inline or fight these settings ([`refused_security_property`]), and the start-up
//! question that turns a broker refusing us (bad password, untrusted CA, expired certificate) into one clear error
//! instead of a service that waits forever ([`check_broker_accepts`]).
//!
//! `security.protocol` follows from what is set: `[kafka.sasl]` means `SASL_SSL` (SASL is never sent without TLS:
//! there is no `SASL_PLAINTEXT`), `[kafka.tls]` alone means `SSL`, neither means `PLAINTEXT`. Credentials are
//! [`SecretRef`]s, read when a client is built, never printed.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, ClientContext,
    config::RDKafkaLogLevel,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
    error::{KafkaError, RDKafkaErrorCode},
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use serde::{Deserialize, Serialize};

use crate::config::{KafkaConfig, Problems, SecretRef};

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

/// The `security.protocol` a config implies.
pub fn security_protocol(kafka: &KafkaConfig) -> &'static str {
    match (&kafka.tls, &kafka.sasl) {
        (_, Some(_)) => "SASL_SSL",
        (Some(_), None) => "SSL",
        (None, None) => "PLAINTEXT",
    }
}

/// Whether the config asks the brokers to authenticate us or themselves (TLS or SASL).
pub fn is_secured(kafka: &KafkaConfig) -> bool {
    kafka.tls.is_some() || kafka.sasl.is_some()
}

/// `kafka.properties` keys that carry a credential inline or would fight `[kafka.tls]` / `[kafka.sasl]`, each with
/// the key to use instead.
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
];

/// Why `key` may not be set through `kafka.properties` because a security setting owns it, if so.
pub fn refused_security_property(key: &str) -> Option<&'static str> {
    let key = key.trim().to_ascii_lowercase();
    REFUSED_SECURITY_PROPERTIES.iter().find(|(refused, _)| *refused == key).map(|(_, why)| *why)
}

/// Checks `[kafka.tls]` and `[kafka.sasl]`: the files exist and parse, the secrets can be read, each mechanism has
/// what it needs. One line per problem.
pub fn validate(kafka: &KafkaConfig, problems: &mut Problems) {
    if let Some(tls) = &kafka.tls {
        validate_tls(tls, problems);
    }
    if let Some(sasl) = &kafka.sasl {
        validate_sasl(sasl, problems);
    }
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

/// Sets `security.protocol` and the TLS and SASL settings of `kafka` on a client's config, reading the secrets
/// now. A secret that cannot be read any more (validation read it at start) is logged, without its value, and left
/// out: the broker then refuses the client, which [`check_broker_accepts`] and the clients' error logs report.
pub fn apply(config: &mut ClientConfig, kafka: &KafkaConfig) {
    if !is_secured(kafka) {
        return;
    }
    config.set("security.protocol", security_protocol(kafka));
    if let Some(tls) = &kafka.tls {
        if let Some(ca_file) = &tls.ca_file {
            config.set("ssl.ca.location", ca_file);
        }
        if let Some(cert_file) = &tls.client_cert_file {
            config.set("ssl.certificate.location", cert_file);
        }
        if let Some(key) = &tls.client_key {
            // A file is handed over by path (librdkafka reads it); only an environment secret is copied in.
            match (&key.file, &key.env) {
                (Some(path), None) => {
                    config.set("ssl.key.location", path);
                }
                _ => set_secret(config, "ssl.key.pem", "kafka.tls.client_key", key),
            }
        }
    }
    if let Some(sasl) = &kafka.sasl {
        config.set("sasl.mechanisms", sasl.mechanism.name());
        if let Some(username) = &sasl.username {
            config.set("sasl.username", username);
        }
        if let Some(password) = &sasl.password {
            set_secret(config, "sasl.password", "kafka.sasl.password", password);
        }
        if sasl.mechanism == SaslMechanism::OauthBearer {
            config.set("sasl.oauthbearer.method", "oidc");
            for (key, value) in [
                ("sasl.oauthbearer.token.endpoint.url", &sasl.token_endpoint_url),
                ("sasl.oauthbearer.client.id", &sasl.client_id),
                ("sasl.oauthbearer.scope", &sasl.scope),
            ] {
                if let Some(value) = value {
                    config.set(key, value);
                }
            }
            if let Some(secret) = &sasl.client_secret {
                set_secret(config, "sasl.oauthbearer.client.secret", "kafka.sasl.client_secret", secret);
            }
        }
    }
}

fn set_secret(config: &mut ClientConfig, property: &str, config_key: &str, secret: &SecretRef) {
    match secret.load().map(String::from_utf8) {
        Ok(Ok(value)) => {
            config.set(property, value);
        }
        Ok(Err(_)) => tracing::error!(key = config_key, secret = %secret.id, "Kafka secret is not UTF-8; left out"),
        Err(error) => tracing::error!(key = config_key, error = %error, "cannot read a Kafka secret; left out"),
    }
}

/// How long [`check_broker_accepts`] waits for an answer before leaving an unreachable broker to the service's
/// usual waiting.
pub const ACCEPT_CHECK_WAIT: Duration = Duration::from_secs(10);

/// Asks the brokers for metadata with `kafka`'s security settings and fails with one clear error if they refuse
/// us: a failed SASL authentication, a TLS handshake that fails (an untrusted CA, a host name that does not match,
/// a client certificate the broker refuses). librdkafka reports these only through its error callback and keeps
/// retrying forever, so without this a service with a wrong password would wait, unready, for ever.
///
/// A broker that answers is fine; a broker that is not reachable within `wait` is left to the service's usual
/// waiting (an outage is not a configuration error). Does nothing for a `PLAINTEXT` config.
pub async fn check_broker_accepts(kafka: &KafkaConfig, wait: Duration) -> Result<(), KafkaError> {
    if !is_secured(kafka) {
        return Ok(());
    }
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.brokers)
        .set("reconnect.backoff.max.ms", "1000")
        .set("group.id", "hookline-accept-check")
        .set_log_level(RDKafkaLogLevel::Emerg);
    apply(&mut config, kafka);
    for (key, value) in kafka.properties.iter().filter(|(key, _)| crate::config::refused_property(key).is_none()) {
        config.set(key, value);
    }
    let context = RefusalContext::default();
    let refusal = context.refusal.clone();
    let consumer: BaseConsumer<RefusalContext> = config.create_with_context(context)?;
    let protocol = security_protocol(kafka);
    let brokers = kafka.brokers.clone();
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + wait;
        loop {
            let answered = consumer.fetch_metadata(None, Duration::from_millis(500)).is_ok();
            // Errors reach the context's error callback only when the client is polled.
            let _ = consumer.poll(Duration::from_millis(100));
            if let Some(reason) = refusal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
                return Err(KafkaError::ClientCreation(format!(
                    "the Kafka brokers {brokers} refuse hookline's {protocol} connection ({reason}); check \
                     [kafka.tls] and [kafka.sasl]"
                )));
            }
            if answered {
                return Ok(());
            }
            if Instant::now() >= deadline {
                tracing::warn!(brokers = %brokers, "Kafka brokers not reachable yet; the service waits for them");
                return Ok(());
            }
        }
    })
    .await
    .map_err(|error| KafkaError::ClientCreation(format!("broker check task failed: {error}")))?
}

/// Keeps the first error that says the broker refused us, rather than that it could not be reached.
#[derive(Debug, Default)]
struct RefusalContext {
    refusal: Arc<Mutex<Option<String>>>,
}

/// Whether an error from librdkafka's error callback means "refused" (a configuration the broker never accepts)
/// rather than "unreachable".
fn is_refusal(error: &KafkaError, reason: &str) -> bool {
    let lower = reason.to_ascii_lowercase();
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL) => true,
        Some(RDKafkaErrorCode::SaslAuthenticationFailed) => true,
        // With TLS 1.3 a refused client certificate arrives after the handshake, as an alert on the first read.
        Some(RDKafkaErrorCode::BrokerTransportFailure) => lower.contains("ssl") && lower.contains("alert"),
        _ => false,
    }
}

impl ClientContext for RefusalContext {
    fn log(&self, _: RDKafkaLogLevel, _: &str, _: &str) {}

    fn error(&self, error: KafkaError, reason: &str) {
        if is_refusal(&error, reason) {
            let mut refusal = self.refusal.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            refusal.get_or_insert_with(|| reason.to_owned());
        }
    }
}

impl ConsumerContext for RefusalContext {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigError, effective_toml};

    fn write_temp(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("hookline-kafka-security-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    }

    /// The problems `validate` finds in `kafka`, given a record key (these tests are about TLS and SASL).
    fn problems_of(kafka: &KafkaConfig) -> Vec<String> {
        let mut kafka = kafka.clone();
        kafka.record_auth.keys = vec![crate::config::SecretRef::from_env("k1", "HOOKLINE_RECORD_KEY_K1")];
        let mut problems = Problems::default();
        kafka.validate(&mut problems);
        match problems.into_result() {
            Ok(()) => Vec::new(),
            Err(ConfigError::Invalid(problems)) => problems,
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn the_protocol_follows_from_what_is_set() {
        let mut kafka = KafkaConfig::default();
        assert_eq!(security_protocol(&kafka), "PLAINTEXT");
        let mut config = ClientConfig::new();
        apply(&mut config, &kafka);
        assert_eq!(config.get("security.protocol"), None, "a plaintext config is left as it was");
        kafka.tls = Some(KafkaTlsConfig::default());
        assert_eq!(security_protocol(&kafka), "SSL");
        kafka.tls = None;
        kafka.sasl = Some(KafkaSaslConfig {
            mechanism: SaslMechanism::ScramSha512,
            username: Some("hookline".into()),
            password: Some(SecretRef::from_env("kafka", "HOOKLINE_TEST_UNSET_VARIABLE")),
            token_endpoint_url: None,
            client_id: None,
            client_secret: None,
            scope: None,
        });
        assert_eq!(security_protocol(&kafka), "SASL_SSL", "SASL is never sent without TLS");
    }

    #[test]
    fn scram_and_mutual_tls_settings_reach_librdkafka_and_only_references_are_printed() {
        let password = write_temp("password", "hunter2\n");
        let key = write_temp("client.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        let kafka = KafkaConfig {
            tls: Some(KafkaTlsConfig {
                ca_file: Some("/etc/hookline/ca.pem".into()),
                client_cert_file: Some("/etc/hookline/client.pem".into()),
                client_key: Some(SecretRef::from_file("client-key", key.clone())),
            }),
            sasl: Some(KafkaSaslConfig {
                mechanism: SaslMechanism::ScramSha512,
                username: Some("hookline".into()),
                password: Some(SecretRef::from_file("kafka-password", password.clone())),
                token_endpoint_url: None,
                client_id: None,
                client_secret: None,
                scope: None,
            }),
            ..KafkaConfig::default()
        };
        for config in [crate::kafka::producer_config(&kafka), crate::kafka::consumer_config(&kafka, "g")] {
            assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
            assert_eq!(config.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
            assert_eq!(config.get("sasl.username"), Some("hookline"));
            assert_eq!(config.get("sasl.password"), Some("hunter2"));
            assert_eq!(config.get("ssl.ca.location"), Some("/etc/hookline/ca.pem"));
            assert_eq!(config.get("ssl.certificate.location"), Some("/etc/hookline/client.pem"));
            assert_eq!(config.get("ssl.key.location"), Some(key.as_str()), "a key file is passed by path");
            assert!(!format!("{config:?}").contains("hunter2"));
        }
        let printed = effective_toml(&kafka).expect("print");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains(&password), "the reference is printed: {printed}");
        assert!(!format!("{kafka:?}").contains("hunter2"));
    }

    #[test]
    fn oauthbearer_uses_oidc_client_credentials() {
        let secret = write_temp("client-secret", "s3cret");
        let kafka = KafkaConfig {
            sasl: Some(KafkaSaslConfig {
                mechanism: SaslMechanism::OauthBearer,
                username: None,
                password: None,
                token_endpoint_url: Some("https://idp.example.com/oauth2/token".into()),
                client_id: Some("hookline".into()),
                client_secret: Some(SecretRef::from_file("oidc", secret)),
                scope: Some("kafka".into()),
            }),
            ..KafkaConfig::default()
        };
        assert_eq!(problems_of(&kafka), Vec::<String>::new());
        let config = crate::kafka::admin_config(&kafka);
        assert_eq!(config.get("sasl.mechanisms"), Some("OAUTHBEARER"));
        assert_eq!(config.get("sasl.oauthbearer.method"), Some("oidc"));
        assert_eq!(config.get("sasl.oauthbearer.client.secret"), Some("s3cret"));
        assert_eq!(config.get("sasl.oauthbearer.token.endpoint.url"), Some("https://idp.example.com/oauth2/token"));
        assert_eq!(config.get("sasl.oauthbearer.scope"), Some("kafka"));
        let plain_http = KafkaConfig {
            sasl: kafka.sasl.clone().map(|sasl| KafkaSaslConfig {
                token_endpoint_url: Some("http://idp.example.com/token".into()),
                ..sasl
            }),
            ..KafkaConfig::default()
        };
        assert!(problems_of(&plain_http).iter().any(|problem| problem.contains("must be https://")));
    }

    #[test]
    fn credentials_in_properties_are_refused_naming_the_key_to_use() {
        let mut kafka = KafkaConfig::default();
        for key in ["sasl.password", "SASL.JAAS.CONFIG", "ssl.key.pem", "security.protocol", "sasl.mechanism"] {
            kafka.properties.insert(key.to_owned(), "x".to_owned());
        }
        let problems = problems_of(&kafka);
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("\"sasl.password\"") && p.contains("kafka.sasl.password")));
        assert!(problems.iter().any(|p| p.contains("\"ssl.key.pem\"") && p.contains("kafka.tls.client_key")));
        assert!(problems.iter().any(|p| p.contains("\"security.protocol\"") && p.contains("[kafka.tls]")));
        let config = crate::kafka::producer_config(&kafka);
        assert_eq!(config.get("sasl.password"), None, "never applied either");
    }

    #[test]
    fn unreadable_or_wrong_files_are_config_errors() {
        let not_pem = write_temp("ca.pem", "this is not a certificate\n");
        let kafka = KafkaConfig {
            tls: Some(KafkaTlsConfig {
                ca_file: Some(not_pem.clone()),
                client_cert_file: Some("/nonexistent/client.pem".into()),
                client_key: Some(SecretRef::from_env("client-key", "HOOKLINE_TEST_UNSET_VARIABLE")),
            }),
            sasl: Some(KafkaSaslConfig {
                mechanism: SaslMechanism::Plain,
                username: None,
                password: None,
                token_endpoint_url: None,
                client_id: Some("x".into()),
                client_secret: None,
                scope: None,
            }),
            ..KafkaConfig::default()
        };
        let problems = problems_of(&kafka);
        let expected = [
            format!("kafka.tls.ca_file: {not_pem} holds no PEM certificate"),
            "kafka.tls.client_cert_file: cannot read /nonexistent/client.pem".to_owned(),
            "kafka.tls.client_key: secret `client-key`: environment variable".to_owned(),
            "kafka.sasl.password is required with PLAIN".to_owned(),
            "kafka.sasl.username is required with PLAIN".to_owned(),
            "kafka.sasl.client_id is for OAUTHBEARER, not PLAIN".to_owned(),
        ];
        for line in &expected {
            assert!(problems.iter().any(|problem| problem.starts_with(line.as_str())), "{line} in {problems:?}");
        }
        assert_eq!(problems.len(), expected.len(), "{problems:?}");
    }

    #[test]
    fn refusals_are_told_from_outages() {
        let refused = [
            (KafkaError::Global(RDKafkaErrorCode::Authentication), "SASL authentication error: invalid credentials"),
            (KafkaError::Global(RDKafkaErrorCode::SSL), "SSL handshake failed: certificate verify failed"),
            (
                KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
                "SSL transport error: ssl/tls alert certificate expired",
            ),
        ];
        for (error, reason) in refused {
            assert!(is_refusal(&error, reason), "{reason}");
        }
        let outages = [
            (KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "Connect to ipv4#127.0.0.1:1 failed"),
            (KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down"),
        ];
        for (error, reason) in outages {
            assert!(!is_refusal(&error, reason), "{reason}");
        }
    }
}
