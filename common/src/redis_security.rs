//! Redis over TLS with ACL users: what `[redis]` says about trust (`rediss://`, `redis.tls.ca_file`), the client
//! certificate (`redis.tls.client_cert_file`, its key a secret) and the credentials (`redis.username`, the
//! password a secret, never in the URL), and how an error of Redis is told apart: a configuration Redis can never
//! accept ([`RedisRefusal`]: an untrusted certificate, a missing client certificate, WRONGPASS, NOPERM) is said at
//! start in one line, while an unreachable Redis is waited for by the caller.
//!
//! TLS is rustls with the workspace's ring provider and the Mozilla roots compiled in (`webpki-roots`, as for the
//! alert webhook: the images carry no CA bundle); a `ca_file` replaces those roots, so a private CA is the only
//! one trusted. Verification is never switched off (a `#insecure` URL is refused).
//!
//! The password is read from its secret at every (re)connection, not once: a connection that Redis dropped, or a
//! new one, authenticates with what the secret holds then. Rotating is therefore: add the new password to the ACL
//! user (`ACL SETUSER u >new`, Redis keeps both), update the secret, and remove the old password once every
//! service reconnected or restarted; a live connection stays authenticated as it was.

use std::{path::Path, pin::Pin, sync::Arc};

use redis::{
    BasicAuth, ClientTlsConfig, ErrorKind, RedisError, RedisResult, ServerErrorKind, StreamingCredentialsProvider,
    TlsCertificates,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::config::{Problems, RedisConfig, RedisTls, SecretRef, redact};

/// What `[redis]` needs that only reading files can check: the CA, the client certificate and key, the password.
/// Built at start (a bad one is a configuration problem) and again at each connect.
#[derive(Clone)]
pub struct RedisSecurity {
    tls: Option<TlsCertificates>,
    credentials: Option<SecretCredentials>,
}

impl std::fmt::Debug for RedisSecurity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisSecurity")
            .field("tls", &self.tls.is_some())
            .field("username", &self.credentials.as_ref().map(|credentials| credentials.username.as_str()))
            .finish()
    }
}

/// Reads every file `[redis]` names (CA, client certificate and key, password) and says what is wrong with each:
/// part of a service's build, so such a config fails at start.
pub fn check(config: &RedisConfig, problems: &mut Problems) {
    if let Err(found) = RedisSecurity::load(config) {
        found.into_iter().for_each(|problem| problems.push(problem));
    }
}

impl RedisSecurity {
    /// Reads the CA, the client certificate and key, and the password now; every problem at once.
    pub fn load(config: &RedisConfig) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let tls_urls = config.urls().any(|url| url.starts_with("rediss://"));
        let tls = tls_urls.then(|| load_tls(config.tls.as_ref().cloned().unwrap_or_default(), &mut problems));
        let credentials = config.password.as_ref().map(|password| SecretCredentials {
            username: config.username.clone().unwrap_or_else(|| "default".to_owned()),
            password: password.clone(),
        });
        if let Some(credentials) = &credentials {
            if let Err(problem) = credentials.password.load() {
                problems.push(format!("redis.password: {problem}"));
            }
        }
        if problems.is_empty() { Ok(Self { tls, credentials }) } else { Err(problems) }
    }

    /// A client for one node (`url`) with these certificates. Credentials come from
    /// [`Self::connection_config`] or [`Self::manager_config`], read anew at each connect.
    pub fn client(&self, url: &str) -> RedisResult<redis::Client> {
        match &self.tls {
            Some(certificates) => redis::Client::build_with_tls(url, certificates.clone()),
            None => redis::Client::open(url),
        }
    }

    /// A cluster client builder for `urls` with these certificates and credentials.
    pub fn cluster_builder(&self, urls: Vec<String>) -> redis::cluster::ClusterClientBuilder {
        let mut builder = redis::cluster::ClusterClient::builder(urls);
        if let Some(certificates) = &self.tls {
            builder = builder.certs(certificates.clone());
        }
        if let Some(credentials) = &self.credentials {
            builder = builder.set_credentials_provider(credentials.clone());
        }
        builder
    }

    /// `config` with the credentials provider, for a connection manager.
    pub fn manager_config(&self, config: redis::aio::ConnectionManagerConfig) -> redis::aio::ConnectionManagerConfig {
        match &self.credentials {
            Some(credentials) => config.set_credentials_provider(credentials.clone()),
            None => config,
        }
    }

    /// A connection config with the credentials provider, for a multiplexed connection (the bench).
    pub fn connection_config(&self) -> redis::AsyncConnectionConfig {
        let config = redis::AsyncConnectionConfig::new();
        match &self.credentials {
            Some(credentials) => config.set_credentials_provider(credentials.clone()),
            None => config,
        }
    }
}

