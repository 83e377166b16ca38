//! The overview's flow of the last hour ([`crate::flow`]): per source, requests accepted and refused per minute
//! with the hour's top refusal codes; per consumer service, events processed, retrying and dead-lettered per minute,
//! its lag per minute, and its state at the last sample (lag, oldest waiting record, open breakers, paused routes),
//! with the Resume and Pause forms of the Routes page. Every chart is inline SVG with presentation attributes only.
//! A reading that failed is said so, with its reason, never drawn as zero.

use maud::{Markup, html};

use super::{
    layout::{enc, time},
    pauses::{pause_form, resume_form},
};
use crate::{
    flow::{FlowView, ServiceFlow, SourceFlow, minutes::MINUTE_MS, prom::Outcome},
    rejections::Unreachable,
};
use hookline_common::control::RoutePause;

/// The flow section: sources, then services.
pub(super) fn flow_section(view: &FlowView, pauses: Result<&[RoutePause], &str>, csrf: &str) -> Markup {
    let since = time(Some(view.first_minute_ms));
    html! {
        h2 { "Flow, last hour" }
        @if view.gateways_configured == 0 && view.services.is_empty() {
            p.muted #flow-not-configured {
                "The flow is not configured: list the gateways under " code { "[gateways] admin_urls" }
                " and the consumer services under " code { "[flow] services" } " in the replayer's config."
            }
        } @else {
            p.muted #flow-sampled {
                @match view.last_sample_ms {
                    Some(at) => { "Sampled every " (view.interval_s) " s, last at " (time(Some(at))) "; per minute since " (since) ". " }
                    None => { "No sample yet (one every " (view.interval_s) " s). " }
                }
                "This page refreshes itself while nothing is typed in it."
            }
            h3 { "Sources" }
            @if view.gateways_configured == 0 {
                p.muted #sources-not-configured { "No gateway is configured (" code { "[gateways] admin_urls" } "): the sources' requests are not shown." }
            }
            (unreachable_line(Some("gateways-unreachable"), "gateway", &view.unreachable_gateways))
            @if view.gateways_configured > 0 && view.sources.is_empty() && view.last_sample_ms.is_some() {
                p.muted #no-requests { "No request in the last hour." }
            }
            div.cards #sources {
                @for source in &view.sources { (source_card(source, view.first_minute_ms, &since)) }
            }
            h3 { "Services" }
            @if view.services.is_empty() {
                p.muted #services-not-configured { "No consumer service is configured (" code { "[flow] services" } ")." }
            }
            @if let Err(problem) = pauses {
                p.problem #pauses-unreadable { "The paused routes could not be read: " (problem) }
            }
            div.cards #services {
                @for service in &view.services {
                    @let paused: Vec<&RoutePause> = pauses.unwrap_or(&[]).iter().filter(|pause| pause.service == service.name).collect();
                    (service_card(service, &paused, view.first_minute_ms, &since, csrf))
                }
            }
        }
    }
}

fn unreachable_line(id: Option<&str>, what: &str, unreachable: &[Unreachable]) -> Markup {
    html! {
        @if !unreachable.is_empty() {
            div.problem.unreachable id=[id] {
                @for one in unreachable {
                    p { "The " (what) " at " code { (one.url) } " could not be read: " (one.reason) "; its numbers are missing below." }
                }
            }
        }
    }
}

fn source_card(source: &SourceFlow, first_minute_ms: i64, since: &str) -> Markup {
    let (accepted, refused): (u64, u64) = (source.accepted.iter().sum(), source.refused.iter().sum());
    html! {
        div.card.flow data-source=(source.name) {
            h3 { (source.name) }
            p {
                span.accepted data-count=(accepted) { (accepted) " accepted" } ", "
                span.refused data-count=(refused) { (refused) " refused" } " in the hour"
                @if source.throttled > 0 {
                    ", " span.throttled data-count=(source.throttled) {
                        (source.throttled) " throttled (over its quota, 429 " code { "quota_exceeded" } ")"
                    }
                }
            }
            (minute_chart(
                &format!("{} requests per minute", source.name),
                &[("accepted", 0, &source.accepted), ("refused", 3, &source.refused)],
                first_minute_ms,
            ))
            @if !source.top_refusals.is_empty() {
                p.refusals {
                    "Top refusals: "
                    @for (position, (code, count)) in source.top_refusals.iter().enumerate() {
                        @if position > 0 { ", " }
                        code { (code) } " (" (count) ")"
                    }
                }
            }
            p.links {
                a href=(format!("/ui/rejections?source={}", enc(&source.name))) { "rejections" } " · "
                a href=(format!("/ui/search?source={}&since={}", enc(&source.name), enc(since))) { "events" } " · "
                a href=(format!("/ui/entries?source={}", enc(&source.name))) { "dead letters" }
            }
        }
    }
}

