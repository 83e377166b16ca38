//! How every Kafka client of hookline authenticates the brokers and itself: `[kafka.tls]` (a CA file for a private
//! CA, a client certificate for mutual TLS) and `[kafka.sasl]` (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with OIDC
//! client credentials), described and checked in [`crate::config`], turned into librdkafka settings in one place
//! ([`apply`]), and the start-up question that turns a broker refusing us (bad password, untrusted CA, expired
//! certificate) into one clear error instead of a service that waits forever ([`check_broker_accepts`]).
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

use crate::config::{KafkaConfig, SaslMechanism, SecretRef};

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
    use crate::config::{ConfigError, KafkaSaslConfig, KafkaTlsConfig, Problems, effective_toml};

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
