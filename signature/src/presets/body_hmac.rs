//! Presets whose signature is an HMAC of the raw body in one header (the generic `hmac` family with `{body}`),
//! plus DocuSign (one numbered header per key) and X (a CRC handshake, JSON object bodies only).

use std::borrow::Cow;

use base64::Engine;

use super::{Preset, Reply};
use crate::BuildError;
use crate::{
    FieldSource, GenericHmacOptions, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    generic::{Encoding, GenericHmac, SecretEncoding, TimestampUnit},
    handshake::Challenge,
    support::{Algorithm, BASE64_LENIENT, first_hmac_match},
};

use Algorithm::{Sha1, Sha256, Sha512};
use Encoding::{Base64, Hex};

/// An HMAC of the body in `header`, after `prefix`.
fn body(
    header: &str,
    prefix: &str,
    encoding: Encoding,
    algorithm: Algorithm,
    secret_encoding: SecretEncoding,
) -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(GenericHmac::new(&body_options(header, prefix, encoding, algorithm, secret_encoding), None)?))
}

pub(super) fn body_options(
    header: &str,
    prefix: &str,
    encoding: Encoding,
    algorithm: Algorithm,
    secret_encoding: SecretEncoding,
) -> GenericHmacOptions {
    GenericHmacOptions {
        signature_header: header.to_owned(),
        prefix: prefix.to_owned(),
        encoding,
        algorithm,
        signed_content: "{body}".to_owned(),
        id_header: None,
        timestamp_header: None,
        timestamp_unit: TimestampUnit::Seconds,
        secret_encoding,
    }
}

/// The body's SHA-256 as the id, and the type from `event_type` (when the provider has one).
fn digest_and(event_type: Vec<FieldSource>) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::BodySha256], event_type)
}

/// An unsigned id header: kept as the provider's id, the dedupe id is the body's SHA-256.
fn header_id(id: &str, event_type: Vec<FieldSource>) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::header(id)], event_type)
}

fn pointers(id: &str, event_type: &str) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::pointer(id), FieldSource::BodySha256], vec![FieldSource::pointer(event_type)])
}

const UTF8: SecretEncoding = SecretEncoding::Utf8;

