//! Cross-checks against the providers' own SDKs (Stripe, Standard Webhooks, Svix, Slack, Twilio; pinned in
//! `tests/tools/sdk-requirements.txt`): every signature an SDK produces verifies with hookline's scheme, and every
//! signature hookline's signer produces is accepted by the SDK's verifier. The JWT presets (Netlify, Vonage,
//! monday.com) are checked the same way against PyJWT, the library their documentation uses, with PyJWT's own
//! refused twins (wrong secret, `HS512`, `alg: none`, expired). Of the families added since (structured header,
//! RFC 3339 timestamps, body fields, token, public key), only the body-fields family has a provider whose SDK
//! signs: Adyen's Python library computes `hmacSignature`; the others' SDKs (WorkOS, Mux, ElevenLabs, Telnyx,
//! Mailgun) only verify, and Calendly, Buildkite, Zendesk and the token providers publish none. Inputs include whitespace, non-ASCII
//! text and form values that need escaping, where a re-serializing or re-encoding implementation would differ.
//!
//! The SDKs run in a virtualenv under `.stack/sdk-venv`, created by `tests/tools/sdk-venv` (which `scripts/test`
//! runs first; this test runs it too when the venv is missing).

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
    time::{SystemTime, UNIX_EPOCH},
};

use hookline_signature::{
    self as signature, SchemeOptions, Secret, UnverifiedRequest, VerifyError, slack, standard_webhooks, stripe, twilio,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

const PAYLOADS: &[&str] = &[
    r#"{"id":"evt_1","type":"test.event"}"#,
    "{ \"spaces\" :  \"and\\nnewlines\",\n  \"unicode\": \"héllo ✓ 日本\", \"n\": 1.50 }",
    r#"[{"nested":{"deep":[1,2,{"x":null}]}},"tail"]"#,
];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The virtualenv's python, created on first use.
fn sdk_python() -> PathBuf {
    let output = Command::new(repo_root().join("tests/tools/sdk-venv")).output().expect("run tests/tools/sdk-venv");
    assert!(output.status.success(), "sdk-venv failed: {}", String::from_utf8_lossy(&output.stderr));
    PathBuf::from(String::from_utf8(output.stdout).expect("utf-8 path").trim())
}

/// Runs the SDK script on `cases`; returns `(sdk signature, whether the SDK accepted ours)` per case.
fn run_sdks(cases: &[Value]) -> Vec<(String, bool)> {
    run_sdk_script(cases)
        .iter()
        .map(|result| {
            (result["sdk"].as_str().expect("sdk").to_owned(), result["sdk_accepts_ours"].as_bool().expect("bool"))
        })
        .collect()
}

/// Runs the SDK script on `cases`; returns its result objects.
fn run_sdk_script(cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new(sdk_python())
        .arg(repo_root().join("tests/tools/sdk_signatures.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the SDK script");
    child.stdin.take().expect("stdin").write_all(Value::from(cases.to_vec()).to_string().as_bytes()).expect("write");
    let output = child.wait_with_output().expect("SDK script");
    assert!(output.status.success(), "SDK script failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("SDK script output")
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    map
}

/// Verifies with the named scheme (default options) at `now_s`; returns the matching secret id.
fn verify_with(
    scheme_name: &str,
    secret_text: &str,
    request: (&HeaderMap, &[u8], Option<&str>),
    now_s: i64,
) -> Result<String, VerifyError> {
    verify_proof(scheme_name, secret_text, request, now_s).map(|verified| verified.secret_id().to_owned())
}

/// [`verify_with`], returning the proof.
fn verify_proof(
    scheme_name: &str,
    secret_text: &str,
    request: (&HeaderMap, &[u8], Option<&str>),
    now_s: i64,
) -> Result<signature::Verified, VerifyError> {
    let scheme = signature::build(scheme_name, &SchemeOptions::default()).expect("scheme");
    let key = scheme.decode_secret(secret_text.as_bytes()).expect("secret");
    let secrets = [Secret::new("sdk", key)];
    let (headers, body, url) = request;
    let body = bytes::Bytes::copy_from_slice(body);
    let mut unverified = UnverifiedRequest::new(headers, &body, now_s * 1000);
    if let Some(url) = url {
        unverified = unverified.with_url(url);
    }
    signature::verify(scheme.as_ref(), &unverified, &secrets)
}

fn now_s() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("time")
}

/// `application/x-www-form-urlencoded`, as Twilio sends it.
fn form_encode(params: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => (byte as char).to_string(),
                b' ' => "+".to_owned(),
                other => format!("%{other:02X}"),
            })
            .collect::<String>()
    };
    params.iter().map(|(name, value)| format!("{}={}", encode(name), encode(value))).collect::<Vec<_>>().join("&")
}

