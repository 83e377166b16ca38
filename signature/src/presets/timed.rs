//! Presets that sign a timestamp: the generic `hmac` family with a timestamp header (Unix seconds, ms or RFC
//! 3339), the structured-header family (`t=..,v1=..`), the Standard Webhooks family, and Telnyx's Ed25519.

use super::Preset;
use crate::BuildError;
use crate::{
    FieldSource, GenericHmacOptions, IdentityRule, Scheme,
    generic::{Encoding, GenericHmac, SecretEncoding, TimestampUnit},
    standard_webhooks::StandardWebhooks,
    structured::{Structured, StructuredOptions},
    support::{Algorithm, Tolerance},
    telnyx::Telnyx,
};

/// An HMAC-SHA256 over `template` with the timestamp from `timestamp_header`, `default_s` seconds either way.
#[allow(clippy::too_many_arguments)] // One call per preset row: naming each argument would only repeat the table.
fn timed_hmac(
    tolerance: Option<Tolerance>,
    default_s: u64,
    header: &str,
    prefix: &str,
    encoding: Encoding,
    template: &str,
    timestamp_header: &str,
    unit: TimestampUnit,
) -> Result<Box<dyn Scheme>, BuildError> {
    let options = GenericHmacOptions {
        signature_header: header.to_owned(),
        prefix: prefix.to_owned(),
        encoding,
        algorithm: Algorithm::Sha256,
        signed_content: template.to_owned(),
        id_header: None,
        timestamp_header: Some(timestamp_header.to_owned()),
        timestamp_unit: unit,
        secret_encoding: SecretEncoding::Utf8,
    };
    Ok(Box::new(GenericHmac::new(&options, Some(tolerance.unwrap_or(Tolerance::seconds(default_s))))?))
}

/// The structured header `options`, `default_s` seconds either way when it has a timestamp.
fn structured(
    tolerance: Option<Tolerance>,
    default_s: u64,
    options: StructuredOptions,
) -> Result<Box<dyn Scheme>, BuildError> {
    let tolerance = options.timestamp_key.as_ref().map(|_| tolerance.unwrap_or(Tolerance::seconds(default_s)));
    Ok(Box::new(Structured::new(&options, tolerance)?))
}

fn typed(event_type: &str) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer(event_type)])
}

fn pointers(id: &str, event_type: &str) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::pointer(id), FieldSource::BodySha256], vec![FieldSource::pointer(event_type)])
}

