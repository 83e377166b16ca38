//! A scheme from its config name: [`build`] with a source's [`SchemeOptions`], and the names it knows.

use super::{
    GenericHmacOptions, GitHub, Scheme, body_fields, discord, fetched, generic, gitlab, hubspot, intercom, jwt, linear,
    paddle, pagerduty, presets, sendgrid, shopify, slack, square, standard_webhooks, stripe, structured, support,
    token, twilio, twitch, typeform, unsigned, woocommerce, zoom,
};
use crate::BuildError;

/// Per-source options a scheme is built with.
#[derive(Debug, Clone, Default)]
pub struct SchemeOptions {
    /// Overrides the scheme's timestamp tolerance (seconds, both directions). Refused by schemes that sign no
    /// timestamp ([`Scheme::signs_timestamp`]) and by `hmac` without a `timestamp_header`; enables the check for
    /// Zoom, which documents none.
    pub tolerance_s: Option<u64>,
    /// The generic HMAC scheme's settings (required for `scheme = "hmac"`).
    pub hmac: Option<GenericHmacOptions>,
    /// The structured-header family's settings (required for `scheme = "structured"`).
    pub structured: Option<structured::StructuredOptions>,
    /// The body-fields family's settings (required for `scheme = "body_fields"`).
    pub body_fields: Option<body_fields::BodyFieldsOptions>,
    /// The token family's settings (required for `scheme = "token"`).
    pub token: Option<token::TokenOptions>,
    /// The JWT family's settings (required for `scheme = "jwt"`).
    pub jwt: Option<jwt::JwtOptions>,
}

/// The schemes with modules of their own and the configurable families, for config validation messages and
/// docs/configuration/gateway.md; the named presets are [`presets::all`] (docs/providers.md).
pub const SCHEME_NAMES: &[&str] = &[
    "stripe",
    "github",
    "shopify",
    "slack",
    "standard_webhooks",
    "svix",
    "clerk",
    "resend",
    "gitlab",
    "gitlab_signing",
    "paddle",
    "pagerduty",
    "linear",
    "zoom",
    "twitch",
    "square",
    "twilio",
    "hubspot",
    "typeform",
    "woocommerce",
    "intercom",
    "discord",
    "sendgrid",
    "sns",
    "paypal",
    "google_pubsub",
    "plaid",
    "plaid_sandbox",
    "hmac",
    "structured",
    "body_fields",
    "token",
    "jwt",
    "none",
];

/// Every name [`build`] knows: [`SCHEME_NAMES`] and the presets.
pub fn all_names() -> impl Iterator<Item = &'static str> {
    SCHEME_NAMES.iter().copied().chain(presets::all().map(|preset| preset.name))
}