fn service_card(
    service: &ServiceFlow,
    paused: &[&RoutePause],
    first_minute_ms: i64,
    since: &str,
    csrf: &str,
) -> Markup {
    let total = |outcome: Outcome| service.events.get(&outcome).map_or(0, |minutes| minutes.iter().sum::<u64>());
    let series: Vec<(&str, usize, &Vec<u64>)> =
        [(Outcome::Processed, 2), (Outcome::Retrying, 1), (Outcome::DeadLettered, 3)]
            .into_iter()
            .filter_map(|(outcome, color)| {
                service.events.get(&outcome).map(|minutes| (outcome.as_str(), color, minutes))
            })
            .collect();
    let lag: Vec<u64> = service.lag.iter().map(|lag| lag.map_or(0, |lag| u64::try_from(lag).unwrap_or(0))).collect();
    html! {
        div.card.flow data-service=(service.name) {
            h3 { (service.name) }
            @if !service.admin_urls_configured {
                p.muted { "No admin URL is configured for its replicas: only its lag (from Kafka) is shown." }
            } @else {
                p {
                    @for outcome in Outcome::ALL {
                        span class=(format!("outcome {}", outcome.as_str())) data-count=(total(outcome)) {
                            (total(outcome)) " " (outcome.as_str())
                        }
                        @if outcome != Outcome::DeadLettered { ", " }
                    }
                    " in the hour (" (service.replicas_answered) " of " (service.replicas_asked) " replicas answered)"
                }
                (unreachable_line(None, "replica", &service.unreachable))
                (minute_chart(&format!("{} events per minute", service.name), &series, first_minute_ms))
            }
            table.state {
                tr {
                    th { "Lag" }
                    @match &service.lag_now {
                        Ok(lag) => { td.lag data-lag=(lag) { (lag) " records (group " code { (service.group) } ")" } }
                        Err(problem) => { td.lag.problem { "unknown: " (problem) } }
                    }
                }
                @if service.replicas_answered > 0 {
                    tr { th { "Waiting" } td.waiting { (waiting(service.waiting_records, service.oldest_waiting_age_s)) } }
                    tr { th { "Breaker" } td.breaker data-open=(service.breaker_open.len()) {
                        @if service.breaker_open.is_empty() { "closed" } @else { "open: " (service.breaker_open.join(", ")) }
                    } }
                    @if service.redis_paused { tr { th { "Redis" } td.problem { "processing paused: Redis fails" } } }
                }
                tr { th { "Paused" } td.paused {
                    @if paused.is_empty() && service.paused_routes.is_empty() { "no route" }
                    @for pause in paused {
                        div { code { (pause.route) } " by " (pause.by) " since " (time(Some(pause.at_ms))) ": " (pause.reason)
                            (resume_form(csrf, &service.name, &pause.route)) }
                    }
                    @for route in service.paused_routes.iter().filter(|route| !paused.iter().any(|pause| &&pause.route == route)) {
                        div { code { (route) } " (a replica still applies it)" }
                    }
                } }
            }
            @if lag.iter().any(|&records| records > 0) {
                (minute_chart(&format!("{} lag, highest per minute", service.name), &[("lag", 4, &lag)], first_minute_ms))
            }
            details { summary { "Pause a route of " (service.name) } (pause_form(csrf, Some(&service.name))) }
            p.links {
                a href=(format!("/ui/entries?service={}", enc(&service.name))) { "dead letters" } " · "
                a href=(format!("/ui/search?since={}", enc(since))) { "event search" } " · "
                a href="/ui/rejections" { "rejections" }
            }
        }
    }
}

/// The records waiting for a route and the age of the oldest.
fn waiting(records: f64, oldest_s: f64) -> String {
    let age = match oldest_s {
        s if s < 1.0 => "under 1 s old".to_owned(),
        s if s < 120.0 => format!("{s:.0} s old"),
        s => format!("{:.0} min old", s / 60.0),
    };
    match records {
        r if r < 1.0 => "none".to_owned(),
        r if r < 2.0 => format!("1 record, {age}"),
        r => format!("{r:.0} records, the oldest {age}"),
    }
}

/// A small stacked bar chart, one bar per minute of the hour, with the highest bar's value and a legend.
fn minute_chart(label: &str, series: &[(&str, usize, &Vec<u64>)], first_minute_ms: i64) -> Markup {
    let (width, height, left, bottom) = (300.0_f64, 60.0_f64, 24.0_f64, 12.0_f64);
    let n = series.iter().map(|(_, _, minutes)| minutes.len()).max().unwrap_or(0).max(1);
    let totals: Vec<u64> =
        (0..n).map(|i| series.iter().map(|(_, _, m)| m.get(i).copied().unwrap_or(0)).sum()).collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1);
    let bar = (width - left) / n as f64;
    let mut rects = Vec::new();
    for i in 0..n {
        let mut y = height;
        for (name, color, minutes) in series {
            let count = minutes.get(i).copied().unwrap_or(0);
            if count > 0 {
                let h = (count as f64 / max as f64) * (height - 4.0);
                y -= h;
                let at = time(Some(first_minute_ms + i as i64 * MINUTE_MS));
                rects.push((
                    *color,
                    left + i as f64 * bar,
                    y,
                    h,
                    format!("{} {count} {name}", at.get(11..16).unwrap_or("")),
                ));
            }
        }
    }
    let start = time(Some(first_minute_ms));
    html! {
        svg.chart.minutes viewBox=(format!("0 0 {width} {}", height + bottom)) width="100%" role="img" aria-label=(label) {
            text x="0" y="10" { (max) }
            text x="0" y=(height) { "0" }
            @for (color, x, y, h, title) in rects {
                rect class=(format!("c{color}")) x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                    width=(format!("{:.1}", (bar - 0.5).max(0.5))) height=(format!("{h:.1}")) { title { (title) } }
            }
            text x=(left) y=(height + bottom) { (start.get(11..16).unwrap_or("")) }
            text x=(width - 24.0) y=(height + bottom) { "now" }
        }
        div.legend {
            @for (name, color, _) in series { span { span class=(format!("swatch c{color}")) {} (name) } }
        }
    }
}
