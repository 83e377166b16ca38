//! Every preset against a request signed independently of this code (testdata/presets.py: Python's hmac, hashlib
//! and `cryptography`, following each provider's documentation; Adyen's is the official vector of Adyen's own
//! libraries), and its refused twins: tampered body, wrong secret, stale timestamp, missing signature.

use std::collections::HashSet;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::*;
use crate::{Coverage, SchemeOptions, Verified, build, verify};

#[derive(Debug, Deserialize)]
struct Case {
    scheme: String,
    secret: String,
    wrong_secret: String,
    method: String,
    query: Option<String>,
    /// The URL the provider sent to (the source's `public_url`), for the schemes that check it.
    url: Option<String>,
    headers: Vec<(String, String)>,
    body: String,
    now_ms: i64,
    stale_now_ms: Option<i64>,
    tampered_body: Option<String>,
    missing_header: Option<String>,
    missing_body: Option<String>,
    missing_query: Option<String>,
    event_id: Option<String>,
}

fn cases() -> Vec<Case> {
    serde_json::from_str(include_str!("../testdata/presets.json")).expect("presets.json parses")
}

impl Case {
    fn headers(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in &self.headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                HeaderValue::from_str(value).expect("header value"),
            );
        }
        map
    }

    fn run(
        &self,
        scheme: &dyn Scheme,
        secret: &str,
        headers: &HeaderMap,
        body: &str,
        query: Option<&str>,
        now_ms: i64,
    ) -> Result<Verified, VerifyError> {
        let key = scheme.decode_secret(secret.as_bytes()).expect("the test secret decodes");
        let secrets = [Secret::new("s", key)];
        let body = Bytes::copy_from_slice(body.as_bytes());
        let method = Method::from_bytes(self.method.as_bytes()).expect("method");
        let mut request = UnverifiedRequest::new(headers, &body, now_ms).with_method(&method).with_query(query);
        if let Some(url) = &self.url {
            request = request.with_url(url);
        }
        verify(scheme, &request, &secrets)
    }

    fn genuine(&self, scheme: &dyn Scheme) -> Result<Verified, VerifyError> {
        self.run(scheme, &self.secret, &self.headers(), &self.body, self.query.as_deref(), self.now_ms)
    }
}

/// The event id the gateway would take from a proof (see gateway/src/ingest.rs).
fn event_id(scheme: &dyn Scheme, proof: &Verified, headers: &HeaderMap) -> Option<String> {
    match proof.coverage() {
        Coverage::SignedFields { event_id, .. } => Some(event_id.clone()),
        _ => scheme.identity().identify_signed(headers, proof.body(), &|name| proof.signs_header(name)).event_id,
    }
}

