//! Presets whose proof is not a signature of the body: a token or HTTP Basic credentials the provider presents
//! (the token family, which a source must opt in to with `allow_token = true`), and signatures carried in the
//! body over some of its fields (the body-fields family: Mailgun, Adyen).

use super::{Preset, Reply};
use crate::BuildError;
use crate::{
    FieldSource, IdentityRule, Scheme,
    body_fields::{BodyFields, BodyFieldsOptions, BodyFormat},
    generic::{Encoding, SecretEncoding, TimestampUnit},
    handshake::Challenge,
    support::{Algorithm, Tolerance},
    token::{Token, TokenOptions},
};

fn header(name: &str) -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(Token::new(&TokenOptions { header: Some(name.to_owned()), ..TokenOptions::default() })?))
}

fn basic() -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(Token::new(&TokenOptions { basic: true, ..TokenOptions::default() })?))
}

fn body_pointer(pointer: &str) -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(Token::new(&TokenOptions { json_pointer: Some(pointer.to_owned()), ..TokenOptions::default() })?))
}

fn query(name: &str) -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(Token::new(&TokenOptions { query: Some(name.to_owned()), ..TokenOptions::default() })?))
}

fn pointers(id: &str, event_type: &str) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::pointer(id), FieldSource::BodySha256], vec![FieldSource::pointer(event_type)])
}

fn digest_and(event_type: Vec<FieldSource>) -> IdentityRule {
    IdentityRule::new(vec![FieldSource::BodySha256], event_type)
}

/// Mailgun: `signature.signature` = hex HMAC-SHA256(signing key, `signature.timestamp` + `signature.token`).
fn mailgun(tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    let options = BodyFieldsOptions {
        format: BodyFormat::Json,
        signature: "/signature/signature".to_owned(),
        signed_fields: vec!["/signature/timestamp".to_owned(), "/signature/token".to_owned()],
        separator: String::new(),
        timestamp: Some("/signature/timestamp".to_owned()),
        timestamp_unit: TimestampUnit::Seconds,
        event_type: None,
        prefix: String::new(),
        encoding: Encoding::Hex,
        algorithm: Algorithm::Sha256,
        secret_encoding: SecretEncoding::Utf8,
        missing_fields_as_empty: false,
        single_item: None,
    };
    Ok(Box::new(BodyFields::new(&options, Some(tolerance.unwrap_or(Tolerance::seconds(300))))?))
}

/// The notification item Adyen signs (one per request).
const ADYEN_ITEM: &str = "/notificationItems/0/NotificationRequestItem";

/// Adyen standard notifications: `additionalData.hmacSignature` = base64 HMAC-SHA256(hex-decoded key,
/// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`),
/// absent fields signing as empty.
fn adyen(_tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    let field = |name: &str| format!("{ADYEN_ITEM}/{name}");
    let options = BodyFieldsOptions {
        format: BodyFormat::Json,
        signature: field("additionalData/hmacSignature"),
        signed_fields: [
            "pspReference",
            "originalReference",
            "merchantAccountCode",
            "merchantReference",
            "amount/value",
            "amount/currency",
            "eventCode",
            "success",
        ]
        .into_iter()
        .map(field)
        .collect(),
        separator: ":".to_owned(),
        timestamp: None,
        timestamp_unit: TimestampUnit::Seconds,
        event_type: Some(field("eventCode")),
        prefix: String::new(),
        encoding: Encoding::Base64,
        algorithm: Algorithm::Sha256,
        secret_encoding: SecretEncoding::Hex,
        missing_fields_as_empty: true,
        single_item: Some("/notificationItems".to_owned()),
    };
    Ok(Box::new(BodyFields::new(&options, None)?))
}

