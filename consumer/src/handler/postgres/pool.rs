//! Connections to the user's database: TLS (rustls: the Mozilla roots and `ca_file`, the host name checked, a
//! client certificate if given), the password read from its secret for every new connection, the server-side
//! timeouts set at connect, and a bounded pool whose wait is a retryable failure.

use std::{path::Path, time::Duration};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use hookline_common::{
    config::SecretRef,
    http_client::{self, ClientIdentity},
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::postgres::PostgresConfig;

type ConnectFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
            > + Send
            + 'a,
    >,
>;

/// How connections are made: what [`deadpool_postgres::Connect`] calls for each new one.
struct Connector {
    tls: Option<MakeRustlsConnect>,
    password: Option<SecretRef>,
}

impl deadpool_postgres::Connect for Connector {
    fn connect(&self, pg_config: &tokio_postgres::Config) -> ConnectFuture<'_> {
        let mut pg_config = pg_config.clone();
        let password = self.password.as_ref().map(SecretRef::load);
        let tls = self.tls.clone();
        Box::pin(async move {
            match password {
                Some(Ok(password)) => {
                    pg_config.password(password);
                }
                // A secret that cannot be read now (a file being rotated) makes this connection fail, retryably:
                // the error names the secret, never its value.
                Some(Err(problem)) => {
                    tracing::warn!(problem = %problem, "postgres password secret unreadable; connecting without it");
                }
                None => {}
            }
            let spawn = |connection: std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send>,
            >| {
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(error = %error, "postgres connection ended");
                    }
                })
            };
            match tls {
                Some(tls) => {
                    let (client, connection) = pg_config.connect(tls).await?;
                    Ok((client, spawn(Box::pin(connection))))
                }
                None => {
                    let (client, connection) = pg_config.connect(tokio_postgres::NoTls).await?;
                    Ok((client, spawn(Box::pin(connection))))
                }
            }
        })
    }
}

/// The pool of a `postgres` handler, or every problem building it (a bad URL, CA file or client key).
pub fn build(config: &PostgresConfig, config_dir: &Path, application_name: &str) -> Result<Pool, Vec<String>> {
    let mut problems = Vec::new();
    let url = config.url.as_deref().unwrap_or_default();
    let mut pg_config: tokio_postgres::Config = url.parse().map_err(|error| vec![format!("url: {error}")])?;
    let plain = pg_config.get_ssl_mode() == SslMode::Disable;
    if plain && (config.password.is_some() || pg_config.get_password().is_some()) {
        tracing::warn!(
            "postgres: sslmode=disable sends the password (and every event's data) in clear text; use \
             sslmode=require, or keep this for a database reached over a private network only"
        );
    }
    if !plain {
        // `prefer` would let a peer that refuses TLS downgrade the connection to plain text.
        pg_config.ssl_mode(SslMode::Require);
    }
    let timeouts = format!(
        "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
        config.statement_timeout_ms,
        config.lock_timeout_ms,
        // An abandoned transaction (a consumer frozen mid-event) cannot hold its rows' locks for long.
        config.statement_timeout_ms.saturating_mul(2)
    );
    // The URL's own `options` (a `search_path`, say) come first; the timeouts are hookline's.
    let options = match pg_config.get_options() {
        Some(own) => format!("{own} {timeouts}"),
        None => timeouts,
    };
    pg_config.options(&options);
    pg_config.application_name(application_name);
    pg_config.connect_timeout(Duration::from_millis(config.pool_wait_ms));
    pg_config.keepalives_idle(Duration::from_secs(30));
    let identity = match (&config.client_certificate, &config.client_key) {
        (Some(certificate), Some(key)) => match key.load() {
            Ok(pem) => ClientIdentity::from_pem(&config_dir.join(certificate), &key.id, &pem)
                .map_err(|error| problems.push(error.to_string()))
                .ok(),
            Err(problem) => {
                problems.push(problem.to_string());
                None
            }
        },
        _ => None,
    };
    if plain && (config.ca_file.is_some() || identity.is_some()) {
        problems.push("ca_file, client_certificate and client_key need TLS; the url says sslmode=disable".to_owned());
    }
    let tls = if plain {
        None
    } else {
        let ca_file = config.ca_file.as_ref().map(|path| config_dir.join(path));
        http_client::tls_client_config(ca_file.as_deref(), identity)
            .map_err(|error| problems.push(format!("TLS: {error}")))
            .ok()
            .map(MakeRustlsConnect::new)
    };
    if let Some(password) = &config.password {
        if let Err(problem) = password.load() {
            problems.push(problem.to_string());
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let manager = Manager::from_connect(
        pg_config,
        Connector { tls, password: config.password.clone() },
        // A closed connection is never handed out; checking each one with a query would cost a round trip per event.
        ManagerConfig { recycling_method: RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(config.pool_size)
        .wait_timeout(Some(Duration::from_millis(config.pool_wait_ms)))
        .create_timeout(Some(Duration::from_millis(config.pool_wait_ms)))
        .recycle_timeout(Some(Duration::from_millis(config.pool_wait_ms)))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|error| vec![format!("pool: {error}")])
}
