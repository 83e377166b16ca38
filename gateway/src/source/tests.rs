use hookline_common::config::SecretRef;

use super::*;

fn secret_file(contents: &str) -> String {
    let path = std::env::temp_dir().join(format!("hookline-source-test-{}", uuid_like()));
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

fn uuid_like() -> String {
    format!("{}-{:?}", std::process::id(), std::time::SystemTime::now())
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// A GitHub source that routes on `X-GitHub-Event`, as the shipped configs do.
fn github(secrets: Vec<SecretRef>) -> SourceConfig {
    SourceConfig { type_from_header: Some(true), ..SourceConfig::new("gh", "github", secrets) }
}

fn problems_of(config: &SourceConfig) -> String {
    Source::from_config(config, "inbound").err().unwrap_or_default().join("\n")
}

#[test]
fn the_signature_of_an_untimed_scheme_is_not_forwarded_without_an_opt_in() {
    let file = secret_file("a-github-webhook-secret");
    for (scheme, header) in [
        ("github", "X-Hub-Signature-256"),
        ("github", "X-Hub-Signature"),
        ("shopify", "X-Shopify-Hmac-Sha256"),
        ("woocommerce", "X-WC-Webhook-Signature"),
    ] {
        let mut config = SourceConfig {
            type_from_header: Some(true),
            ..SourceConfig::new("s", scheme, vec![SecretRef::from_file("a", &file)])
        };
        config.forward_headers = vec![header.into(), "User-Agent".into()];
        assert!(problems_of(&config).contains("signs no timestamp"), "{scheme} {header}: {}", problems_of(&config));
        config.forward_untimed_signature = true;
        assert!(!problems_of(&config).contains("signs no timestamp"), "{scheme}: the opt-in");
    }
    // A timed scheme's signature expires with its tolerance: forwarded as before.
    let mut stripe = SourceConfig::new("s", "stripe", vec![SecretRef::from_file("a", &file)]);
    stripe.forward_headers = vec!["Stripe-Signature".into()];
    assert!(!problems_of(&stripe).contains("signs no timestamp"));
}

#[test]
fn schemes_that_sign_the_url_need_public_url() {
    let file = secret_file("token");
    let mut config = SourceConfig::new("sms", "twilio", vec![SecretRef::from_file("a", &file)]);
    assert!(problems_of(&config).contains("set public_url"));
    config.public_url = Some("https://hooks.example.com/twilio?x=1".into());
    assert!(problems_of(&config).contains("without a query string"));
    config.public_url = Some("https://hooks.example.com/twilio".into());
    let source = Source::from_config(&config, "inbound").unwrap();
    assert_eq!(source.signed_url(Some("a=1")).as_deref(), Some("https://hooks.example.com/twilio?a=1"));
    assert_eq!(source.topic, "inbound");
}

#[test]
fn none_takes_no_secrets_and_everything_else_needs_one() {
    assert!(Source::from_config(&SourceConfig::new("internal", "none", vec![]), "t").is_ok());
    let file = secret_file("x");
    assert!(
        problems_of(&SourceConfig::new("internal", "none", vec![SecretRef::from_file("a", &file)]))
            .contains("takes no secrets")
    );
    assert!(problems_of(&github(vec![])).contains("has no secrets"));
    assert!(problems_of(&SourceConfig::new("gh", "githup", vec![])).contains("unknown scheme `githup`"));
}

#[test]
fn secrets_are_decoded_by_the_scheme_and_checked() {
    let bad = secret_file("whsec_***");
    let problems = problems_of(&SourceConfig::new("sw", "standard_webhooks", vec![SecretRef::from_file("a", &bad)]));
    assert!(problems.contains("secret `a`: the secret is not base64"), "{problems}");
    let good = secret_file("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let twice = vec![SecretRef::from_file("a", &good), SecretRef::from_file("a", &good)];
    assert!(problems_of(&SourceConfig::new("sw", "standard_webhooks", twice)).contains("used twice"));
    let expired = SecretRef { not_after: Some("2001-01-01T00:00:00Z".into()), ..SecretRef::from_file("old", &good) };
    assert!(problems_of(&SourceConfig::new("sw", "svix", vec![expired.clone()])).contains("no secret is active"));
    let current = SecretRef::from_file("new", &good);
    assert!(Source::from_config(&SourceConfig::new("sw", "svix", vec![current, expired]), "t").is_ok());
}

#[test]
fn blank_empty_and_short_keys_are_refused_with_the_reason() {
    use signature::generic::{Encoding, SecretEncoding, TimestampUnit};
    let hmac = |file: &str, secret_encoding: SecretEncoding| SourceConfig {
        hmac: Some(signature::GenericHmacOptions {
            signature_header: "x-sig".into(),
            prefix: String::new(),
            encoding: Encoding::Hex,
            algorithm: signature::generic::Algorithm::Sha256,
            signed_content: "{body}".into(),
            id_header: None,
            timestamp_header: None,
            timestamp_unit: TimestampUnit::Seconds,
            secret_encoding,
        }),
        ..SourceConfig::new("acme", "hmac", vec![SecretRef::from_file("a", file)])
    };
    let blank = secret_file("   \t  \n");
    assert!(
        problems_of(&hmac(&blank, SecretEncoding::Utf8)).contains("secret `a`: is blank"),
        "{}",
        problems_of(&hmac(&blank, SecretEncoding::Utf8))
    );
    assert!(problems_of(&github(vec![SecretRef::from_file("a", &blank)])).contains("is blank"));
    let short = secret_file("0123456789abcdef0123456789abcd");
    assert!(problems_of(&hmac(&short, SecretEncoding::Hex)).contains("a 15-byte key; scheme `hmac` needs at least 16"));
    let long = secret_file("0123456789abcdef0123456789abcdef");
    assert!(Source::from_config(&hmac(&long, SecretEncoding::Hex), "t").is_ok());
    // A provider's own test vector key stays usable (with a warning): its secrets are the provider's to issue.
    assert!(Source::from_config(&github(vec![SecretRef::from_file("a", &short)]), "t").is_ok());
}

#[test]
fn an_ordering_key_from_a_header_the_signature_does_not_cover_is_refused() {
    let file = secret_file("It's a Secret to Everybody");
    let github = SourceConfig {
        ordering_key: Some(signature::FieldSource::header("X-GitHub-Hook-ID")),
        ..github(vec![SecretRef::from_file("a", &file)])
    };
    assert!(
        problems_of(&github).contains("ordering_key: header `X-GitHub-Hook-ID` is not covered"),
        "{}",
        problems_of(&github)
    );
    let from_body = SourceConfig { ordering_key: Some(signature::FieldSource::pointer("/repository/id")), ..github };
    assert!(Source::from_config(&from_body, "t").is_ok());
    let whsec = secret_file("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let signed_header = SourceConfig {
        ordering_key: Some(signature::FieldSource::header("webhook-id")),
        ..SourceConfig::new("sw", "standard_webhooks", vec![SecretRef::from_file("a", &whsec)])
    };
    assert!(Source::from_config(&signed_header, "t").is_ok());
}

#[test]
fn a_generic_token_needs_sixteen_bytes() {
    let short = secret_file("short-token");
    let token = SourceConfig {
        allow_token: true,
        token: Some(signature::token::TokenOptions { header: Some("x-token".into()), ..Default::default() }),
        ..SourceConfig::new("t", "token", vec![SecretRef::from_file("a", &short)])
    };
    assert!(problems_of(&token).contains("scheme `token` needs at least 16"), "{}", problems_of(&token));
    let long = secret_file("a-token-of-twenty-bytes");
    let token = SourceConfig { secrets: vec![SecretRef::from_file("a", &long)], ..token };
    assert!(Source::from_config(&token, "t").is_ok());
}

#[test]
fn a_token_scheme_needs_allow_token_and_nothing_else_takes_it() {
    let file = secret_file("okta-token");
    let okta = SourceConfig::new("okta", "okta", vec![SecretRef::from_file("a", &file)]);
    assert!(problems_of(&okta).contains("set allow_token = true"), "{}", problems_of(&okta));
    let allowed = SourceConfig { allow_token: true, ..okta.clone() };
    let source = Source::from_config(&allowed, "t").unwrap();
    assert_eq!(source.handshakes, vec![Challenge::Okta], "the preset's handshake");
    assert!(source.answers_get());
    let gh = SourceConfig { allow_token: true, ..github(okta.secrets.clone()) };
    assert!(problems_of(&gh).contains("allow_token is only read by token schemes"));
    let token = SourceConfig { allow_token: true, ..SourceConfig::new("t", "token", okta.secrets.clone()) };
    assert!(problems_of(&token).contains("needs a [sources.token] table"));
    let misplaced = SourceConfig { token: Some(Default::default()), ..github(okta.secrets) };
    assert!(problems_of(&misplaced).contains("only read by scheme = \"token\""));
}

#[test]
fn meta_needs_its_verify_token_and_replies_are_2xx() {
    let file = secret_file("meta-app-secret");
    let meta = SourceConfig::new("wa", "meta", vec![SecretRef::from_file("app", &file)]);
    assert!(problems_of(&meta).contains("meta_hub handshake needs verify_tokens"));
    let token = secret_file("verify-me");
    let with_token = SourceConfig { verify_tokens: vec![SecretRef::from_file("v", &token)], ..meta.clone() };
    let source = Source::from_config(&with_token, "t").unwrap();
    assert_eq!(source.verify_tokens.len(), 1);
    let stray = SourceConfig { verify_tokens: vec![SecretRef::from_file("v", &token)], ..github(meta.secrets.clone()) };
    assert!(problems_of(&stray).contains("only read by the meta_hub handshake"));
    let redirect = crate::config::ReplyConfig { status: 302, content_type: "text/plain".into(), body: String::new() };
    let bad_reply = SourceConfig { reply: Some(redirect), ..with_token.clone() };
    assert!(problems_of(&bad_reply).contains("must be a 2xx status"));
    let echo = SourceConfig { handshakes: vec![Challenge::ChallengeEcho, Challenge::MetaHub], ..with_token };
    let source = Source::from_config(&echo, "t").unwrap();
    assert_eq!(
        source.handshakes,
        vec![Challenge::MetaHub, Challenge::ChallengeEcho],
        "the preset's, then the rest once"
    );
}

#[test]
fn a_scheme_signing_some_fields_refuses_identity_overrides() {
    let file = secret_file("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056");
    let adyen = SourceConfig {
        event_id: Some(signature::FieldSource::pointer("/live")),
        ..SourceConfig::new("adyen", "adyen", vec![SecretRef::from_file("a", &file)])
    };
    assert!(problems_of(&adyen).contains("remove event_id, event_type and ordering_key"));
    let ordered = SourceConfig {
        event_id: None,
        ordering_key: Some(signature::FieldSource::pointer(
            "/notificationItems/0/NotificationRequestItem/pspReference",
        )),
        ..adyen
    };
    assert!(problems_of(&ordered).contains("and ordering_key"));
}

#[test]
fn overrides_replace_the_schemes_identity() {
    let file = secret_file("k");
    let config = SourceConfig {
        event_id: Some(signature::FieldSource::pointer("/delivery")),
        event_type: Some(signature::FieldSource::header("x-kind")),
        forward_headers: vec!["User-Agent".into(), "bad header".into()],
        ..github(vec![SecretRef::from_file("a", &file)])
    };
    assert!(problems_of(&config).contains("`bad header` is not a valid header name"));
    for credential in ["Authorization", "Cookie", "X-Gitlab-Token", "X-Api-Key", "X-Webhook-Secret"] {
        let config = SourceConfig { forward_headers: vec![credential.into()], ..config.clone() };
        assert!(problems_of(&config).contains("carries a credential"), "{credential}");
    }
    let allowed = ["User-Agent", "X-Hub-Signature-256", "Stripe-Signature", "X-Shopify-Hmac-Sha256"];
    let config = SourceConfig {
        forward_headers: allowed.map(str::to_owned).to_vec(),
        forward_untimed_signature: true,
        ..config
    };
    let source = Source::from_config(&config, "t").unwrap();
    assert_eq!(source.identity.event_id, vec![signature::FieldSource::pointer("/delivery")]);
    assert_eq!(source.forward_headers[0].as_str(), "user-agent");
    assert_eq!(source.forward_headers[2].as_str(), "stripe-signature");
}

#[test]
fn paypal_needs_api_credentials_or_the_crc_only_opt_in() {
    use crate::paypal_api::PayPalOptions;
    let webhook = secret_file("1JE4291016473214C");
    let mut config = SourceConfig::new("pp", "paypal", vec![SecretRef::from_file("live", &webhook)]);
    let problems = problems_of(&config);
    assert!(problems.contains("api_credentials") && problems.contains("allow_crc_only = true"), "{problems}");

    config.paypal = Some(PayPalOptions { allow_crc_only: true, ..PayPalOptions::default() });
    let source = Source::from_config(&config, "inbound").expect("the opt-in");
    assert!(source.paypal.is_none(), "the checksum alone: nothing is confirmed");

    let credentials = secret_file("AZ-client-id:EL-client-secret\n");
    let api =
        PayPalOptions { api_credentials: Some(SecretRef::from_file("rest", &credentials)), ..PayPalOptions::default() };
    config.paypal = Some(PayPalOptions { allow_crc_only: true, ..api.clone() });
    assert!(problems_of(&config).contains("exclude each other"));
    config.paypal = Some(api);
    let source = Source::from_config(&config, "inbound").expect("credentials");
    assert!(source.paypal.is_some(), "every event confirmed");
    let printed = format!("{source:?}");
    assert!(!printed.contains("EL-client-secret") && !printed.contains("QVotY2xpZW50"), "{printed}");

    let bad = secret_file("no-colon");
    config.paypal =
        Some(PayPalOptions { api_credentials: Some(SecretRef::from_file("rest", &bad)), ..PayPalOptions::default() });
    assert!(problems_of(&config).contains("client_id:secret"));
    let mut github = github(vec![SecretRef::from_file("a", &webhook)]);
    github.paypal = Some(PayPalOptions::default());
    assert!(problems_of(&github).contains("[sources.paypal] table is only read by scheme = \"paypal\""));
}

/// The header a preset's doc names first (`X-Hub-Signature-256: sha256=<hex>` → `X-Hub-Signature-256`).
fn preset_header(preset: &signature::presets::Preset) -> String {
    let quoted = preset.header.split('`').nth(1).unwrap_or_default();
    quoted.split([':', ' ']).next().unwrap_or_default().to_owned()
}

#[test]
fn every_untimed_presets_signature_is_not_forwarded_without_the_opt_in() {
    let file = secret_file("a-long-enough-webhook-secret-0123456789");
    let mut checked = 0;
    for preset in signature::presets::all() {
        let header = preset_header(preset);
        if signature::scheme_by_name(preset.name).is_some_and(|scheme| scheme.is_token()) {
            continue; // A token is a credential, never forwarded (`carries a credential`), and signs nothing.
        }
        let mut config = SourceConfig {
            forward_headers: vec![header.clone()],
            ..SourceConfig::new("s", preset.name, vec![SecretRef::from_file("a", &file)])
        };
        let refused = |problems: &str| problems.contains("signs no timestamp") || problems.contains("a credential");
        if preset.timed {
            assert!(!problems_of(&config).contains("signs no timestamp"), "{}: timed", preset.name);
            continue;
        }
        assert!(refused(&problems_of(&config)), "{} {header}: {}", preset.name, problems_of(&config));
        config.forward_untimed_signature = true;
        assert!(!problems_of(&config).contains("signs no timestamp"), "{}: the opt-in", preset.name);
        checked += 1;
    }
    assert!(checked >= 10, "{checked} untimed presets");
    let meta = SourceConfig {
        forward_headers: vec!["X-Hub-Signature-256".into()],
        ..SourceConfig::new("s", "meta", vec![SecretRef::from_file("a", &file)])
    };
    assert!(problems_of(&meta).contains("signs no timestamp"), "{}", problems_of(&meta));
    // A family configured without a timestamp signs none either.
    let hmac = SourceConfig {
        forward_headers: vec!["X-Acme-Signature".into()],
        hmac: Some(
            serde_json::from_value(serde_json::json!({ "signature_header": "X-Acme-Signature" })).expect("options"),
        ),
        ..SourceConfig::new("s", "hmac", vec![SecretRef::from_file("a", &file)])
    };
    assert!(problems_of(&hmac).contains("signs no timestamp"), "{}", problems_of(&hmac));
}

#[test]
fn only_the_x_scheme_answers_the_x_crc_handshake() {
    let file = secret_file("a-long-enough-webhook-secret-0123456789");
    let github = SourceConfig { handshakes: vec![Challenge::XCrc], ..github(vec![SecretRef::from_file("a", &file)]) };
    assert!(problems_of(&github).contains("only scheme `x`"), "{}", problems_of(&github));
    let hmac = SourceConfig {
        handshakes: vec![Challenge::XCrc],
        hmac: Some(
            serde_json::from_value(serde_json::json!({ "signature_header": "x-twitter-webhooks-signature" }))
                .expect("options"),
        ),
        ..SourceConfig::new("s", "hmac", vec![SecretRef::from_file("a", &file)])
    };
    assert!(problems_of(&hmac).contains("only scheme `x`"), "{}", problems_of(&hmac));
    let x = SourceConfig { handshakes: vec![Challenge::XCrc], ..SourceConfig::new("x", "x", github.secrets.clone()) };
    let source = Source::from_config(&x, "inbound").expect("x answers its own handshake");
    assert_eq!(source.handshakes, vec![Challenge::XCrc]);
}

#[test]
fn a_jwt_source_whose_tokens_carry_no_time_is_warned_about() {
    let file = secret_file("a-long-enough-webhook-secret-0123456789");
    let jwt = |table: serde_json::Value| SourceConfig {
        jwt: Some(serde_json::from_value(table).expect("options")),
        ..SourceConfig::new("j", "jwt", vec![SecretRef::from_file("a", &file)])
    };
    let untimed = Source::from_config(&jwt(serde_json::json!({ "body_sha256_claim": "sha256" })), "i").expect("loads");
    assert!(untimed_jwt_warning(&untimed).is_some_and(|warning| warning.contains("require_iat")));
    for timed in ["require_iat", "require_exp"] {
        let source = Source::from_config(&jwt(serde_json::json!({ "body_sha256_claim": "sha256", timed: true })), "i")
            .expect("loads");
        assert_eq!(untimed_jwt_warning(&source), None, "{timed}");
    }
    let netlify = Source::from_config(&SourceConfig::new("n", "netlify", vec![SecretRef::from_file("a", &file)]), "i")
        .expect("loads");
    assert!(untimed_jwt_warning(&netlify).is_some(), "Netlify signs no time");
    let github = Source::from_config(&github(vec![SecretRef::from_file("a", &file)]), "inbound").expect("loads");
    assert_eq!(untimed_jwt_warning(&github), None, "not a JWT source");
}