pub(super) static PRESETS: &[Preset] = &[
    Preset::new(
        "mailgun",
        "Mailgun (JSON webhooks)",
        "body `/signature/signature`, hex (signing key)",
        "`/signature/timestamp` + `/signature/token`, HMAC-SHA256; the event data is **not** signed",
        "SHA-256 of the signed string / -",
        mailgun,
        IdentityRule::default,
    )
    .timed("body `/signature/timestamp`, Unix s (300 s)"),
    Preset::new(
        "adyen",
        "Adyen (standard notifications)",
        "body `additionalData.hmacSignature`, base64 (HMAC key, hex)",
        "`pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success` of the one notification item, HMAC-SHA256",
        "SHA-256 of the signed string / `eventCode` (signed)",
        adyen,
        IdentityRule::default,
    )
    .replying(Reply { status: 200, content_type: "text/plain", body: "[accepted]" }),
    Preset::new(
        "okta",
        "Okta event hooks",
        "token in `Authorization` (the configured value, exactly)",
        "- (token)",
        "`/eventId` / `/eventType`",
        |_| header("Authorization"),
        || pointers("/eventId", "/eventType"),
    )
    .with_handshakes(&[Challenge::Okta]),
    Preset::new(
        "postmark",
        "Postmark",
        "HTTP Basic credentials in the webhook URL (`user:password`)",
        "- (token)",
        "body SHA-256 / `/RecordType`",
        |_| basic(),
        || digest_and(vec![FieldSource::pointer("/RecordType")]),
    ),
    Preset::new(
        "telegram",
        "Telegram Bot API",
        "token in `X-Telegram-Bot-Api-Secret-Token` (`secret_token` of setWebhook)",
        "- (token)",
        "`/update_id` / -",
        |_| header("X-Telegram-Bot-Api-Secret-Token"),
        || IdentityRule::new(vec![FieldSource::pointer("/update_id"), FieldSource::BodySha256], vec![]),
    ),
    Preset::new(
        "auth0",
        "Auth0 log streams (custom webhook)",
        "token in `Authorization` (the configured value, exactly)",
        "- (token)",
        "body SHA-256 (a batch of logs) / -",
        |_| header("Authorization"),
        || digest_and(vec![]),
    ),
    Preset::new(
        "chargebee",
        "Chargebee",
        "HTTP Basic credentials (`user:password`)",
        "- (token)",
        "`/id` / `/event_type`",
        |_| basic(),
        || pointers("/id", "/event_type"),
    ),
    Preset::new(
        "pipedrive",
        "Pipedrive",
        "HTTP Basic credentials (`user:password`)",
        "- (token)",
        "body SHA-256 / -",
        |_| basic(),
        || digest_and(vec![]),
    ),
    Preset::new(
        "azure_devops",
        "Azure DevOps service hooks",
        "HTTP Basic credentials (`user:password`)",
        "- (token)",
        "`/id` / `/eventType`",
        |_| basic(),
        || pointers("/id", "/eventType"),
    ),
    Preset::new(
        "azure_event_grid",
        "Azure Event Grid (Event Grid schema)",
        "token in the URL's `code` query parameter",
        "- (token)",
        "body SHA-256 / `/0/eventType`",
        |_| query("code"),
        || digest_and(vec![FieldSource::pointer("/0/eventType")]),
    )
    .with_handshakes(&[Challenge::EventGrid]),
    Preset::new(
        "microsoft_graph",
        "Microsoft Graph change notifications",
        "token in every `value[].clientState`",
        "- (token)",
        "body SHA-256 / `/value/0/changeType`",
        |_| body_pointer("/value/*/clientState"),
        || digest_and(vec![FieldSource::pointer("/value/0/changeType")]),
    )
    .with_handshakes(&[Challenge::GraphValidation]),
    Preset::new(
        "figma",
        "Figma (webhooks v2)",
        "token in body `/passcode`",
        "- (token)",
        "body SHA-256 / `/event_type`",
        |_| body_pointer("/passcode"),
        || digest_and(vec![FieldSource::pointer("/event_type")]),
    ),
];
