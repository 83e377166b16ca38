//! `hookline-bench loadgen`: its arguments and the run (the generator itself is the library's `loadgen`).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context;
use hookline_bench::{
    loadgen::{Envelope, LoadConfig, Mode, Protocol},
    signing::{SchemeKind, Signer},
    topic_check,
};

use crate::{own_cpu_seconds, write_json};

#[derive(Debug, clap::Args)]
pub(crate) struct LoadgenArgs {
    /// The gateway's (or HTTP ceiling's) public address.
    #[arg(long)]
    target: SocketAddr,
    #[arg(long, value_enum, default_value = "github")]
    scheme: SchemeKind,
    /// Source name; default: the bench gateway's source for the scheme (`bench-github`, ...).
    #[arg(long)]
    source: Option<String>,
    /// File holding the source's secret (as the gateway reads it).
    #[arg(long)]
    secret_file: PathBuf,
    #[arg(long, default_value_t = 1024)]
    body_bytes: usize,
    /// Open loop at this many requests/s; closed loop without it (and without --peak-from).
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop at `--fraction` of the 2xx/s measured in this earlier loadgen JSON.
    #[arg(long)]
    peak_from: Option<PathBuf>,
    #[arg(long, default_value_t = 0.7)]
    fraction: f64,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// HTTP/2 only: connections shared by the workers.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    #[arg(long)]
    http2: bool,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Stop after this many requests (the measured run; not the warm-up), or at `--duration-s`, whichever comes
    /// first.
    #[arg(long)]
    requests: Option<u64>,
    /// Before the measured run, this many seconds of closed-loop load with 16 workers, not measured (the topic
    /// check still covers it): the first requests to a fresh gateway and topic wait for the producer id and the
    /// partition leaders, which is start-up, not steady state.
    #[arg(long, default_value_t = 0.0)]
    warm_up_s: f64,
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
    #[arg(long, default_value_t = 0.0)]
    bad_signatures: f64,
    /// Send from these local addresses (comma-separated or `127.0.1.1+64` for 64 consecutive addresses), round
    /// robin over the connections: many clients, or one, as the gateway's per-address limits see them.
    #[arg(long, value_parser = parse_bind)]
    bind: Option<BindAddrs>,
    /// Open loop: stop when `--duration-s` has passed, even if the server held requests back (the rest of the
    /// schedule is not sent).
    #[arg(long)]
    stop_at_end: bool,
    /// Check this topic afterwards (it must be fresh: only this run's records).
    #[arg(long)]
    topic: Option<String>,
    /// Send to kprf (the HTTP-to-Kafka proxy of docs/benchmarks/gateway-batching.md) instead of a gateway: the
    /// same signed requests, their bodies wrapped in kprf's `/push` JSON for this topic (the `--topic` checked).
    #[arg(long)]
    kprf_topic: Option<String>,
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    /// A label carried into the JSON (`gateway-closed`, `http-ceiling`, ...).
    #[arg(long, default_value = "")]
    label: String,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    quiet: bool,
}