pub(super) static PRESETS: &[Preset] = &[
    Preset::new(
        "zendesk",
        "Zendesk",
        "`X-Zendesk-Webhook-Signature: <base64>`",
        "`<X-Zendesk-Webhook-Signature-Timestamp>` + body, HMAC-SHA256",
        "body SHA-256 / `/type`",
        |tolerance| {
            timed_hmac(
                tolerance,
                300,
                "X-Zendesk-Webhook-Signature",
                "",
                Encoding::Base64,
                "{timestamp}{body}",
                "X-Zendesk-Webhook-Signature-Timestamp",
                TimestampUnit::Rfc3339,
            )
        },
        || typed("/type"),
    )
    .timed("header, RFC 3339 (300 s)"),
    Preset::new(
        "customer_io",
        "Customer.io (reporting webhooks)",
        "`X-CIO-Signature: <hex>`",
        "`v0:<X-CIO-Timestamp>:` + body, HMAC-SHA256",
        "`/event_id` / `/metric`",
        |tolerance| {
            timed_hmac(
                tolerance,
                300,
                "X-CIO-Signature",
                "",
                Encoding::Hex,
                "v0:{timestamp}:{body}",
                "X-CIO-Timestamp",
                TimestampUnit::Seconds,
            )
        },
        || pointers("/event_id", "/metric"),
    )
    .timed("header, Unix s (300 s)"),
    Preset::new(
        "webflow",
        "Webflow",
        "`x-webflow-signature: <hex>`",
        "`<x-webflow-timestamp>:` + body, HMAC-SHA256",
        "body SHA-256 / `/triggerType`",
        |tolerance| {
            timed_hmac(
                tolerance,
                300,
                "x-webflow-signature",
                "",
                Encoding::Hex,
                "{timestamp}:{body}",
                "x-webflow-timestamp",
                TimestampUnit::Milliseconds,
            )
        },
        || typed("/triggerType"),
    )
    .timed("header, Unix ms (300 s)"),
    Preset::new(
        "frameio",
        "Frame.io",
        "`X-Frameio-Signature: v0=<hex>`",
        "`v0:<X-Frameio-Request-Timestamp>:` + body, HMAC-SHA256",
        "body SHA-256 / `/type`",
        |tolerance| {
            timed_hmac(
                tolerance,
                300,
                "X-Frameio-Signature",
                "v0=",
                Encoding::Hex,
                "v0:{timestamp}:{body}",
                "X-Frameio-Request-Timestamp",
                TimestampUnit::Seconds,
            )
        },
        || typed("/type"),
    )
    .timed("header, Unix s (300 s)"),
    Preset::new(
        "calendly",
        "Calendly",
        "`Calendly-Webhook-Signature: t=<s>,v1=<hex>`",
        "`<t>.` + body, HMAC-SHA256",
        "body SHA-256 / `/event`",
        |tolerance| structured(tolerance, 180, StructuredOptions::new("Calendly-Webhook-Signature")),
        || typed("/event"),
    )
    .timed("`t=`, Unix s (180 s)"),
    Preset::new(
        "workos",
        "WorkOS",
        "`WorkOS-Signature: t=<ms>, v1=<hex>`",
        "`<t>.` + body, HMAC-SHA256",
        "`/id` / `/event`",
        |tolerance| {
            let options = StructuredOptions {
                timestamp_unit: TimestampUnit::Milliseconds,
                ..StructuredOptions::new("WorkOS-Signature")
            };
            structured(tolerance, 180, options)
        },
        || pointers("/id", "/event"),
    )
    .timed("`t=`, Unix ms (180 s)"),
    Preset::new(
        "mux",
        "Mux",
        "`Mux-Signature: t=<s>,v1=<hex>`",
        "`<t>.` + body, HMAC-SHA256",
        "`/id` / `/type`",
        |tolerance| structured(tolerance, 300, StructuredOptions::new("Mux-Signature")),
        || pointers("/id", "/type"),
    )
    .timed("`t=`, Unix s (300 s)"),
    Preset::new(
        "elevenlabs",
        "ElevenLabs",
        "`ElevenLabs-Signature: t=<s>,v0=<hex>`",
        "`<t>.` + body, HMAC-SHA256",
        "body SHA-256 / `/type`",
        |tolerance| {
            let options =
                StructuredOptions { signature_key: "v0".to_owned(), ..StructuredOptions::new("ElevenLabs-Signature") };
            structured(tolerance, 1800, options)
        },
        || typed("/type"),
    )
    .timed("`t=`, Unix s (1800 s)"),
    Preset::new(
        "buildkite",
        "Buildkite",
        "`X-Buildkite-Signature: timestamp=<s>,signature=<hex>`",
        "`<timestamp>.` + body, HMAC-SHA256",
        "body SHA-256 / `/event`",
        |tolerance| {
            let options = StructuredOptions {
                timestamp_key: Some("timestamp".to_owned()),
                signature_key: "signature".to_owned(),
                ..StructuredOptions::new("X-Buildkite-Signature")
            };
            structured(tolerance, 300, options)
        },
        || typed("/event"),
    )
    .timed("`timestamp=`, Unix s (300 s)"),
    Preset::new(
        "circleci",
        "CircleCI",
        "`circleci-signature: v1=<hex>[,v1=..]`",
        "body, HMAC-SHA256",
        "`/id` / `/type`",
        |tolerance| {
            let options = StructuredOptions { timestamp_key: None, ..StructuredOptions::new("circleci-signature") };
            structured(tolerance, 0, options)
        },
        || pointers("/id", "/type"),
    ),
    Preset::new(
        "openai",
        "OpenAI",
        "`webhook-signature: v1,<base64>` (Standard Webhooks; `whsec_` secret)",
        "`<webhook-id>.<webhook-timestamp>.` + body, HMAC-SHA256",
        "`webhook-id` (signed) / `/type`",
        |tolerance| Ok(Box::new(StandardWebhooks::standard(Some(tolerance.unwrap_or(Tolerance::seconds(300)))))),
        || IdentityRule::new(vec![FieldSource::header("webhook-id")], vec![FieldSource::pointer("/type")]),
    )
    .timed("`webhook-timestamp`, Unix s (300 s)"),
    Preset::new(
        "replicate",
        "Replicate",
        "`webhook-signature: v1,<base64>` (Standard Webhooks; `whsec_` secret)",
        "`<webhook-id>.<webhook-timestamp>.` + body, HMAC-SHA256",
        "`webhook-id` (signed) / `/status`",
        |tolerance| Ok(Box::new(StandardWebhooks::standard(Some(tolerance.unwrap_or(Tolerance::seconds(300)))))),
        || IdentityRule::new(vec![FieldSource::header("webhook-id")], vec![FieldSource::pointer("/status")]),
    )
    .timed("`webhook-timestamp`, Unix s (300 s)"),
    Preset::new(
        "telnyx",
        "Telnyx (API v2)",
        "`telnyx-signature-ed25519: <base64>`; the secret is the account's public key (base64)",
        "`<telnyx-timestamp>\\|` + body, Ed25519",
        "`/data/id` / `/data/event_type`",
        |tolerance| {
            Ok(Box::new(Telnyx::new(tolerance.unwrap_or(Tolerance::seconds(crate::telnyx::DEFAULT_TOLERANCE_S)))))
        },
        || {
            IdentityRule::new(
                vec![FieldSource::pointer("/data/id"), FieldSource::BodySha256],
                vec![FieldSource::pointer("/data/event_type")],
            )
        },
    )
    .timed("header, Unix s, checked first (300 s)"),
];
