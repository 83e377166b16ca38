//! What a forged Twilio request costs the gateway before it is refused: Twilio signs the URL followed by the
//! sorted form parameters, so the string has to be built before the signature can be found wrong. Three forms,
//! each with a wrong signature, through the same `signature::verify` entry the gateway calls:
//!
//! - `flood_1mb`: 1 MB of 100,000 random `pN=v` pairs, the attack of issue 23 (refused at the size bound now);
//! - `worst_accepted`: the largest form still verified, 64 KiB in 255 parameters;
//! - `typical`: a 20-parameter SMS webhook.
//!
//! `cargo bench -p hookline-signature --bench twilio_forged`; CPU per 1,000 forged requests is the time per
//! iteration times 1,000 (one thread). docs/benchmarks/twilio-forged.md has the figures before and after.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hookline_signature::{self as signature, SchemeOptions, Secret, UnverifiedRequest};
use http::{HeaderMap, HeaderValue};

const URL: &str = "https://hooks.example.com/webhooks/twilio";

/// `n` parameters `p<random>=<value>` of about `value_len` bytes each, in random order (a small LCG: the bench
/// needs no crate for it).
fn form(n: usize, value_len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let value = "v".repeat(value_len);
    let pairs: Vec<String> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            format!("p{}={value}", state >> 40)
        })
        .collect();
    pairs.join("&").into_bytes()
}

fn bench(c: &mut Criterion) {
    let scheme = signature::build("twilio", &SchemeOptions::default()).expect("twilio builds");
    let secrets = [Secret::new("auth-token", b"0123456789abcdef0123456789abcdef".to_vec())];
    let mut headers = HeaderMap::new();
    // A well-formed signature that no secret produces.
    headers.insert("x-twilio-signature", HeaderValue::from_static("RSOYDt4T1cUTdK1PDd93/VVr8B8="));
    headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
    let mut group = c.benchmark_group("twilio_forged");
    for (name, body) in [("flood_1mb", form(100_000, 1)), ("worst_accepted", form(255, 240)), ("typical", form(20, 16))]
    {
        let body = bytes::Bytes::from(body);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                let request = UnverifiedRequest::new(&headers, &body, 0).with_url(URL);
                let result = signature::verify(scheme.as_ref(), black_box(&request), &secrets);
                assert!(result.is_err(), "a forged request never verifies");
                result
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
