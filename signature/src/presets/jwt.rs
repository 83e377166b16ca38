//! Presets of the JWT family ([`crate::jwt`]): an HS256 token in a header whose claims bind the body
//! (Netlify's `sha256`, Vonage's `payload_hash`), or only say whom it is for and until when (monday.com, a token
//! scheme: `allow_token = true`).

use super::Preset;
use crate::BuildError;
use crate::{
    FieldSource, IdentityRule, Scheme,
    jwt::{JwtOptions, JwtScheme},
    support::Tolerance,
};

fn build(options: JwtOptions, tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    Ok(Box::new(JwtScheme::new(&options, tolerance)?))
}

/// Netlify deploy notifications with a JWS secret token: `X-Webhook-Signature` holds an HS256 JWT with
/// `iss: "netlify"` and `sha256`, the body's hex SHA-256. No time is signed.
fn netlify(tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    let options = JwtOptions {
        header: "X-Webhook-Signature".to_owned(),
        issuer: Some("netlify".to_owned()),
        body_sha256_claim: Some("sha256".to_owned()),
        ..JwtOptions::default()
    };
    build(options, tolerance)
}

/// Vonage signed webhooks (Messages, Dispatch, Voice): `Authorization: Bearer <HS256 JWT>` signed with the
/// account's signature secret; claims `iss: "Vonage"`, `iat`, `jti`, `api_key`, `application_id` and
/// `payload_hash`, the body's hex SHA-256.
fn vonage(tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    let options = JwtOptions {
        prefix: "Bearer ".to_owned(),
        issuer: Some("Vonage".to_owned()),
        body_sha256_claim: Some("payload_hash".to_owned()),
        require_iat: true,
        ..JwtOptions::default()
    };
    build(options, tolerance)
}

/// monday.com app integrations and board webhooks: `Authorization: <HS256 JWT>` (no `Bearer`) signed with the
/// app's signing secret (client secret for lifecycle webhooks); claims `aud` (the endpoint URL: the source's
/// `public_url`), `iat`, `exp`, `accountId`, `userId`, `shortLivedToken`. Nothing binds the body: a token.
fn monday(tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
    let options =
        JwtOptions { audience_is_public_url: true, require_iat: true, require_exp: true, ..JwtOptions::default() };
    build(options, tolerance)
}

pub(super) static PRESETS: &[Preset] = &[
    Preset::new(
        "netlify",
        "Netlify (deploy notifications, JWS secret token)",
        "`X-Webhook-Signature: <JWT>`, HS256, `iss` `netlify`",
        "body, by the `sha256` claim (hex SHA-256)",
        "body SHA-256 / `/state`",
        netlify,
        || IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/state")]),
    ),
    Preset::new(
        "vonage",
        "Vonage signed webhooks (Messages, Dispatch, Voice)",
        "`Authorization: Bearer <JWT>`, HS256 (signature secret), `iss` `Vonage`",
        "body, by the `payload_hash` claim (hex SHA-256)",
        "body SHA-256 / `/status`",
        vonage,
        || IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/status")]),
    )
    .timed("`iat`, Unix s (300 s); `exp` if sent (60 s leeway)"),
    Preset::new(
        "monday",
        "monday.com (app integrations, board webhooks); `public_url` required",
        "`Authorization: <JWT>`, HS256 (signing secret), `aud` = `public_url`",
        "- (token: the claims bind no body)",
        "body SHA-256 / `/event/type`",
        monday,
        || IdentityRule::new(vec![FieldSource::BodySha256], vec![FieldSource::pointer("/event/type")]),
    )
    .timed("`iat`, Unix s (300 s), and `exp` (60 s leeway)"),
];
