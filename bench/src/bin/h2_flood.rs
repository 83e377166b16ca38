//! The gateway's resident memory under an HTTP/2 stream flood (docs/benchmarks/h2-stream-flood.md): connections
//! that each open streams with a large head and no body, held for a while, spread over loopback addresses so the
//! per-peer connection cap does not stop them. Samples the gateway's `VmRSS` every 50 ms and prints its peak and
//! the process's `VmHWM` (a fresh gateway's peak is the flood's).
//!
//! `h2-flood-bench --target 127.0.0.1:8080 --pid <gateway pid> --connections 512 --streams 16 --header-bytes 61440`

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use hookline_bench::h2_flood::{FloodConnection, FloodRequest, Outcomes, peak_rss_bytes, rss_bytes};
use http::StatusCode;

#[derive(Debug, Parser)]
struct Args {
    /// The gateway's public address.
    #[arg(long)]
    target: SocketAddr,
    /// The gateway's process id, for its `VmRSS`.
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 512)]
    connections: usize,
    /// Streams each connection tries to open (as many as the server's limit allows at once).
    #[arg(long, default_value_t = 16)]
    streams: usize,
    /// Bytes of header values per stream.
    #[arg(long, default_value_t = 60 * 1024)]
    header_bytes: usize,
    /// Connections per source address (127.0.0.1, 127.0.0.2, ...).
    #[arg(long, default_value_t = 64)]
    connections_per_address: usize,
    /// How long the streams are held once every connection is open.
    #[arg(long, default_value_t = 5)]
    hold_s: u64,
    /// The source path.
    #[arg(long, default_value = "/webhooks/github")]
    path: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let baseline = rss_bytes(args.pid).ok_or_else(|| anyhow::anyhow!("no process {}", args.pid))?;
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampling = {
        let (peak, pid) = (peak.clone(), args.pid);
        tokio::spawn(async move {
            while let Some(rss) = rss_bytes(pid) {
                peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let request =
        FloodRequest { uri: format!("http://{}{}", args.target, args.path), n_header_bytes: args.header_bytes };
    let outcomes = Arc::new(Outcomes::default());
    let started = Instant::now();
    let mut connections = Vec::with_capacity(args.connections);
    for index in 0..args.connections {
        let address_index = u32::try_from(index / args.connections_per_address.max(1))?;
        let local_ip = IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 0, 1)) + address_index));
        match FloodConnection::open(args.target, local_ip, &request, args.streams, outcomes.clone()).await {
            Ok(connection) => connections.push(connection),
            Err(error) => eprintln!("connection {index}: {error}"),
        }
    }
    let opened = started.elapsed();
    tokio::time::sleep(Duration::from_secs(args.hold_s)).await;
    let held_rss = rss_bytes(args.pid).unwrap_or(0);
    let high_water = peak_rss_bytes(args.pid).unwrap_or(0);
    let advertised: Vec<usize> = connections.iter().map(FloodConnection::advertised_streams).collect();
    let (n_503, n_503_retry_after) = outcomes.answered(StatusCode::SERVICE_UNAVAILABLE);
    println!(
        "connections {} of {}; advertised streams per connection {:?}..{:?}; opened in {:.1} s, held {} s",
        connections.len(),
        args.connections,
        advertised.iter().min(),
        advertised.iter().max(),
        opened.as_secs_f64(),
        args.hold_s
    );
    println!(
        "streams offered {}; answered {} (503: {n_503}, with Retry-After: {n_503_retry_after}); refused {}; failed {}",
        args.connections * args.streams,
        outcomes.n_answered(),
        outcomes.n_refused(),
        outcomes.n_failed()
    );
    drop(connections);
    tokio::time::sleep(Duration::from_millis(200)).await;
    sampling.abort();
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "gateway RSS: before {:.1} MiB, at the end of the hold {:.1} MiB, peak sampled every 50 ms {:.1} MiB, \
         VmHWM (the process's peak) {:.1} MiB",
        mib(baseline),
        mib(held_rss),
        mib(peak.load(std::sync::atomic::Ordering::Relaxed)),
        mib(high_water)
    );
    Ok(())
}