/// One multiplexed connection to the single Redis of `config`, with its TLS and credentials (the bench's).
pub async fn multiplexed_connection(config: &RedisConfig) -> RedisResult<redis::aio::MultiplexedConnection> {
    let security = RedisSecurity::load(config).map_err(invalid_settings)?;
    install_crypto_provider();
    security
        .client(config.url.trim())?
        .get_multiplexed_async_connection_with_config(&security.connection_config())
        .await
}

/// [`RedisSecurity::load`]'s problems as a Redis error that [`refusal`] reports.
pub fn invalid_settings(problems: Vec<String>) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "invalid [redis] settings", problems.join("; ")))
}

fn read_file(key: &str, path: &str, problems: &mut Vec<String>) -> Option<Vec<u8>> {
    std::fs::read(Path::new(path)).map_err(|error| problems.push(format!("{key}: cannot read {path}: {error}"))).ok()
}

fn load_tls(tls: RedisTls, problems: &mut Vec<String>) -> TlsCertificates {
    let root_cert = tls.ca_file.as_deref().and_then(|path| {
        let pem = read_file("redis.tls.ca_file", path, problems)?;
        let certificates: Vec<_> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
        let mut roots = rustls::RootCertStore::empty();
        if certificates.is_empty() {
            problems.push(format!("redis.tls.ca_file: {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
            return None;
        }
        for certificate in certificates {
            if let Err(error) = roots.add(certificate) {
                problems.push(format!("redis.tls.ca_file: {path}: not a usable CA certificate: {error}"));
                return None;
            }
        }
        Some(pem)
    });
    let client_tls = match (&tls.client_cert_file, &tls.client_key) {
        (Some(path), Some(key)) => {
            let certificate = read_file("redis.tls.client_cert_file", path, problems).filter(|pem| {
                let found = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).count() > 0;
                if !found {
                    problems.push(format!("redis.tls.client_cert_file: {path} holds no PEM certificate"));
                }
                found
            });
            let key = match key.load() {
                Ok(pem) if PrivateKeyDer::from_pem_slice(&pem).is_ok() => Some(pem),
                Ok(_) => {
                    problems.push(format!(
                        "redis.tls.client_key: secret `{}` holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                        key.id
                    ));
                    None
                }
                Err(problem) => {
                    problems.push(format!("redis.tls.client_key: {problem}"));
                    None
                }
            };
            certificate.zip(key).map(|(client_cert, client_key)| ClientTlsConfig { client_cert, client_key })
        }
        _ => None,
    };
    TlsCertificates { client_tls, root_cert }
}

/// The ACL user and its password secret, read at every (re)connection: each new connection's stream yields the
/// secret's value now, then nothing (the connection stays authenticated as it was).
#[derive(Clone)]
struct SecretCredentials {
    username: String,
    password: SecretRef,
}

impl StreamingCredentialsProvider for SecretCredentials {
    fn subscribe(&self) -> Pin<Box<dyn futures_core::Stream<Item = RedisResult<BasicAuth>> + Send + 'static>> {
        let current = self
            .password
            .load()
            .map(|password| BasicAuth::new(self.username.clone(), String::from_utf8_lossy(&password).into_owned()))
            .map_err(|problem| {
                RedisError::from((ErrorKind::AuthenticationFailed, "redis.password", problem.to_string()))
            });
        Box::pin(OnceThenPending(Some(current)))
    }
}

/// A stream of one item that then never ends.
struct OnceThenPending(Option<RedisResult<BasicAuth>>);

impl futures_core::Stream for OnceThenPending {
    type Item = RedisResult<BasicAuth>;

    fn poll_next(self: Pin<&mut Self>, _context: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        match self.get_mut().0.take() {
            Some(item) => std::task::Poll::Ready(Some(item)),
            None => std::task::Poll::Pending,
        }
    }
}

/// Makes ring the process's rustls provider unless one is installed already: the redis client builds its rustls
/// configuration with the process default, which is ambiguous (and panics) once a dependency enables a second
/// provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A configuration the Redis server will never accept, in one line that says what to change. Not an outage:
/// the caller stops instead of waiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RedisRefusal(pub String);

