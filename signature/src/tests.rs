//! Helpers shared by the schemes' unit tests, and the property tests every header parser must pass: no input, however
//! hostile, makes a scheme panic.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;

use super::*;

/// Headers from `(name, value)` pairs; panics on a pair that is not a valid header (test input only).
pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("valid header name");
        map.append(name, HeaderValue::from_str(value).expect("valid header value"));
    }
    map
}

/// The key of providers.md's HMAC vectors, which several providers' tests share.
pub(crate) const PROVIDERS_MD_SECRET: &str = "test_secret_0123456789";
/// The body of providers.md's HMAC vectors.
pub(crate) const PROVIDERS_MD_BODY: &[u8] = br#"{"id":"evt_1","type":"test.event"}"#;

/// The key of GitHub's documented HMAC example, which Intercom's tests reuse (same construction, SHA-1).
pub(crate) const GITHUB_DOCS_SECRET: &str = "It's a Secret to Everybody";
/// The body of GitHub's documented HMAC example.
pub(crate) const GITHUB_DOCS_BODY: &[u8] = b"Hello, World!";

/// A secret whose configured text `key` is decoded the plain way (UTF-8 bytes).
pub(crate) fn secret(id: &str, key: &str) -> Secret {
    Secret::new(id, key.as_bytes().to_vec())
}

/// Verifies a `POST` without a URL; returns the matching secret's id.
pub(crate) fn check(
    scheme: &dyn Scheme,
    headers: &HeaderMap,
    body: &[u8],
    secrets: &[(&str, &str)],
    now_ms: i64,
) -> Result<String, VerifyError> {
    check_at(scheme, &Method::POST, None, headers, body, secrets, now_ms)
}

/// Verifies a request; each secret's text goes through the scheme's `decode_secret` as config loading does.
pub(crate) fn check_at(
    scheme: &dyn Scheme,
    method: &Method,
    url: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
    secrets: &[(&str, &str)],
    now_ms: i64,
) -> Result<String, VerifyError> {
    let secrets: Vec<Secret> = secrets
        .iter()
        .map(|(id, text)| Secret::new(*id, scheme.decode_secret(text.as_bytes()).expect("decodable test secret")))
        .collect();
    let body = Bytes::copy_from_slice(body);
    let mut request = UnverifiedRequest::new(headers, &body, now_ms).with_method(method);
    if let Some(url) = url {
        request = request.with_url(url);
    }
    verify(scheme, &request, &secrets).map(|verified| verified.secret_id().to_owned())
}

#[test]
fn secrets_outside_their_window_are_not_tried() {
    let body = &Bytes::from_static(b"Hello, World!");
    let signature = github::sign(b"old", body);
    let headers = headers(&[("X-Hub-Signature-256", &signature)]);
    let secrets = [
        Secret::new("new", b"new".to_vec()).with_validity(Some(1_000), None),
        Secret::new("old", b"old".to_vec()).with_validity(None, Some(2_000)),
    ];
    let at = |now_ms| {
        verify(&GitHub, &UnverifiedRequest::new(&headers, body, now_ms), &secrets).map(|v| v.secret_id().to_owned())
    };
    assert_eq!(at(2_000), Ok("old".to_owned()), "not_after is inclusive");
    assert_eq!(at(2_001), Err(VerifyError::Mismatch), "a secret past not_after is no longer accepted");
    let new_signature = github::sign(b"new", body);
    let headers = self::headers(&[("X-Hub-Signature-256", &new_signature)]);
    let at = |now_ms| {
        verify(&GitHub, &UnverifiedRequest::new(&headers, body, now_ms), &secrets).map(|v| v.secret_id().to_owned())
    };
    assert_eq!(at(999), Err(VerifyError::Mismatch), "a secret before not_before is not accepted yet");
    assert_eq!(at(1_000), Ok("new".to_owned()));
}

#[test]
fn a_proof_carries_the_bytes_it_verified_and_no_copy_of_them() {
    let body = Bytes::from_static(b"Hello, World!");
    let headers = headers(&[("X-Hub-Signature-256", &github::sign(b"secret", &body))]);
    let secrets = [Secret::new("primary", b"secret".to_vec())];
    let proof = verify(&GitHub, &UnverifiedRequest::new(&headers, &body, 0), &secrets).expect("a genuine signature");
    assert_eq!(proof.body(), &body);
    assert_eq!(proof.body().as_ptr(), body.as_ptr(), "the proof shares the received buffer");
    assert_eq!(proof.provenance(), Provenance::Signature);
    // A proof for other bytes is a different proof: the body is part of what it says.
    let other = Bytes::from_static(b"Hello, World?");
    let other_headers = self::headers(&[("X-Hub-Signature-256", &github::sign(b"secret", &other))]);
    let other_proof = verify(&GitHub, &UnverifiedRequest::new(&other_headers, &other, 0), &secrets).expect("genuine");
    assert_ne!(proof, other_proof);
    assert!(!format!("{proof:?}").contains("Hello"), "a proof's Debug never prints the body");
    let fetched = Verified::fetched_from_provider_api("cred", other.clone());
    assert_eq!((fetched.body(), fetched.secret_id()), (&other, "api:cred"));
}