/// The scheme registered under a config name, configured with `options`; an error names what is wrong.
pub fn build(name: &str, options: &SchemeOptions) -> Result<Box<dyn Scheme>, BuildError> {
    let tolerance = options.tolerance_s.map(support::Tolerance::seconds);
    let with_default = |default_s: u64| tolerance.or(Some(support::Tolerance::seconds(default_s)));
    let scheme: Box<dyn Scheme> = match name {
        "stripe" => Box::new(stripe::Stripe::new(with_default(stripe::DEFAULT_TOLERANCE_S))),
        "github" => Box::new(GitHub),
        "shopify" => Box::new(shopify::Shopify),
        "slack" => Box::new(slack::Slack::new(with_default(slack::DEFAULT_TOLERANCE_S))),
        "standard_webhooks" => Box::new(standard_webhooks::StandardWebhooks::standard(with_default(300))),
        "svix" | "clerk" | "resend" => Box::new(standard_webhooks::StandardWebhooks::svix(name, with_default(300))),
        "gitlab" => Box::new(gitlab::GitLabToken),
        "gitlab_signing" => Box::new(standard_webhooks::StandardWebhooks::gitlab(with_default(300))),
        "paddle" => Box::new(paddle::Paddle::new(with_default(paddle::DEFAULT_TOLERANCE_S))),
        "pagerduty" => Box::new(pagerduty::PagerDuty),
        "linear" => Box::new(linear::Linear::new(with_default(linear::DEFAULT_TOLERANCE_S))),
        "zoom" => Box::new(zoom::Zoom::new(tolerance)),
        "twitch" => Box::new(twitch::Twitch::new(with_default(twitch::DEFAULT_TOLERANCE_S))),
        "square" => Box::new(square::Square),
        "twilio" => Box::new(twilio::Twilio),
        "hubspot" => Box::new(hubspot::HubSpot::new(with_default(hubspot::DEFAULT_TOLERANCE_S))),
        "typeform" => Box::new(typeform::Typeform),
        "woocommerce" => Box::new(woocommerce::WooCommerce),
        "intercom" => Box::new(intercom::Intercom),
        "discord" => Box::new(discord::Discord::new(
            tolerance.unwrap_or(support::Tolerance::seconds(discord::DEFAULT_TOLERANCE_S)),
        )),
        "sendgrid" => Box::new(sendgrid::SendGrid::new(
            tolerance.unwrap_or(support::Tolerance::seconds(sendgrid::DEFAULT_TOLERANCE_S)),
        )),
        "sns" => Box::new(fetched::sns::Sns::new(
            tolerance.unwrap_or(support::Tolerance::seconds(fetched::sns::DEFAULT_TOLERANCE_S)),
        )),
        "paypal" => Box::new(fetched::paypal::PayPal::new(
            tolerance.unwrap_or(support::Tolerance::seconds(fetched::paypal::DEFAULT_TOLERANCE_S)),
        )),
        "google_pubsub" => Box::new(fetched::google_pubsub::GooglePubSub::new(
            tolerance.unwrap_or(support::Tolerance::seconds(fetched::google_pubsub::DEFAULT_TOLERANCE_S)),
        )),
        "plaid" | "plaid_sandbox" => Box::new(fetched::plaid::Plaid::new(
            if name == "plaid" {
                fetched::plaid::Environment::Production
            } else {
                fetched::plaid::Environment::Sandbox
            },
            tolerance.unwrap_or(support::Tolerance::seconds(fetched::plaid::DEFAULT_TOLERANCE_S)),
        )),
        "hmac" => {
            let hmac = options.hmac.as_ref().ok_or("scheme `hmac` needs a [sources.hmac] table")?;
            Box::new(generic::GenericHmac::new(hmac, tolerance)?)
        }
        "structured" => {
            let table = options.structured.as_ref().ok_or("scheme `structured` needs a [sources.structured] table")?;
            Box::new(structured::Structured::new(table, tolerance)?)
        }
        "body_fields" => {
            let table =
                options.body_fields.as_ref().ok_or("scheme `body_fields` needs a [sources.body_fields] table")?;
            Box::new(body_fields::BodyFields::new(table, tolerance)?)
        }
        "token" => {
            let table = options.token.as_ref().ok_or("scheme `token` needs a [sources.token] table")?;
            Box::new(token::Token::new(table)?)
        }
        "jwt" => {
            let table = options.jwt.as_ref().ok_or("scheme `jwt` needs a [sources.jwt] table")?;
            Box::new(jwt::JwtScheme::new(table, tolerance)?)
        }
        "none" => Box::new(unsigned::Unsigned),
        other => match presets::find(other) {
            Some(preset) => preset.build(tolerance)?,
            None => {
                return Err(BuildError::UnknownScheme {
                    name: other.to_owned(),
                    known: SCHEME_NAMES.join(", "),
                    presets: presets::all().count(),
                });
            }
        },
    };
    // Decided by the built scheme (its preset's `timed`, its family's options), never by a list of names.
    if options.tolerance_s.is_some() && !scheme.signs_timestamp() {
        return Err(BuildError::ToleranceWithoutTimestamp(name.to_owned()));
    }
    Ok(scheme)
}

/// The scheme registered under a config name with default options, if any.
pub fn scheme_by_name(name: &str) -> Option<Box<dyn Scheme>> {
    build(name, &SchemeOptions::default()).ok()
}