/// Whether `error` (from connecting or from a command) means Redis refuses this configuration, and if so what to
/// change. `None`: an outage or a transient error, to be waited out.
pub fn refusal(config: &RedisConfig, error: &RedisError) -> Option<RedisRefusal> {
    let user = config.username.as_deref().unwrap_or("default");
    let target = redact::url_password(config.urls().next().unwrap_or(""));
    // The cluster client reports a failed first connection as an I/O error carrying the cause's text only.
    let text = error.to_string();
    let authentication = || {
        format!(
            "redis at {target} refused to authenticate user `{user}` (WRONGPASS: wrong password, unknown or \
             disabled user): check redis.username and the secret of redis.password ({error})"
        )
    };
    let permission = || {
        format!(
            "redis user `{user}` at {target} lacks a permission hookline needs ({error}): grant the ACL in \
             docs/security.md, \"Redis: TLS and ACL users\" (its commands, and keys ~{}:*)",
            config.key_prefix
        )
    };
    let line = match error.kind() {
        ErrorKind::AuthenticationFailed => authentication(),
        ErrorKind::Server(ServerErrorKind::NoPerm) => permission(),
        ErrorKind::InvalidClientConfig => format!("redis: the client cannot be configured as asked: {error}"),
        _ if error.code() == Some("WRONGPASS") || text.contains("Password authentication failed") => authentication(),
        _ if error.code() == Some("NOAUTH") || text.contains("NOAUTH") => {
            format!("redis at {target} requires authentication: set redis.username and redis.password ({error})")
        }
        _ if text.contains("NOPERM") => permission(),
        ErrorKind::Io => return tls_refusal(&target, error, &text),
        _ => return None,
    };
    Some(RedisRefusal(line))
}