/// Options for every family, as the fuzzing and naming tests build them.
fn family_options(tolerance_s: Option<u64>) -> SchemeOptions {
    let hmac: GenericHmacOptions = toml::from_str(
        "signature_header = \"x-sig\"\nprefix = \"v1=\"\nsigned_content = \"{id}:{timestamp}:{body}\"\nid_header = \"x-id\"\ntimestamp_header = \"x-ts\"\n",
    )
    .expect("hmac options");
    let structured = toml::from_str("header = \"x-sig\"\ntimestamp_key = \"t\"\n").expect("structured options");
    let body_fields = toml::from_str(
        "signature = \"/signature/signature\"\nsigned_fields = [\"/signature/timestamp\", \"/signature/token\"]\ntimestamp = \"/signature/timestamp\"\n",
    )
    .expect("body_fields options");
    let token = toml::from_str("header = \"authorization\"\nprefix = \"Bearer \"\n").expect("token options");
    let jwt = toml::from_str("prefix = \"Bearer \"\nbody_sha256_claim = \"sha256\"\nrequire_iat = true\n")
        .expect("jwt options");
    SchemeOptions {
        tolerance_s,
        hmac: Some(hmac),
        structured: Some(structured),
        body_fields: Some(body_fields),
        token: Some(token),
        jwt: Some(jwt),
    }
}

#[test]
fn every_listed_name_builds_and_unknown_names_do_not() {
    let options = family_options(None);
    for name in all_names() {
        let scheme = build(name, &options).unwrap_or_else(|problem| panic!("{name}: {problem}"));
        assert_eq!(scheme.name(), name);
    }
    assert!(all_names().count() >= 60 + 5, "at least 60 named providers besides the families and none");
    assert!(build("nope", &options).is_err_and(|problem| problem.to_string().contains("unknown scheme `nope`")));
    assert!(build("hmac", &SchemeOptions::default()).is_err());
    assert!(!build("none", &options).is_ok_and(|scheme| scheme.is_verifying()));
}

#[test]
fn error_reasons_are_stable() {
    let all = [
        VerifyError::missing("h"),
        VerifyError::malformed("h"),
        VerifyError::Mismatch,
        VerifyError::TimestampStale { skew_ms: 0 },
        VerifyError::TimestampFuture { skew_ms: 0 },
        VerifyError::MissingTimestamp("t"),
        VerifyError::UnsupportedContentType("x"),
        VerifyError::FormTooLarge { max_bytes: 1, max_params: 1 },
    ];
    let reasons: Vec<&str> = all.iter().map(VerifyError::reason).collect();
    assert_eq!(
        reasons,
        [
            "signature_missing",
            "signature_malformed",
            "signature_mismatch",
            "timestamp_stale",
            "timestamp_future",
            "timestamp_missing",
            "content_type_unsupported",
            "form_too_large"
        ]
    );
}

/// Every header any scheme reads.
const HEADER_NAMES: &[&str] = &[
    "stripe-signature",
    "x-hub-signature-256",
    "x-hub-signature",
    "x-shopify-hmac-sha256",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-gitlab-token",
    "paddle-signature",
    "x-pagerduty-signature",
    "linear-signature",
    "x-zm-signature",
    "x-zm-request-timestamp",
    "twitch-eventsub-message-signature",
    "twitch-eventsub-message-id",
    "twitch-eventsub-message-timestamp",
    "twitch-eventsub-message-type",
    "x-square-hmacsha256-signature",
    "x-twilio-signature",
    "x-twilio-webhooks-signature-settings",
    "content-type",
    "x-hubspot-signature-v3",
    "x-hubspot-request-timestamp",
    "typeform-signature",
    "x-wc-webhook-signature",
    "x-signature-ed25519",
    "x-signature-timestamp",
    "x-twilio-email-event-webhook-signature",
    "x-twilio-email-event-webhook-timestamp",
    "x-sig",
    "x-ts",
    "x-id",
    "authorization",
    "calendly-webhook-signature",
    "workos-signature",
    "x-buildkite-signature",
    "x-docusign-signature-1",
    "x-zendesk-webhook-signature",
    "x-zendesk-webhook-signature-timestamp",
    "telnyx-signature-ed25519",
    "telnyx-timestamp",
    "x-okta-verification-challenge",
    "aeg-event-type",
    "x-twitter-webhooks-signature",
    "x-webhook-signature",
];

