//! Turns a results directory written by `scripts/bench` into the Markdown tables of `docs/benchmarks.md`, and
//! writes `summary.json` (the ratios and whether each target is met) beside the inputs.
//!
//! Inputs, by file name: `<label>.json` from `loadgen` (those with a `load` key), `<label>.rss` (the gateway's
//! peak RSS in KiB for that run), `kafka-ceiling.json`, `redis-ceiling.json`, `consumer.json`, `machine.json`,
//! and criterion's `verify/<scheme>/<size>/new/estimates.json`.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::Context;
use serde_json::Value;

/// The targets of issue 7.
const TARGET_GATEWAY_RATIO: f64 = 0.7;
const TARGET_P99_MS_AT_70: f64 = 20.0;
const TARGET_CONSUMER_RATIO: f64 = 0.6;

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

fn f(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

pub fn render(results: &Path, criterion: &Path) -> anyhow::Result<String> {
    let mut loads: BTreeMap<String, Value> = BTreeMap::new();
    let mut rss: BTreeMap<String, u64> = BTreeMap::new();
    let mut cpu: BTreeMap<String, Value> = BTreeMap::new();
    for entry in std::fs::read_dir(results)? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                let value = read_json(&path)?;
                if value.get("load").is_some() {
                    loads.insert(stem, value);
                }
            }
            Some("cpu") => {
                cpu.insert(stem, read_json(&path)?);
            }
            Some("rss") => {
                if let Ok(kib) = std::fs::read_to_string(&path)?.trim().parse() {
                    rss.insert(stem, kib);
                }
            }
            _ => {}
        }
    }
    let optional = |name: &str| read_json(&results.join(name)).ok();
    let kafka = optional("kafka-ceiling.json");
    let redis = optional("redis-ceiling.json");
    let consumer = optional("consumer.json");
    let machine = optional("machine.json");
    let mut out = String::new();
    let mut summary = serde_json::Map::new();

    if let Some(machine) = &machine {
        writeln!(out, "### Machine and run\n")?;
        if let Some(map) = machine.as_object() {
            for (key, value) in map {
                let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                writeln!(out, "- {key}: {text}")?;
            }
        }
        writeln!(out)?;
    }

    writeln!(out, "### Load runs (time to 2xx, from the intended send time in open loop)\n")?;
    writeln!(
        out,
        "| run | mode | proto | scheme | body | conc. | target/s | 2xx/s | p50 ms | p99 ms | p99.9 ms | max ms | statuses | topic check | gateway peak RSS | CPU µs/req server / broker / generator |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for (label, value) in &loads {
        let load = &value["load"];
        let p = &load["time_to_2xx"];
        let statuses: Vec<String> = load["statuses"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k}: {v}")).collect())
            .unwrap_or_default();
        let check = match value["topic_check"].as_object() {
            Some(check) if check["passed"].as_bool() == Some(true) => {
                format!("passed ({} records)", check["records_in_topic"])
            }
            Some(check) => {
                format!("**FAILED** (lost {}, refused-but-stored {})", check["lost"], check["refused_but_stored"])
            }
            None => "n/a (no topic)".to_owned(),
        };
        writeln!(
            out,
            "| {label} | {mode} | {proto} | {scheme} | {body} | {c} | {target} | {ack:.0} | {p50:.2} | {p99:.2} | {p999:.2} | {max:.2} | {statuses} | {check} | {rss} | {cpu} |",
            mode = load["mode"].as_str().unwrap_or(""),
            proto = load["protocol"].as_str().unwrap_or(""),
            scheme = load["scheme"].as_str().unwrap_or(""),
            body = load["body_bytes"],
            c = load["concurrency"],
            target = load["target_rate_per_s"].as_f64().map_or("-".to_owned(), |r| format!("{r:.0}")),
            ack = f(&load["acknowledged_per_s"]),
            p50 = f(&p["p50_ms"]),
            p99 = f(&p["p99_ms"]),
            p999 = f(&p["p999_ms"]),
            max = f(&p["max_ms"]),
            statuses = statuses.join(", "),
            rss = rss.get(label).map_or("-".to_owned(), |kib| format!("{:.1} MiB", *kib as f64 / 1024.0)),
            cpu = {
                let requests = f(&load["requests"]);
                let per_request = |seconds: f64| {
                    if seconds.is_nan() { "-".to_owned() } else { format!("{:.0}", seconds * 1e6 / requests) }
                };
                let run_cpu = cpu.get(label);
                format!(
                    "{} / {} / {}",
                    per_request(run_cpu.map_or(f64::NAN, |c| f(&c["gateway_cpu_s"]))),
                    per_request(run_cpu.map_or(f64::NAN, |c| f(&c["broker_cpu_s"]))),
                    per_request(f(&value["generator_cpu_s"])),
                )
            },
        )?;
    }
    writeln!(out)?;

    let ack = |label: &str| loads.get(label).map(|v| f(&v["load"]["acknowledged_per_s"]));
    let kafka_rate = kafka.as_ref().map(|k| f(&k["messages_per_s"]));
    if let Some(kafka) = &kafka {
        let p = &kafka["ack_latency"];
        writeln!(out, "### Kafka ceiling (rdkafka producer alone, gateway settings)\n")?;
        writeln!(out, "| message bytes | concurrency | acks/s | failed | ack p50 ms | p99 ms | p99.9 ms | max ms |")?;
        writeln!(out, "|---|---|---|---|---|---|---|---|")?;
        writeln!(
            out,
            "| {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            kafka["message_bytes"],
            kafka["concurrency"],
            f(&kafka["messages_per_s"]),
            kafka["failed"],
            f(&p["p50_ms"]),
            f(&p["p99_ms"]),
            f(&p["p999_ms"]),
            f(&p["max_ms"])
        )?;
        let acks = f(&kafka["acknowledged"]);
        let broker_cpu = cpu.get("kafka-ceiling").map_or(f64::NAN, |c| f(&c["broker_cpu_s"]));
        writeln!(
            out,
            "CPU per acknowledged record: producer {:.0} µs, broker {:.0} µs (including the process's start-up).\n",
            f(&kafka["producer_cpu_s"]) * 1e6 / acks,
            broker_cpu * 1e6 / acks
        )?;
    }

    writeln!(out, "### Gateway against its ceilings\n")?;
    writeln!(
        out,
        "| protocol | gateway 2xx/s | HTTP ceiling /s | Kafka ceiling /s | ratio to min (target {TARGET_GATEWAY_RATIO}) | additive ceiling /s | ratio to additive |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    let mut ratios = serde_json::Map::new();
    for (proto, gateway_label, http_label) in [
        ("HTTP/1.1", "gateway-closed", "http-ceiling-closed"),
        ("HTTP/2", "gateway-h2-closed", "http-ceiling-h2-closed"),
    ] {
        let (Some(gateway), Some(http)) = (ack(gateway_label), ack(http_label)) else { continue };
        let ceiling = kafka_rate.map_or(http, |k| http.min(k));
        let ratio = gateway / ceiling;
        // On shared cores the two costs add up: each request pays the HTTP work and the Kafka work.
        let additive = kafka_rate.map_or(http, |k| 1.0 / (1.0 / http + 1.0 / k));
        ratios.insert(proto.to_owned(), serde_json::json!({ "to_min": ratio, "to_additive": gateway / additive }));
        writeln!(
            out,
            "| {proto} | {gateway:.0} | {http:.0} | {kafka} | {ratio:.2} ({met}) | {additive:.0} | {:.2} |",
            gateway / additive,
            kafka = kafka_rate.map_or("-".to_owned(), |k| format!("{k:.0}")),
            met = if ratio >= TARGET_GATEWAY_RATIO { "met" } else { "**not met**" },
        )?;
    }
    writeln!(out)?;
    summary.insert("gateway_ratio".into(), Value::Object(ratios));
    if let Some(open70) = loads.get("gateway-open-70") {
        let p99 = f(&open70["load"]["time_to_2xx"]["p99_ms"]);
        let met = p99 < TARGET_P99_MS_AT_70;
        writeln!(
            out,
            "p99 time-to-2xx at 70% of peak: **{p99:.2} ms** (target < {TARGET_P99_MS_AT_70} ms: {}).\n",
            if met { "met" } else { "**not met**" }
        )?;
        summary.insert("p99_ms_at_70pct".into(), serde_json::json!(p99));
        summary.insert("p99_target_met".into(), serde_json::json!(met));
    }
    if let Some((label, kib)) = rss.iter().max_by_key(|(_, kib)| **kib) {
        writeln!(out, "Gateway peak RSS over all runs: **{:.1} MiB** (in `{label}`).\n", *kib as f64 / 1024.0)?;
        summary.insert("gateway_peak_rss_kib".into(), serde_json::json!(kib));
    }

    let verify = verify_rows(criterion)?;
    if !verify.is_empty() {
        writeln!(out, "### Signature verification (criterion, mean per request)\n")?;
        writeln!(out, "| scheme | 1 KiB | 64 KiB | 64 KiB throughput |")?;
        writeln!(out, "|---|---|---|---|")?;
        for (scheme, sizes) in &verify {
            let small = sizes.get("1KiB").copied();
            let large = sizes.get("64KiB").copied();
            let show = |ns: Option<f64>| ns.map_or("-".to_owned(), |ns| format!("{:.2} µs", ns / 1000.0));
            let throughput = large.map_or("-".to_owned(), |ns| format!("{:.0} MiB/s", 65536.0 / ns * 1e9 / 1048576.0));
            writeln!(out, "| {scheme} | {} | {} | {throughput} |", show(small), show(large))?;
        }
        writeln!(out)?;
        summary.insert("verify_mean_ns".into(), serde_json::to_value(&verify)?);
    }

    if let Some(rows) = redis.as_ref().and_then(Value::as_array) {
        writeln!(out, "### Redis dedupe ceiling (the consumer's claim + done scripts)\n")?;
        writeln!(out, "| mode | tasks | batch | claim+done per s | latency p50 ms | p99 ms |")?;
        writeln!(out, "|---|---|---|---|---|---|")?;
        for row in rows {
            let p = &row["claim_done_latency"];
            writeln!(
                out,
                "| {} | {} | {} | {:.0} | {:.3} | {:.3} |",
                row["mode"].as_str().unwrap_or(""),
                row["concurrency"],
                row["batch"],
                f(&row["events_per_s"]),
                f(&p["p50_ms"]),
                f(&p["p99_ms"])
            )?;
        }
        writeln!(out, "\n(latency is per claim+done pair; per batch of pairs when pipelined)\n")?;
    }

    if let Some(consumer) = &consumer {
        writeln!(out, "### Consumer: end to end (dedupe + `log` handler) vs raw consume of the same topic\n")?;
        writeln!(
            out,
            "{} records of {} bytes, 6 partitions (filled at {:.0}/s).\n",
            consumer["events"],
            consumer["body_bytes"],
            f(&consumer["fill_per_s"])
        )?;
        writeln!(out, "| kind | instances | events/s | ratio to raw | processed | duplicates | dead-lettered |")?;
        writeln!(out, "|---|---|---|---|---|---|---|")?;
        let rows = consumer["rows"].as_array().cloned().unwrap_or_default();
        let raw = rows.first().map_or(f64::NAN, |row| f(&row["events_per_s"]));
        let mut consumer_ratios = serde_json::Map::new();
        for row in &rows {
            let rate = f(&row["events_per_s"]);
            let kind = row["kind"].as_str().unwrap_or("");
            if kind != "raw" {
                consumer_ratios.insert(row["instances"].to_string(), serde_json::json!(rate / raw));
            }
            writeln!(
                out,
                "| {kind} | {} | {rate:.0} | {:.2} | {} | {} | {} |",
                row["instances"],
                rate / raw,
                row["processed"],
                row["duplicates"],
                row["dead_lettered"]
            )?;
        }
        let best = consumer_ratios.values().map(f).fold(f64::NAN, f64::max);
        writeln!(
            out,
            "\nBest end-to-end ratio: **{best:.2}** (target {TARGET_CONSUMER_RATIO}: {}).\n",
            if best >= TARGET_CONSUMER_RATIO { "met" } else { "**not met**" }
        )?;
        summary.insert("consumer_ratio".into(), Value::Object(consumer_ratios));
    }

    std::fs::write(results.join("summary.json"), serde_json::to_string_pretty(&Value::Object(summary))? + "\n")?;
    Ok(out)
}

/// Mean ns per verify, by scheme and size, from criterion's `verify/<scheme>/<size>/new/estimates.json`.
fn verify_rows(criterion: &Path) -> anyhow::Result<BTreeMap<String, BTreeMap<String, f64>>> {
    let mut rows: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let group = criterion.join("verify");
    let Ok(schemes) = std::fs::read_dir(&group) else { return Ok(rows) };
    for scheme in schemes {
        let scheme = scheme?.path();
        let Some(scheme_name) = scheme.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
        let Ok(sizes) = std::fs::read_dir(&scheme) else { continue };
        for size in sizes {
            let size = size?.path();
            let estimates = size.join("new/estimates.json");
            let (Some(size_name), Ok(value)) = (size.file_name().and_then(|n| n.to_str()), read_json(&estimates))
            else {
                continue;
            };
            rows.entry(scheme_name.clone())
                .or_default()
                .insert(size_name.to_owned(), f(&value["mean"]["point_estimate"]));
        }
    }
    Ok(rows)
}