#[test]
fn every_preset_verifies_its_independently_signed_request_and_refuses_the_twins() {
    for case in cases() {
        let name = case.scheme.as_str();
        let scheme = build(name, &SchemeOptions::default()).unwrap_or_else(|problem| panic!("{name}: {problem}"));
        let preset = find(name).unwrap_or_else(|| panic!("{name} is a preset"));

        let proof = case.genuine(scheme.as_ref()).unwrap_or_else(|error| panic!("{name}: {error:?}"));
        assert_eq!(proof.body().as_ref(), case.body.as_bytes(), "{name}: the body is kept byte for byte");
        if let Some(expected) = &case.event_id {
            assert_eq!(event_id(scheme.as_ref(), &proof, &case.headers()).as_ref(), Some(expected), "{name}: event id");
        }

        let wrong = case.run(
            scheme.as_ref(),
            &case.wrong_secret,
            &case.headers(),
            &case.body,
            case.query.as_deref(),
            case.now_ms,
        );
        assert_eq!(wrong.err(), Some(VerifyError::Mismatch), "{name}: wrong secret");

        match &case.tampered_body {
            Some(tampered) => {
                assert_ne!(tampered, &case.body);
                let result = case.run(
                    scheme.as_ref(),
                    &case.secret,
                    &case.headers(),
                    tampered,
                    case.query.as_deref(),
                    case.now_ms,
                );
                assert_eq!(result.err(), Some(VerifyError::Mismatch), "{name}: tampered body");
            }
            None => assert!(scheme.is_token(), "{name}: only a token covers no body"),
        }

        assert_eq!(case.stale_now_ms.is_some(), preset.timed, "{name}: a stale twin exactly for timed presets");
        if let Some(stale) = case.stale_now_ms {
            let result =
                case.run(scheme.as_ref(), &case.secret, &case.headers(), &case.body, case.query.as_deref(), stale);
            assert!(matches!(result, Err(VerifyError::TimestampStale { .. })), "{name}: stale: {result:?}");
        }

        let mut refused_missing = false;
        if let Some(header) = &case.missing_header {
            let mut headers = case.headers();
            headers.remove(header.as_str());
            let result =
                case.run(scheme.as_ref(), &case.secret, &headers, &case.body, case.query.as_deref(), case.now_ms);
            assert!(matches!(result, Err(VerifyError::MissingSignature(_))), "{name}: missing {header}: {result:?}");
            refused_missing = true;
        }
        if let Some(body) = &case.missing_body {
            let result =
                case.run(scheme.as_ref(), &case.secret, &case.headers(), body, case.query.as_deref(), case.now_ms);
            assert!(matches!(result, Err(VerifyError::MissingSignature(_))), "{name}: missing in body: {result:?}");
            refused_missing = true;
        }
        if let Some(query) = &case.missing_query {
            let result = case.run(scheme.as_ref(), &case.secret, &case.headers(), &case.body, Some(query), case.now_ms);
            assert!(matches!(result, Err(VerifyError::MissingSignature(_))), "{name}: missing in query: {result:?}");
            refused_missing = true;
        }
        assert!(refused_missing || name == "docusign", "{name}: a missing-signature twin");
    }
}

#[test]
fn every_preset_has_a_case_and_a_unique_name() {
    let covered: HashSet<String> = cases().into_iter().map(|case| case.scheme).collect();
    let mut names = HashSet::new();
    for preset in all() {
        assert!(covered.contains(preset.name), "preset `{}` has no case in testdata/presets.json", preset.name);
        assert!(names.insert(preset.name), "preset `{}` is listed twice", preset.name);
        assert!(!crate::SCHEME_NAMES.contains(&preset.name), "`{}` is also a scheme", preset.name);
    }
}

#[test]
fn a_tolerance_is_refused_for_untimed_presets_and_honoured_for_timed_ones() {
    for preset in all() {
        let options = SchemeOptions { tolerance_s: Some(30), ..SchemeOptions::default() };
        assert_eq!(build(preset.name, &options).is_ok(), preset.timed, "{}", preset.name);
    }
}

/// docs/providers.md's table is this module's: a preset added here and not there (or changed) fails.
#[test]
fn docs_providers_md_lists_every_preset_as_built() {
    let doc = include_str!("../../../docs/providers.md");
    let start = doc.find("<!-- presets:start -->\n").expect("start marker") + "<!-- presets:start -->\n".len();
    let end = doc.find("<!-- presets:end -->").expect("end marker");
    let expected = markdown_table();
    if doc[start..end] != expected {
        let path = std::env::temp_dir().join("hookline-providers-table.md");
        let _ = std::fs::write(&path, &expected);
        panic!("docs/providers.md's preset table is stale; the current one is in {}", path.display());
    }
}

#[test]
fn every_presets_timed_flag_is_what_its_familys_scheme_checks() {
    for preset in all() {
        let inner = (preset.build)(None).unwrap_or_else(|problem| panic!("{}: {problem}", preset.name));
        assert_eq!(inner.signs_timestamp(), preset.timed, "{}", preset.name);
        assert_eq!(preset.build(None).expect("builds").signs_timestamp(), preset.timed, "{}", preset.name);
    }
}