pub(crate) async fn loadgen(args: LoadgenArgs) -> anyhow::Result<()> {
    let secret = std::fs::read_to_string(&args.secret_file)
        .with_context(|| format!("read {}", args.secret_file.display()))?
        .trim_end_matches(['\r', '\n'])
        .to_owned();
    let signer = Signer::new(args.scheme, &secret, args.body_bytes).map_err(anyhow::Error::msg)?;
    let mode = match (args.rate, &args.peak_from) {
        (Some(rate_per_s), _) => Mode::Open { rate_per_s },
        (None, Some(path)) => {
            let earlier: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
            let peak = earlier["load"]["acknowledged_per_s"]
                .as_f64()
                .with_context(|| format!("{}: no load.acknowledged_per_s", path.display()))?;
            Mode::Open { rate_per_s: peak * args.fraction }
        }
        (None, None) => Mode::Closed,
    };
    let source = args.source.unwrap_or_else(|| args.scheme.source_name().to_owned());
    let config = LoadConfig {
        mode,
        protocol: if args.http2 { Protocol::Http2 } else { Protocol::Http1 },
        concurrency: args.concurrency,
        connections: args.connections,
        duration: Duration::from_secs_f64(args.duration_s),
        max_requests: args.requests,
        duplicate_share: args.duplicates,
        bad_signature_share: args.bad_signatures,
        progress: !args.quiet,
        bind: args.bind.map(|bind| bind.0).unwrap_or_default(),
        stop_at_end: args.stop_at_end,
        envelope: match args.kprf_topic {
            Some(topic) => Envelope::Kprf { topic },
            None => Envelope::Webhook,
        },
        ..LoadConfig::new(args.target, source, signer)
    };
    if args.topic.is_some() && args.brokers.is_none() {
        anyhow::bail!("--topic needs --brokers (or KAFKA_BROKERS)");
    }
    let mut warm_up_deliveries = Vec::new();
    if args.warm_up_s > 0.0 {
        let warm_up = LoadConfig {
            mode: Mode::Closed,
            concurrency: config.concurrency.min(16),
            duration: Duration::from_secs_f64(args.warm_up_s),
            max_requests: None,
            progress: false,
            ..config.clone()
        };
        let warm_up = hookline_bench::loadgen::run(warm_up).await?;
        eprintln!("loadgen: warm-up (not measured): {}", warm_up.summary());
        warm_up_deliveries = warm_up.deliveries;
    }
    let report = hookline_bench::loadgen::run(config).await?;
    let check = match (&args.topic, &args.brokers) {
        (Some(topic), Some(brokers)) => {
            let deliveries: Vec<_> = warm_up_deliveries.into_iter().chain(report.deliveries.iter().cloned()).collect();
            let (brokers, topic) = (brokers.clone(), topic.clone());
            Some(
                tokio::task::spawn_blocking(move || {
                    topic_check::check_topic(&brokers, &topic, &deliveries, Duration::from_secs(60))
                })
                .await??,
            )
        }
        _ => None,
    };
    eprintln!("loadgen: {}", report.summary());
    if let Some(check) = &check {
        eprintln!(
            "loadgen: topic check {}: {} records, {} acknowledged, {} refused, {} uncertain, lost {}, \
             refused-but-stored {}, unexpected {}, unknown {}",
            if check.passed { "PASSED" } else { "FAILED" },
            check.records_in_topic,
            check.acknowledged_deliveries,
            check.refused_deliveries,
            check.uncertain_deliveries,
            check.lost,
            check.refused_but_stored,
            check.unexpected_copies,
            check.unknown_records,
        );
        for example in &check.examples {
            eprintln!("loadgen:   {example}");
        }
    }
    let output = serde_json::json!({
        "label": args.label,
        "load": report,
        "topic_check": check,
        "generator_cpu_s": own_cpu_seconds(),
    });
    write_json(args.json.as_deref(), &output)?;
    if check.is_some_and(|check| !check.passed) {
        anyhow::bail!("the topic check failed: this benchmark lost or invented data");
    }
    Ok(())
}

/// Local addresses for `loadgen --bind`.
#[derive(Debug, Clone)]
struct BindAddrs(Vec<std::net::IpAddr>);

fn parse_bind(value: &str) -> Result<BindAddrs, String> {
    if let Some((first, count)) = value.split_once('+') {
        let first: std::net::Ipv4Addr = first.parse().map_err(|error| format!("{first}: {error}"))?;
        let count: u32 = count.parse().map_err(|error| format!("{count}: {error}"))?;
        let first = u32::from(first);
        return Ok(BindAddrs((0..count).map(|n| std::net::IpAddr::V4((first + n).into())).collect()));
    }
    value
        .split(',')
        .map(|addr| addr.trim().parse().map_err(|error| format!("{addr}: {error}")))
        .collect::<Result<_, _>>()
        .map(BindAddrs)
}
