//! Cross-checks against the providers' own SDKs (Stripe, Standard Webhooks, Svix, Slack, Twilio; pinned in
//! `tests/tools/sdk-requirements.txt`): every signature an SDK produces verifies with hookline's scheme, and every
//! signature hookline's signer produces is accepted by the SDK's verifier. Inputs include whitespace, non-ASCII
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

use hookline_common::signature::{
    self, SchemeOptions, Secret, UnverifiedRequest, VerifyError, slack, standard_webhooks, stripe, twilio,
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
    let results: Vec<Value> = serde_json::from_slice(&output.stdout).expect("SDK script output");
    results
        .iter()
        .map(|result| {
            (result["sdk"].as_str().expect("sdk").to_owned(), result["sdk_accepts_ours"].as_bool().expect("bool"))
        })
        .collect()
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
    let scheme = signature::build(scheme_name, &SchemeOptions::default()).expect("scheme");
    let key = scheme.decode_secret(secret_text.as_bytes()).expect("secret");
    let secrets = [Secret::new("sdk", key)];
    let (headers, body, url) = request;
    let body = bytes::Bytes::copy_from_slice(body);
    let mut unverified = UnverifiedRequest::new(headers, &body, now_s * 1000);
    if let Some(url) = url {
        unverified = unverified.with_url(url);
    }
    signature::verify(scheme.as_ref(), &unverified, &secrets).map(|verified| verified.secret_id().to_owned())
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