pub(super) static PRESETS: &[Preset] = &[
    Preset::new(
        "meta",
        "Meta: WhatsApp Cloud API, Messenger, Instagram",
        "`X-Hub-Signature-256: sha256=<hex>` (app secret)",
        "body, HMAC-SHA256",
        "body SHA-256 / `/object`",
        |_| body("X-Hub-Signature-256", "sha256=", Hex, Sha256, UTF8),
        || digest_and(vec![FieldSource::pointer("/object")]),
    )
    .with_handshakes(&[Challenge::MetaHub]),
    Preset::new(
        "jira",
        "Jira Cloud (admin webhooks)",
        "`X-Hub-Signature: sha256=<hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`X-Atlassian-Webhook-Identifier` kept) / `/webhookEvent`",
        |_| body("X-Hub-Signature", "sha256=", Hex, Sha256, UTF8),
        || header_id("x-atlassian-webhook-identifier", vec![FieldSource::pointer("/webhookEvent")]),
    ),
    Preset::new(
        "bitbucket",
        "Bitbucket Cloud",
        "`X-Hub-Signature: sha256=<hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`X-Request-UUID` kept) / `X-Event-Key` (unsigned hint)",
        |_| body("X-Hub-Signature", "sha256=", Hex, Sha256, UTF8),
        || header_id("x-request-uuid", vec![FieldSource::header("x-event-key")]),
    ),
    Preset::new(
        "docusign",
        "DocuSign Connect",
        "`X-DocuSign-Signature-1` .. `-N: <base64>`, one per key",
        "body, HMAC-SHA256",
        "body SHA-256 / `/event`",
        |_| Ok(Box::new(DocuSign)),
        || digest_and(vec![FieldSource::pointer("/event")]),
    ),
    Preset::new(
        "razorpay",
        "Razorpay",
        "`X-Razorpay-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`X-Razorpay-Event-Id` kept) / `/event`",
        |_| body("X-Razorpay-Signature", "", Hex, Sha256, UTF8),
        || header_id("x-razorpay-event-id", vec![FieldSource::pointer("/event")]),
    ),
    Preset::new(
        "vercel",
        "Vercel",
        "`x-vercel-signature: <hex>`",
        "body, HMAC-SHA1",
        "`/id` / `/type`",
        |_| body("x-vercel-signature", "", Hex, Sha1, UTF8),
        || pointers("/id", "/type"),
    ),
    Preset::new(
        "sentry",
        "Sentry (integration platform)",
        "`Sentry-Hook-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`Request-ID` kept) / `Sentry-Hook-Resource` (unsigned hint)",
        |_| body("Sentry-Hook-Signature", "", Hex, Sha256, UTF8),
        || header_id("request-id", vec![FieldSource::header("sentry-hook-resource")]),
    ),
    Preset::new(
        "segment",
        "Segment (webhook destination)",
        "`X-Signature: <hex>`",
        "body, HMAC-SHA1",
        "`/messageId` / `/type`",
        |_| body("X-Signature", "", Hex, Sha1, UTF8),
        || pointers("/messageId", "/type"),
    ),
    Preset::new(
        "coinbase_commerce",
        "Coinbase Commerce",
        "`X-CC-Webhook-Signature: <hex>`",
        "body, HMAC-SHA256",
        "`/event/id` / `/event/type`",
        |_| body("X-CC-Webhook-Signature", "", Hex, Sha256, UTF8),
        || pointers("/event/id", "/event/type"),
    ),
    Preset::new(
        "line",
        "LINE Messaging API",
        "`x-line-signature: <base64>` (channel secret)",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("x-line-signature", "", Base64, Sha256, UTF8),
        || digest_and(vec![]),
    ),
    Preset::new(
        "xero",
        "Xero",
        "`x-xero-signature: <base64>`",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("x-xero-signature", "", Base64, Sha256, UTF8),
        || digest_and(vec![]),
    )
    .replying(Reply { status: 200, content_type: "text/plain", body: "" }),
    Preset::new(
        "notion",
        "Notion",
        "`X-Notion-Signature: sha256=<hex>` (the verification token)",
        "body, HMAC-SHA256",
        "`/id` / `/type`",
        |_| body("X-Notion-Signature", "sha256=", Hex, Sha256, UTF8),
        || pointers("/id", "/type"),
    ),
    Preset::new(
        "lemon_squeezy",
        "Lemon Squeezy",
        "`X-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 / `/meta/event_name`",
        |_| body("X-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![FieldSource::pointer("/meta/event_name")]),
    ),
    Preset::new(
        "gocardless",
        "GoCardless",
        "`Webhook-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (a batch of events) / -",
        |_| body("Webhook-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![]),
    ),
    Preset::new(
        "checkout",
        "Checkout.com",
        "`Cko-Signature: <hex>`",
        "body, HMAC-SHA256",
        "`/id` / `/type`",
        |_| body("Cko-Signature", "", Hex, Sha256, UTF8),
        || pointers("/id", "/type"),
    ),
    Preset::new(
        "cal_com",
        "Cal.com",
        "`X-Cal-Signature-256: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 / `/triggerEvent`",
        |_| body("X-Cal-Signature-256", "", Hex, Sha256, UTF8),
        || digest_and(vec![FieldSource::pointer("/triggerEvent")]),
    ),
    Preset::new(
        "attio",
        "Attio",
        "`Attio-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("Attio-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![]),
    ),
    Preset::new(
        "clickup",
        "ClickUp",
        "`X-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 / `/event`",
        |_| body("X-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![FieldSource::pointer("/event")]),
    ),
    Preset::new(
        "gitea",
        "Gitea, Forgejo",
        "`X-Gitea-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`X-Gitea-Delivery` kept) / `X-Gitea-Event` (unsigned hint)",
        |_| body("X-Gitea-Signature", "", Hex, Sha256, UTF8),
        || header_id("x-gitea-delivery", vec![FieldSource::header("x-gitea-event")]),
    ),
    Preset::new(
        "paystack",
        "Paystack",
        "`x-paystack-signature: <hex>` (secret key)",
        "body, HMAC-SHA512",
        "body SHA-256 / `/event`",
        |_| body("x-paystack-signature", "", Hex, Sha512, UTF8),
        || digest_and(vec![FieldSource::pointer("/event")]),
    ),
    Preset::new(
        "helpscout",
        "Help Scout",
        "`X-HelpScout-Signature: <base64>`",
        "body, HMAC-SHA1",
        "body SHA-256 / `X-HelpScout-Event` (unsigned hint)",
        |_| body("X-HelpScout-Signature", "", Base64, Sha1, UTF8),
        || digest_and(vec![FieldSource::header("x-helpscout-event")]),
    ),
    Preset::new(
        "hookdeck",
        "Hookdeck (outbound)",
        "`x-hookdeck-signature: <base64>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`x-hookdeck-eventid` kept) / -",
        |_| body("x-hookdeck-signature", "", Base64, Sha256, UTF8),
        || header_id("x-hookdeck-eventid", vec![]),
    ),
    Preset::new(
        "dropbox",
        "Dropbox",
        "`X-Dropbox-Signature: <hex>` (app secret)",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("X-Dropbox-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![]),
    )
    .with_handshakes(&[Challenge::ChallengeEcho]),
    Preset::new(
        "nylas",
        "Nylas (API v3)",
        "`x-nylas-signature: <hex>`",
        "body, HMAC-SHA256",
        "`/id` / `/type`",
        |_| body("x-nylas-signature", "", Hex, Sha256, UTF8),
        || pointers("/id", "/type"),
    )
    .with_handshakes(&[Challenge::ChallengeEcho]),
    Preset::new(
        "tally",
        "Tally",
        "`Tally-Signature: <base64>`",
        "body, HMAC-SHA256",
        "`/eventId` / `/eventType`",
        |_| body("Tally-Signature", "", Base64, Sha256, UTF8),
        || pointers("/eventId", "/eventType"),
    ),
    Preset::new(
        "airtable",
        "Airtable",
        "`X-Airtable-Content-MAC: hmac-sha256=<hex>` (MAC secret, base64)",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("X-Airtable-Content-MAC", "hmac-sha256=", Hex, Sha256, SecretEncoding::Base64),
        || digest_and(vec![]),
    ),
    Preset::new(
        "launchdarkly",
        "LaunchDarkly",
        "`X-LD-Signature: <hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 / `/kind`",
        |_| body("X-LD-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![FieldSource::pointer("/kind")]),
    ),
    Preset::new(
        "discourse",
        "Discourse",
        "`X-Discourse-Event-Signature: sha256=<hex>`",
        "body, HMAC-SHA256",
        "body SHA-256 (`X-Discourse-Event-Id` kept) / `X-Discourse-Event` (unsigned hint)",
        |_| body("X-Discourse-Event-Signature", "sha256=", Hex, Sha256, UTF8),
        || header_id("x-discourse-event-id", vec![FieldSource::header("x-discourse-event")]),
    ),
    Preset::new(
        "terraform_cloud",
        "HCP Terraform (Terraform Cloud) notifications",
        "`X-TFE-Notification-Signature: <hex>`",
        "body, HMAC-SHA512",
        "body SHA-256 / -",
        |_| body("X-TFE-Notification-Signature", "", Hex, Sha512, UTF8),
        || digest_and(vec![]),
    ),
    Preset::new(
        "pusher",
        "Pusher Channels",
        "`X-Pusher-Signature: <hex>` (app secret)",
        "body, HMAC-SHA256",
        "body SHA-256 / -",
        |_| body("X-Pusher-Signature", "", Hex, Sha256, UTF8),
        || digest_and(vec![]),
    ),
    Preset::new(
        "onfleet",
        "Onfleet",
        "`X-Onfleet-Signature: <hex>` (secret, hex)",
        "body, HMAC-SHA512",
        "body SHA-256 / `/triggerName`",
        |_| body("X-Onfleet-Signature", "", Hex, Sha512, SecretEncoding::Hex),
        || digest_and(vec![FieldSource::pointer("/triggerName")]),
    ),
    Preset::new(
        "easypost",
        "EasyPost",
        "`X-Hmac-Signature: hmac-sha256-hex=<hex>`",
        "body, HMAC-SHA256",
        "`/id` / `/description`",
        |_| body("X-Hmac-Signature", "hmac-sha256-hex=", Hex, Sha256, UTF8),
        || pointers("/id", "/description"),
    ),
    Preset::new(
        "x",
        "X (Twitter) Account Activity",
        "`x-twitter-webhooks-signature: sha256=<base64>` (consumer secret)",
        "body (a JSON object), HMAC-SHA256",
        "body SHA-256 / -",
        |_| Ok(Box::new(JsonObjectOnly(GenericHmac::new(&x_options(), None)?))),
        || digest_and(vec![]),
    )
    .with_handshakes(&[Challenge::XCrc]),
];

fn x_options() -> GenericHmacOptions {
    body_options("x-twitter-webhooks-signature", "sha256=", Base64, Sha256, UTF8)
}

/// DocuSign Connect signs the body once per configured key (up to 100) and sends each in its own numbered header:
/// every `X-DocuSign-Signature-<n>` is a candidate.
#[derive(Debug)]
struct DocuSign;

const DOCUSIGN_PREFIX: &str = "x-docusign-signature-";

impl Scheme for DocuSign {
    fn name(&self) -> &'static str {
        "docusign"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let mut any = false;
        let mut candidates = Vec::new();
        for (name, value) in request.headers {
            let Some(number) = name.as_str().strip_prefix(DOCUSIGN_PREFIX) else { continue };
            if number.parse::<u8>().is_ok_and(|number| (1..=100).contains(&number)) {
                any = true;
                let decoded = value.to_str().ok().and_then(|text| BASE64_LENIENT.decode(text.trim()).ok());
                candidates.extend(decoded.filter(|bytes| bytes.len() == 32));
            }
        }
        if !any {
            return Err(VerifyError::MissingSignature(Cow::Borrowed("X-DocuSign-Signature-1")));
        }
        if candidates.is_empty() {
            return Err(VerifyError::MalformedSignature(Cow::Borrowed("X-DocuSign-Signature-1")));
        }
        first_hmac_match(Sha256, secrets, &[request.body.as_ref()], &candidates)
    }

    fn identity(&self) -> IdentityRule {
        digest_and(vec![])
    }
}

/// X's CRC handshake answers an HMAC of a caller-chosen token with the very secret POST bodies are signed with;
/// the token's alphabet has no `{`, so refusing every body that is not a JSON object keeps such an answer from
/// ever being a valid delivery signature.
#[derive(Debug)]
struct JsonObjectOnly(GenericHmac);

impl Scheme for JsonObjectOnly {
    fn signs_timestamp(&self) -> bool {
        self.0.signs_timestamp()
    }

    fn name(&self) -> &'static str {
        "x"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        if request.body.iter().find(|byte| !byte.is_ascii_whitespace()) != Some(&b'{') {
            return Err(VerifyError::UnsupportedContentType("application/json"));
        }
        self.0.verify(request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        digest_and(vec![])
    }

    fn refuses_non_object_bodies(&self) -> bool {
        true
    }
}
