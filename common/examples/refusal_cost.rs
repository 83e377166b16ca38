//! What refusing one connection over its address's cap costs the server (docs/benchmarks/security.md): a server
//! (`hookline_common::http::serve`, on a thread of its own with a current-thread runtime) with
//! `max_connections_per_peer = 1`, that cap taken by one request it holds; then N clients, one after another, each
//! connecting from the same address, writing a request with a 1 KiB body and reading the answer's head (the `503`
//! with `Retry-After`) before closing, as an HTTP client does. Prints the server thread's CPU time (user and
//! system, from `/proc/thread-self/stat`) per refused connection; under callgrind (`--separate-threads=yes`) the
//! server thread's instructions for N = 0 and N = 10,000 give the same per connection in user space.
//!
//! `cargo run -p hookline-common --example refusal_cost -- 10000`

use std::{net::SocketAddr, time::Instant};

use hookline_common::http::{Body, ServeLimits, serve};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

/// This thread's CPU time (user + system), in clock ticks (100 per second on Linux).
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // The fields after the command (which is in parentheses and may hold spaces): utime and stime are the 12th and
    // 13th of them.
    let after_command = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_command.split_whitespace().collect();
    let field = |index: usize| fields.get(index).and_then(|value| value.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

const REQUEST_HEAD: &str =
    "POST /webhooks/github HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: 1024\r\n\r\n";

async fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 1024];
    while !answer.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
    answer
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|arg| arg.parse().ok()).unwrap_or(10_000);
    let (address_sender, address) = std::sync::mpsc::channel::<SocketAddr>();
    let (ticks_sender, ticks) = std::sync::mpsc::channel::<u64>();
    let shutdown = CancellationToken::new();
    let server_shutdown = shutdown.clone();
    let server = std::thread::Builder::new()
        .name("server".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                address_sender.send(listener.local_addr().expect("address")).expect("send");
                let handler =
                    |_request: http::Request<hyper::body::Incoming>| std::future::pending::<http::Response<Body>>();
                let limits = ServeLimits { max_connections_per_peer: 1, ..ServeLimits::default() };
                let start = thread_cpu_ticks();
                serve(listener, handler, limits, server_shutdown).await;
                ticks_sender.send(thread_cpu_ticks() - start).expect("send");
            });
        })
        .expect("server thread");
    let server_address = address.recv().expect("the server's address");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let body = vec![b'x'; 1024];
    let (answered, elapsed) = runtime.block_on(async {
        // The address's one connection: a request the server holds.
        let mut held = TcpStream::connect(server_address).await.expect("connect");
        held.write_all(REQUEST_HEAD.as_bytes()).await.expect("write");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let started = Instant::now();
        let mut answered = 0_u64;
        for _ in 0..n {
            let mut stream = TcpStream::connect(server_address).await.expect("connect");
            stream.write_all(REQUEST_HEAD.as_bytes()).await.expect("write the head");
            stream.write_all(&body).await.expect("write the body");
            if read_head(&mut stream).await.starts_with(b"HTTP/1.1 503 ") {
                answered += 1;
            }
        }
        let elapsed = started.elapsed();
        drop(held);
        (answered, elapsed)
    });
    shutdown.cancel();
    let server_ticks = ticks.recv().expect("the server's CPU time");
    server.join().expect("server thread");
    let cpu_us = server_ticks * 10_000;
    println!(
        "{n} connections refused, {answered} answered 503; server thread CPU {:.3} s ({:.1} us per refused connection); \
         wall {:.3} s",
        cpu_us as f64 / 1e6,
        if n > 0 { cpu_us as f64 / n as f64 } else { 0.0 },
        elapsed.as_secs_f64()
    );
}