/// Verifies one SDK signature with hookline; returns the matching secret id.
type Check = Box<dyn Fn(&str) -> Result<String, VerifyError>>;

#[test]
fn signatures_agree_with_the_providers_sdks_in_both_directions() {
    let now = now_s();
    let mut cases = Vec::new();
    let mut checks: Vec<Check> = Vec::new();

    for payload in PAYLOADS {
        let secret = "whsec_test_secret_for_stripe_0123";
        cases.push(json!({
            "provider": "stripe", "secret": secret, "payload": payload, "timestamp": now,
            "ours": stripe::sign(secret.as_bytes(), payload.as_bytes(), now),
        }));
        checks.push(Box::new(move |sdk| {
            verify_with("stripe", secret, (&headers(&[("Stripe-Signature", sdk)]), payload.as_bytes(), None), now)
        }));

        for (provider, prefix, secret) in [
            ("standard_webhooks", "webhook", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            ("svix", "svix", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
        ] {
            let key = standard_webhooks::decode_secret(secret.as_bytes()).expect("key");
            let msg_id = "msg_2Lq1bS4Kx7YgYQ2tWfWmJ8yZ0rT";
            cases.push(json!({
                "provider": provider, "secret": secret, "msg_id": msg_id, "payload": payload, "timestamp": now,
                "ours": standard_webhooks::sign(&key, msg_id, now, payload.as_bytes()),
            }));
            checks.push(Box::new(move |sdk| {
                let t = now.to_string();
                let headers = headers(&[
                    (&format!("{prefix}-id"), msg_id),
                    (&format!("{prefix}-timestamp"), &t),
                    (&format!("{prefix}-signature"), sdk),
                ]);
                verify_with(provider, secret, (&headers, payload.as_bytes(), None), now)
            }));
        }

        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        cases.push(json!({
            "provider": "slack", "secret": secret, "payload": payload, "timestamp": now,
            "ours": slack::sign(secret.as_bytes(), payload.as_bytes(), now),
        }));
        checks.push(Box::new(move |sdk| {
            let t = now.to_string();
            let headers = headers(&[("X-Slack-Signature", sdk), ("X-Slack-Request-Timestamp", &t)]);
            verify_with("slack", secret, (&headers, payload.as_bytes(), None), now)
        }));
    }

    let twilio_cases: [(&str, &[(&str, &str)]); 3] = [
        ("https://example.test/sms", &[("CallSid", "CA1"), ("From", "+15551234567"), ("To", "+15557654321")]),
        (
            "https://example.test/sms?tenant=7&x=%20y",
            &[("Body", "héllo wörld & more=stuff"), ("Empty", ""), ("A", "1")],
        ),
        ("https://example.test:443/voice", &[("Digits", "1234"), ("SpeechResult", "Yes, please.")]),
    ];
    for (url, params) in twilio_cases {
        let token = "twilio-auth-token-0123456789abcdef";
        let body = form_encode(params);
        cases.push(json!({
            "provider": "twilio", "secret": token, "url": url, "params": params,
            "ours": twilio::sign(token.as_bytes(), url, body.as_bytes()),
        }));
        checks.push(Box::new(move |sdk| {
            let headers =
                headers(&[("X-Twilio-Signature", sdk), ("Content-Type", "application/x-www-form-urlencoded")]);
            verify_with("twilio", token, (&headers, body.as_bytes(), Some(url)), now)
        }));
    }

    let results = run_sdks(&cases);
    assert_eq!(results.len(), cases.len());
    for ((case, check), (sdk_signature, sdk_accepts_ours)) in cases.iter().zip(&checks).zip(&results) {
        let provider = &case["provider"];
        assert_eq!(
            check(sdk_signature),
            Ok("sdk".to_owned()),
            "{provider}: the SDK's signature verifies with us: {case}"
        );
        assert!(sdk_accepts_ours, "{provider}: the SDK accepts our signature: {case}");
        assert_eq!(case["ours"].as_str(), Some(sdk_signature.as_str()), "{provider}: the same bytes: {case}");
    }
}

/// One JWT preset as its documentation describes it: the header and prefix, the claims it signs, what PyJWT is told
/// to check.
struct JwtPreset {
    scheme: &'static str,
    header: &'static str,
    prefix: &'static str,
    secret: &'static str,
    url: Option<&'static str>,
    /// The claims for `payload` at `now` (Unix s).
    claims: fn(&str, i64) -> Value,
    /// What the SDK's decode is told: issuer, audience, required claims, the body digest claim.
    checks: Value,
}

fn sha256_hex(payload: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(payload.as_bytes()))
}

fn jwt_presets() -> Vec<JwtPreset> {
    vec![
        JwtPreset {
            scheme: "netlify",
            header: "X-Webhook-Signature",
            prefix: "",
            secret: "netlify-jws-secret-0123456789abcdef",
            url: None,
            claims: |payload, _| json!({ "iss": "netlify", "sha256": sha256_hex(payload) }),
            checks: json!({ "issuer": "netlify", "body_claim": "sha256" }),
        },
        JwtPreset {
            scheme: "vonage",
            header: "Authorization",
            prefix: "Bearer ",
            secret: "vonage-signature-secret-0123456789",
            url: None,
            claims: |payload, now| {
                json!({
                    "iat": now, "jti": "c5ba8f24-1a14-4c10-bfdf-3fbe8ce511b5", "iss": "Vonage",
                    "payload_hash": sha256_hex(payload), "api_key": "a1b2c3d",
                    "application_id": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab",
                })
            },
            checks: json!({ "issuer": "Vonage", "body_claim": "payload_hash", "require": ["iat"] }),
        },
        JwtPreset {
            scheme: "monday",
            header: "Authorization",
            prefix: "",
            secret: "monday-signing-secret-0123456789ab",
            url: Some("https://hooks.example.test/monday"),
            claims: |_, now| {
                json!({
                    "accountId": 1_825_529, "userId": 4_012_689, "aud": "https://hooks.example.test/monday",
                    "exp": now + 300, "shortLivedToken": "short-lived", "iat": now,
                })
            },
            checks: json!({ "audience": "https://hooks.example.test/monday", "require": ["iat", "exp"] }),
        },
    ]
}

#[test]
fn jwt_presets_agree_with_pyjwt_in_both_directions_and_refuse_its_twins() {
    use hookline_signature::{Coverage, jwt};

    let now = now_s();
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for preset in jwt_presets() {
        for payload in PAYLOADS {
            let claims = (preset.claims)(payload, now);
            // Our signer without the header's prefix: the SDK gets the bare token.
            let ours = jwt::JwtScheme::new(&jwt::JwtOptions::default(), None)
                .expect("options")
                .sign(preset.secret.as_bytes(), &claims);
            let mut case = json!({
                "provider": "jwt", "secret": preset.secret, "payload": payload, "claims": claims, "ours": ours,
            });
            for (name, value) in preset.checks.as_object().expect("object") {
                case[name] = value.clone();
            }
            cases.push(case);
            expected.push((preset.scheme, preset.header, preset.prefix, preset.secret, preset.url, *payload));
        }
    }
    let results = run_sdk_script(&cases);
    assert_eq!(results.len(), cases.len());
    for ((case, (scheme, header, prefix, secret, url, payload)), result) in cases.iter().zip(&expected).zip(&results) {
        let run = |token: &str, body: &str| {
            let value = format!("{prefix}{token}");
            verify_proof(scheme, secret, (&headers(&[(header, &value)]), body.as_bytes(), *url), now)
        };
        let sdk = result["sdk"].as_str().expect("sdk");
        let proof = run(sdk, payload).unwrap_or_else(|error| panic!("{scheme}: PyJWT's token verifies: {error:?}"));
        assert_eq!(proof.body().as_ref(), payload.as_bytes(), "{scheme}");
        let is_token = *proof.coverage() == Coverage::Token;
        assert_eq!(is_token, *scheme == "monday", "{scheme}: only monday's claims bind no body");
        assert_eq!(result["sdk_accepts_ours"].as_bool(), Some(true), "{scheme}: PyJWT accepts ours: {case}");
        assert_eq!(case["ours"].as_str(), Some(sdk), "{scheme}: the same bytes: {case}");
        if !is_token {
            assert_eq!(run(sdk, &format!("{payload} ")).err(), Some(VerifyError::Mismatch), "{scheme}: tampered body");
        }
        let twins = &result["twins"];
        assert_eq!(run(twins["wrong_secret"].as_str().expect("twin"), payload).err(), Some(VerifyError::Mismatch));
        for twin in ["hs512", "none"] {
            let refused = run(twins[twin].as_str().expect("twin"), payload).err();
            assert!(matches!(refused, Some(VerifyError::MalformedSignature(_))), "{scheme} {twin}: {refused:?}");
        }
        let expired = run(twins["expired"].as_str().expect("twin"), payload).err();
        if *scheme == "netlify" {
            assert_eq!(expired, None, "netlify signs no time: the same claims verify");
        } else {
            assert!(matches!(expired, Some(VerifyError::TimestampStale { .. })), "{scheme} expired: {expired:?}");
        }
    }
}

#[test]
fn a_notification_signed_by_adyens_library_verifies_with_the_body_fields_preset() {
    let key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    let items = [
        json!({
            "pspReference": "7914073381342284", "merchantAccountCode": "TestMerchant",
            "merchantReference": "TestPayment-1407325143704", "amount": { "value": 1130, "currency": "EUR" },
            "eventCode": "AUTHORISATION", "success": "true", "paymentMethod": "visa",
        }),
        json!({
            "pspReference": "8815329842815468", "originalReference": "7914073381342284",
            "merchantAccountCode": "TestMerchant", "merchantReference": "Refund: héllo ✓",
            "amount": { "value": 500, "currency": "USD" }, "eventCode": "REFUND", "success": "false",
        }),
    ];
    let cases: Vec<Value> =
        items.iter().map(|item| json!({ "provider": "adyen", "secret": key, "item": item })).collect();
    let results = run_sdk_script(&cases);
    assert_eq!(results.len(), cases.len());
    for (item, result) in items.iter().zip(&results) {
        let body = result["sdk"].as_str().expect("the SDK's notification");
        assert_eq!(result["sdk_accepts_ours"].as_bool(), Some(true), "Adyen's verifier accepts its own: {body}");
        let proof = verify_proof("adyen", key, (&headers(&[]), body.as_bytes(), None), now_s())
            .unwrap_or_else(|error| panic!("Adyen's signature verifies with us: {error:?}: {body}"));
        let signature::Coverage::SignedFields { event_type, .. } = proof.coverage() else {
            panic!("adyen proves signed fields")
        };
        assert_eq!(event_type.as_deref(), item["eventCode"].as_str(), "the signed eventCode is the type");
        let value = item["amount"]["value"].to_string();
        let tampered = body.replacen(&format!("\"value\":{value}"), "\"value\":1", 1);
        assert_ne!(tampered, body);
        let refused = verify_proof("adyen", key, (&headers(&[]), tampered.as_bytes(), None), now_s()).err();
        assert_eq!(refused, Some(VerifyError::Mismatch), "a changed amount: {tampered}");
    }
}