fn all_schemes() -> Vec<Box<dyn Scheme>> {
    all_names()
        .map(|name| {
            let timed = build(name, &family_options(None)).expect("builds").signs_timestamp();
            build(name, &family_options(timed.then_some(300))).expect("builds")
        })
        .collect()
}

/// Header values shaped like the real ones (so parsers get past their first check) and arbitrary visible ASCII.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,80}",
        "(t|v0|v1|ts|h1|sha256|sha1|v1a|algorithm|key)[=,][0-9a-fA-Z+/=]{0,70}",
        "((t|v1|ts|h1)=[0-9a-f]{0,66}[,; ]{1,2}){0,4}",
        "(v1,[A-Za-z0-9+/]{42,44}={0,2} ?){0,3}",
        "[0-9]{1,20}",
        "(Bearer )?(eyJ[A-Za-z0-9_-]{0,40})?\\.[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,44}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?Z?",
        "application/(json|x-www-form-urlencoded)(; ?charset=[a-z0-9-]{0,8})?",
    ]
}

fn request_headers() -> impl Strategy<Value = Vec<(usize, String)>> {
    proptest::collection::vec((0..HEADER_NAMES.len(), header_value()), 0..12)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        "[{}\\[\\]\":,a-z0-9 =&%+]{0,200}".prop_map(String::into_bytes),
        Just(br#"{"type":"url_verification","challenge":"c"}"#.to_vec()),
        Just(br#"{"event":"endpoint.url_validation","payload":{"plainToken":"p"}}"#.to_vec()),
        Just(br#"{"type":1,"challenge":"c","webhookTimestamp":1}"#.to_vec()),
    ]
}

fn url() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        "https?://[a-z.:\\[\\]@0-9]{0,20}(/[a-z%0-9A-F]{0,10})?(\\?[a-zA-Z0-9=&%]{0,30})?",
        "[ -~]{0,40}",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_scheme_panics_on_any_request(
        pairs in request_headers(),
        body in body(),
        url in url(),
        now_ms in any::<i64>(),
    ) {
        let mut map = HeaderMap::new();
        for (index, value) in &pairs {
            if let Ok(value) = HeaderValue::from_str(value) {
                map.append(HeaderName::from_static(HEADER_NAMES[*index]), value);
            }
        }
        let key = Secret::new("k", b"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a".to_vec());
        let body = Bytes::from(body);
        for scheme in all_schemes() {
            let mut request = UnverifiedRequest::new(&map, &body, now_ms);
            if let Some(url) = &url {
                request = request.with_url(url);
            }
            let secrets = [Secret::new("a", b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_vec())];
            let _ = verify(scheme.as_ref(), &request, &secrets);
            let _ = scheme.handshake(&request, &key);
            for challenge in handshake::CHALLENGES {
                let keys = handshake::HandshakeKeys { scheme: scheme.as_ref(), secrets: &secrets, verify_tokens: &secrets };
                let _ = challenge.answer_unverified(&request.with_query(url.as_deref()), keys);
                let _ = challenge.answer_verified(&request);
            }
            let _ = scheme.identity().identify(&map, &body);
        }
    }

    #[test]
    fn header_parsers_never_panic(text in "\\PC{0,120}") {
        let _ = stripe::parse_header(&text);
        let _ = paddle::parse_header(&text);
        let _ = pagerduty::parse_header(&text);
        let _ = standard_webhooks::parse_signatures(&text);
        let _ = standard_webhooks::decode_secret(text.as_bytes());
        let _ = twilio::settings_algorithm(&text);
        let _ = twilio::toggle_default_port(&text);
        let _ = twilio::signed_params(text.as_bytes());
        let _ = twilio::signed_params_deduplicated(text.as_bytes());
        let _ = hubspot::signed_uri(&text);
        let _ = twitch::parse_rfc3339_ms(&text);
        let _ = generic::parse_template(&text);
        let _ = discord::Discord::default().decode_secret(text.as_bytes());
        let _ = sendgrid::SendGrid::default().decode_secret(text.as_bytes());
    }

    #[test]
    fn stripe_accepts_its_own_signature_among_any_others(
        body in proptest::collection::vec(any::<u8>(), 0..200),
        decoys in proptest::collection::vec("[0-9a-f]{64}", 0..4),
        position in 0usize..5,
        timestamp in 1_000_000_000i64..4_000_000_000,
    ) {
        let genuine = stripe::sign(b"whsec_k", &body, timestamp);
        let v1 = genuine.split_once(",v1=").map(|(_, v1)| v1.to_owned()).unwrap_or_default();
        let mut entries: Vec<String> = decoys.iter().map(|decoy| format!("v1={decoy}")).collect();
        entries.insert(position.min(entries.len()), format!("v1={v1}"));
        let value = format!("t={timestamp},{}", entries.join(","));
        let headers = headers(&[("Stripe-Signature", &value)]);
        let scheme = stripe::Stripe::new(Some(support::Tolerance::seconds(300)));
        prop_assert_eq!(check(&scheme, &headers, &body, &[("a", "whsec_k")], timestamp * 1000), Ok("a".to_owned()));
    }

    #[test]
    fn standard_webhooks_accepts_its_own_signature_among_any_others(
        body in proptest::collection::vec(any::<u8>(), 0..200),
        id in "msg_[A-Za-z0-9]{1,30}",
        decoys in proptest::collection::vec("v1a?,[A-Za-z0-9+/]{43}=", 0..4),
    ) {
        let key = standard_webhooks::decode_secret(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let mut entries = decoys;
        entries.push(standard_webhooks::sign(&key, &id, 1_614_265_330, &body));
        entries.reverse();
        let value = entries.join(" ");
        let headers = headers(&[("webhook-id", &id), ("webhook-timestamp", "1614265330"), ("webhook-signature", &value)]);
        let scheme = standard_webhooks::StandardWebhooks::standard(Some(support::Tolerance::seconds(300)));
        let result = check(&scheme, &headers, &body, &[("a", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")], 1_614_265_330_000);
        prop_assert_eq!(result, Ok("a".to_owned()));
    }

    #[test]
    fn one_flipped_body_bit_is_always_a_mismatch(
        body in proptest::collection::vec(any::<u8>(), 1..200),
        bit in 0usize..1600,
    ) {
        let value = github::sign(b"k", &body);
        let mut tampered = body.clone();
        let bit = bit % (tampered.len() * 8);
        tampered[bit / 8] ^= 1 << (bit % 8);
        let headers = headers(&[("X-Hub-Signature-256", &value)]);
        prop_assert_eq!(check(&GitHub, &headers, &tampered, &[("a", "k")], 0), Err(VerifyError::Mismatch));
    }
}

#[test]
fn a_tolerance_is_refused_where_no_timestamp_is_signed() {
    // What the built scheme says, for every name (presets included), not a list of names.
    let mut untimed = Vec::new();
    for name in all_names() {
        if build(name, &family_options(None)).expect("builds").signs_timestamp() {
            continue;
        }
        untimed.push(name);
        if name == "zoom" {
            continue; // Zoom signs its timestamp and documents no window: tolerance_s turns the check on.
        }
        let options = SchemeOptions { tolerance_s: Some(300), ..family_options(None) };
        let problem = build(name, &options).expect_err("refused");
        assert!(
            problem.to_string().contains("signs no timestamp") || problem.to_string().contains("tolerance_s"),
            "{name}: {problem}"
        );
    }
    for name in ["github", "shopify", "gitlab", "pagerduty", "square", "twilio", "token", "none", "meta", "x", "zoom"] {
        assert!(untimed.contains(&name), "{name} signs no timestamp (Zoom: without tolerance_s)");
    }
    for name in ["stripe", "slack", "sns", "paypal", "plaid", "hmac", "structured", "jwt", "calendly", "zoom"] {
        let timed = build(name, &family_options(Some(300))).expect("builds");
        assert!(timed.signs_timestamp(), "{name}");
    }
    let no_time = SchemeOptions {
        jwt: Some(toml::from_str("prefix = \"Bearer \"\nbody_sha256_claim = \"sha256\"\n").expect("jwt options")),
        ..family_options(None)
    };
    assert!(!build("jwt", &no_time).expect("builds").signs_timestamp(), "jwt without require_iat or require_exp");
}

#[test]
fn the_generic_scheme_refuses_checked_values_that_are_unsigned() {
    let options = |toml_text: &str, tolerance_s| SchemeOptions {
        tolerance_s,
        hmac: Some(toml::from_str(&format!("signature_header = \"x-sig\"\n{toml_text}")).expect("options")),
        ..SchemeOptions::default()
    };
    let unsigned_timestamp = options("timestamp_header = \"x-ts\"\n", None);
    assert!(build("hmac", &unsigned_timestamp).expect_err("refused").to_string().contains("no {timestamp}"));
    let unsigned_id = options("id_header = \"x-id\"\n", None);
    assert!(build("hmac", &unsigned_id).expect_err("refused").to_string().contains("no {id}"));
    let tolerance_without_time = options("", Some(60));
    assert!(build("hmac", &tolerance_without_time).expect_err("refused").to_string().contains("timestamp_header"));
    let signed = options(
        "signed_content = \"{id}.{timestamp}.{body}\"\nid_header = \"x-id\"\ntimestamp_header = \"x-ts\"\n",
        Some(60),
    );
    assert!(build("hmac", &signed).is_ok());
}