/// A TLS handshake that failed on what was presented (certificates, protocol), as opposed to a network failure.
fn tls_refusal(target: &str, error: &RedisError, text: &str) -> Option<RedisRefusal> {
    const UNTRUSTED: &str = "the server's certificate is not signed by a CA hookline trusts: set redis.tls.ca_file \
                             to the CA that signed it";
    const WRONG_NAME: &str = "the server's certificate does not name the host in redis.url: connect by a name it \
                              carries";
    const CLIENT_CERTIFICATE_REQUIRED: &str =
        "the server requires a client certificate: set redis.tls.client_cert_file and redis.tls.client_key";
    const CLIENT_CERTIFICATE_REFUSED: &str =
        "the server refused the client certificate (redis.tls.client_cert_file): is it signed by its CA, valid now?";
    const NOT_TLS: &str = "the server does not speak TLS on this port: is it Redis's tls-port?";
    let typed = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>())
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let hint = match typed {
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => UNTRUSTED,
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
        )) => WRONG_NAME,
        Some(rustls::Error::InvalidCertificate(_)) => "the server's certificate is not acceptable",
        Some(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired | rustls::AlertDescription::HandshakeFailure,
        )) => CLIENT_CERTIFICATE_REQUIRED,
        Some(rustls::Error::AlertReceived(
            rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::CertificateExpired
            | rustls::AlertDescription::CertificateRevoked
            | rustls::AlertDescription::CertificateUnknown
            | rustls::AlertDescription::AccessDenied,
        )) => CLIENT_CERTIFICATE_REFUSED,
        Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateHandshakeMessage { .. }) => NOT_TLS,
        Some(_) => "the TLS handshake failed",
        // The same, from the text alone (rustls's messages) when the cause was flattened.
        None if text.contains("UnknownIssuer") => UNTRUSTED,
        None if text.contains("NotValidForName") || text.contains("not valid for name") => WRONG_NAME,
        None if text.contains("invalid peer certificate") => "the server's certificate is not acceptable",
        None if text.contains("CertificateRequired") || text.contains("HandshakeFailure") => {
            CLIENT_CERTIFICATE_REQUIRED
        }
        None if text.contains("received fatal alert") => CLIENT_CERTIFICATE_REFUSED,
        None if text.contains("received corrupt message") => NOT_TLS,
        None => return None,
    };
    Some(RedisRefusal(format!("redis at {target}: TLS refused: {hint} ({error})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> RedisConfig {
        RedisConfig { url: url.to_owned(), ..RedisConfig::default() }
    }

    fn problems_of(config: &RedisConfig) -> Vec<String> {
        let mut problems = Problems::default();
        config.validate(&mut problems);
        match problems.into_result() {
            Ok(()) => Vec::new(),
            Err(crate::config::ConfigError::Invalid(found)) => found,
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn a_password_in_the_url_is_refused_and_names_the_keys_to_use() {
        let found = problems_of(&config("rediss://app:hunter2@cache:6379"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("redis.password") && found[0].contains("redis.username"), "{found:?}");
        assert!(!found[0].contains("hunter2"), "the refusal never prints the password: {found:?}");
        assert_eq!(problems_of(&config("redis://hunter2@cache:6379")).len(), 1);
        assert!(problems_of(&config("rediss://cache:6379")).is_empty());
    }

    #[test]
    fn tls_settings_need_a_tls_url_and_verification_stays_on() {
        let plain_with_tls = RedisConfig { tls: Some(RedisTls::default()), ..config("redis://cache:6379") };
        assert!(problems_of(&plain_with_tls).iter().any(|problem| problem.contains("use rediss://")));
        assert!(problems_of(&config("rediss://cache:6379/#insecure")).iter().any(|p| p.contains("#insecure")));
        let mixed = config("rediss://a:1,redis://b:2");
        assert!(problems_of(&mixed).iter().any(|problem| problem.contains("mixes")));
        let half_client = RedisConfig {
            tls: Some(RedisTls { client_cert_file: Some("/c.pem".into()), ..RedisTls::default() }),
            ..config("rediss://cache:6379")
        };
        assert!(problems_of(&half_client).iter().any(|problem| problem.contains("go together")));
        let user_only = RedisConfig { username: Some("u".into()), ..config("rediss://cache:6379") };
        assert!(problems_of(&user_only).iter().any(|problem| problem.contains("needs redis.password")));
    }

    #[test]
    fn a_missing_or_non_pem_ca_file_is_a_start_problem() {
        let dir = std::env::temp_dir().join(format!("hookline-redis-security-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        for (path, expected) in [(dir.join("missing.pem"), "cannot read"), (garbage, "holds no PEM certificate")] {
            let tls = RedisTls { ca_file: Some(path.display().to_string()), ..RedisTls::default() };
            let config = RedisConfig { tls: Some(tls), ..config("rediss://cache:6379") };
            let found = RedisSecurity::load(&config).expect_err("refused");
            assert!(found.iter().any(|problem| problem.contains("redis.tls.ca_file") && problem.contains(expected)));
        }
        let no_password = RedisConfig {
            username: Some("hookline".into()),
            password: Some(SecretRef::from_file("redis", dir.join("nope").display().to_string())),
            ..config("rediss://cache:6379")
        };
        let found = RedisSecurity::load(&no_password).expect_err("refused");
        assert!(found.iter().any(|problem| problem.starts_with("redis.password: secret `redis`")), "{found:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_password_is_not_sent_over_plain_redis_without_saying_so() {
        let password = Some(SecretRef::from_env("redis", "REDIS_PASSWORD"));
        let plain = RedisConfig { password: password.clone(), ..config("redis://cache:6379") };
        assert!(problems_of(&plain).iter().any(|problem| problem.contains("clear text")), "{:?}", problems_of(&plain));
        let allowed = RedisConfig { allow_plaintext_password: true, ..plain };
        assert!(problems_of(&allowed).is_empty(), "{:?}", problems_of(&allowed));
        let tls = RedisConfig { password, ..config("rediss://cache:6379") };
        assert!(problems_of(&tls).is_empty(), "{:?}", problems_of(&tls));
        assert!(problems_of(&config("redis://cache:6379")).is_empty(), "no password, nothing in clear text");
    }

    #[test]
    fn the_printed_config_shows_references_only() {
        let config = RedisConfig {
            username: Some("hookline".into()),
            password: Some(SecretRef::from_env("redis", "REDIS_PASSWORD")),
            tls: Some(RedisTls {
                ca_file: Some("/etc/hookline/redis-ca.pem".into()),
                client_cert_file: Some("/etc/hookline/redis.pem".into()),
                client_key: Some(SecretRef::from_file("redis-key", "/run/secrets/redis.key")),
            }),
            ..config("rediss://cache:6379")
        };
        let printed = crate::config::effective_toml(&config).unwrap();
        assert!(printed.contains("env = \"REDIS_PASSWORD\""), "{printed}");
        assert!(printed.contains("[tls.client_key]") || printed.contains("client_key"), "{printed}");
    }
}
