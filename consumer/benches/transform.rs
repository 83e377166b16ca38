//! What a route transform costs per event: a typical program (pick fields, rename, change one, build an object
//! with a mapped list) on a Stripe-like `charge.succeeded` body of 1 KiB and of 4 KiB, through
//! `Transform::apply` (check the body as JSON, read it into jaq, run, write the output) and through
//! `apply_off_runtime`, what the router calls: the same on a thread of its own, answered through a channel.
//!
//! `cargo bench -p hookline-consumer --bench transform`: first a plain loop's percentiles (p50, p90, p99, p99.9 of
//! 20,000 timed calls each after 2,000 unmeasured), then criterion's estimates of the mean. docs/benchmarks/transforms.md
//! has the figures.

use std::{hint::black_box, sync::Arc, time::Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use hookline_consumer::handler::transform::Transform;

/// The route's program: what a downstream that wants a compact charge would configure.
const PROGRAM: &str = r#"{
  id,
  event: .type,
  amount: .data.object.amount,
  currency: (.data.object.currency | ascii_upcase),
  customer: .data.object.customer,
  paid_at: .created,
  test: (.livemode | not),
  items: [.data.object.lines[] | {sku: .price.id, quantity, total: (.quantity * .price.unit_amount)}]
}"#;

/// A `charge.succeeded` event with `n_lines` line items, about 1 KiB plus 330 bytes per line.
fn body(n_lines: usize) -> Vec<u8> {
    let lines: Vec<serde_json::Value> = (0..n_lines)
        .map(|index| {
            serde_json::json!({
                "id": format!("li_1Nx{index:020}"),
                "object": "line_item",
                "description": format!("Widget model {index} with the long description a catalogue gives it"),
                "quantity": index % 5 + 1,
                "price": {"id": format!("price_1Nx{index:018}"), "unit_amount": 1999 + index, "currency": "eur",
                          "product": format!("prod_{index:016}"), "type": "one_time"},
            })
        })
        .collect();
    let event = serde_json::json!({
        "id": "evt_3NxAbCdEfGhIjKlMnOpQrStU",
        "object": "event",
        "api_version": "2023-10-16",
        "created": 1_701_000_000,
        "type": "charge.succeeded",
        "livemode": false,
        "pending_webhooks": 1,
        "request": {"id": "req_AbCdEfGhIjKlMn", "idempotency_key": "6a1f0c2e-5b7d-4c1e-9a3b-2f4d6e8a0b1c"},
        "data": {"object": {
            "id": "ch_3NxAbCdEfGhIjKlMnOpQrStU", "object": "charge", "amount": 4997, "amount_captured": 4997,
            "currency": "eur", "customer": "cus_OkLmNoPqRsTuVw", "description": "Order 1042",
            "billing_details": {"address": {"city": "Lyon", "country": "FR", "line1": "1 rue de la Paix",
                                            "postal_code": "69001"}, "email": "jane@example.com", "name": "Jane Doe"},
            "payment_method_details": {"card": {"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2030,
                                                 "funding": "credit", "network": "visa"}, "type": "card"},
            "metadata": {"order_id": "1042", "channel": "web"},
            "lines": lines,
        }},
    });
    serde_json::to_vec(&event).expect("json")
}

/// Bodies of about 1 and 4 KiB.
fn bodies() -> [(&'static str, Vec<u8>); 2] {
    [("1KiB", body(1)), ("4KiB", body(10))]
}

fn percentile(sorted_ns: &[u64], fraction: f64) -> f64 {
    let index = ((sorted_ns.len() as f64 * fraction).ceil() as usize).clamp(1, sorted_ns.len()) - 1;
    sorted_ns[index] as f64 / 1000.0
}

fn report(what: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    println!(
        "{what:<34} n={:>6}  p50 {:>7.1} us  p90 {:>7.1} us  p99 {:>7.1} us  p99.9 {:>7.1} us",
        ns.len(),
        percentile(&ns, 0.50),
        percentile(&ns, 0.90),
        percentile(&ns, 0.99),
        percentile(&ns, 0.999)
    );
}

const WARM_UP: usize = 2_000;
const TIMED: usize = 20_000;

fn percentiles(transform: &Arc<Transform>, runtime: &tokio::runtime::Runtime) {
    for (name, body) in bodies() {
        let output = transform.apply(&body).expect("the program applies");
        println!("{name}: body {} bytes, output {} bytes", body.len(), output.len());
        let mut ns = Vec::with_capacity(TIMED);
        for index in 0..WARM_UP + TIMED {
            let started = Instant::now();
            black_box(transform.apply(black_box(&body)).expect("applies"));
            if index >= WARM_UP {
                ns.push(started.elapsed().as_nanos() as u64);
            }
        }
        report(&format!("apply {name}"), ns);
        let shared = Bytes::from(body);
        let mut ns = Vec::with_capacity(TIMED);
        for index in 0..WARM_UP + TIMED {
            let started = Instant::now();
            runtime.block_on(transform.apply_off_runtime(shared.clone())).expect("applies");
            if index >= WARM_UP {
                ns.push(started.elapsed().as_nanos() as u64);
            }
        }
        report(&format!("apply_off_runtime {name}"), ns);
    }
}

fn main() {
    let transform = Arc::new(Transform::compile(PROGRAM).expect("the program compiles"));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    percentiles(&transform, &runtime);

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("transform");
    for (name, body) in bodies() {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("apply/{name}"), |b| b.iter(|| transform.apply(black_box(&body))));
        let shared = Bytes::from(body);
        group.bench_function(format!("apply_off_runtime/{name}"), |b| {
            b.iter(|| runtime.block_on(transform.apply_off_runtime(shared.clone())))
        });
    }
    group.bench_function("compile", |b| b.iter(|| Transform::compile(black_box(PROGRAM))));
    group.finish();
    criterion.final_summary();
}
