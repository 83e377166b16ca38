//! `hookline-gateway verify --source <name> --request <file> [--at <time>]`: checks a captured request (from a
//! provider's delivery log, a tcpdump, a `curl --trace`) against one source's config, offline, and says which
//! step fails. Nothing is produced and nothing is listened on; the source's secrets are read as the gateway would.
//!
//! The file is the HTTP/1.1 request as sent: the request line (`POST /webhooks/acme?x=1 HTTP/1.1`), the headers,
//! an empty line, then the body byte for byte (lines of the head may end in `\r\n` or `\n`).

use std::fmt::Write as _;

use bytes::Bytes;
use hookline_signature::{self as signature, Coverage, UnverifiedRequest, VerifyError, handshake::HandshakeKeys};
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::{config::GatewayConfig, source::Source};

/// A request read from a capture.
#[derive(Debug)]
pub struct CapturedRequest {
    pub method: Method,
    /// The request target: path and, after `?`, the query.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why a captured request does not parse.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("no empty line between the head and the body")]
    NoBlankLine,
    #[error("the request head is not UTF-8")]
    HeadNotUtf8(#[source] std::str::Utf8Error),
    #[error("the first line `{0}` is not `METHOD /path HTTP/1.1`")]
    RequestLine(String),
    #[error("`{method}` is not a method")]
    Method {
        method: String,
        #[source]
        source: http::method::InvalidMethod,
    },
    #[error("header line `{0}` has no `:`")]
    NoColon(String),
    #[error("`{name}` is not a header name")]
    HeaderName {
        name: String,
        #[source]
        source: http::header::InvalidHeaderName,
    },
    #[error("the value of `{name}` is not a header value")]
    HeaderValue {
        name: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
}

impl CapturedRequest {
    /// Parses `bytes` (see the module docs), or says what is wrong with them.
    pub fn parse(bytes: &[u8]) -> Result<Self, CaptureError> {
        let (head, body) = split_head(bytes).ok_or(CaptureError::NoBlankLine)?;
        let head = std::str::from_utf8(head).map_err(CaptureError::HeadNotUtf8)?;
        let mut lines = head.lines().map(|line| line.trim_end_matches('\r'));
        let request_line = lines.next().unwrap_or_default();
        let mut words = request_line.split_whitespace();
        let (Some(method), Some(target)) = (words.next(), words.next()) else {
            return Err(CaptureError::RequestLine(request_line.to_owned()));
        };
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|source| CaptureError::Method { method: method.to_owned(), source })?;
        let mut headers = HeaderMap::new();
        for line in lines.filter(|line| !line.is_empty()) {
            let (name, value) = line.split_once(':').ok_or_else(|| CaptureError::NoColon(line.to_owned()))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|source| CaptureError::HeaderName { name: name.trim().to_owned(), source })?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|source| CaptureError::HeaderValue { name: name.to_string(), source })?;
            headers.append(name, value);
        }
        Ok(Self { method, target: target.to_owned(), headers, body: Bytes::copy_from_slice(body) })
    }

    fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(path, _)| path)
    }

    fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, query)| query)
    }
}

fn split_head(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let crlf = bytes.windows(4).position(|window| window == b"\r\n\r\n").map(|at| (at, at + 4));
    let lf = bytes.windows(2).position(|window| window == b"\n\n").map(|at| (at, at + 2));
    let (end, body) = match (crlf, lf) {
        (Some(crlf), Some(lf)) => {
            if crlf.0 < lf.0 {
                crlf
            } else {
                lf
            }
        }
        (Some(found), None) | (None, Some(found)) => found,
        (None, None) => return None,
    };
    Some((&bytes[..end], &bytes[body..]))
}

/// What the check found: one line per step, and whether the gateway would accept the request.
#[derive(Debug)]
pub struct Report {
    pub lines: Vec<String>,
    pub accepted: bool,
}

impl Report {
    fn step(&mut self, ok: bool, step: &str, detail: impl AsRef<str>) {
        self.lines.push(format!("{} {step}: {}", if ok { "ok  " } else { "FAIL" }, detail.as_ref()));
    }
}

/// Checks `request` against source `source_name` of `config` as the gateway would at `at_ms` (ms since the
/// epoch; a captured request's timestamp is usually long past: pass the time it was sent).
pub fn check(config: &GatewayConfig, source_name: &str, request: &CapturedRequest, at_ms: i64) -> Report {
    let mut report = Report { lines: Vec::new(), accepted: false };
    let Some(source_config) = config.sources.iter().find(|source| source.name == source_name) else {
        let names: Vec<&str> = config.sources.iter().map(|source| source.name.as_str()).collect();
        report.step(false, "source", format!("no source `{source_name}` in the config (it has: {})", names.join(", ")));
        return report;
    };
    let source = match Source::from_config(source_config, &config.kafka.inbound_topic) {
        Ok(source) => {
            report.step(true, "source", format!("`{}`, scheme `{}`", source.name, source.scheme.name()));
            source
        }
        Err(problems) => {
            report.step(false, "source", format!("the source does not build: {}", problems.join("; ")));
            return report;
        }
    };
    let expected_path = format!("/webhooks/{source_name}");
    if request.path() != expected_path {
        report.lines.push(format!(
            "note  request: sent to `{}`, the gateway serves this source at `{expected_path}`",
            request.path()
        ));
    }
    let unverified = UnverifiedRequest::new(&request.headers, &request.body, at_ms)
        .with_method(&request.method)
        .with_query(request.query());
    let keys = HandshakeKeys {
        scheme: source.scheme.as_ref(),
        secrets: &source.secrets,
        verify_tokens: &source.verify_tokens,
    };
    for challenge in &source.handshakes {
        if let Some(answer) = challenge.answer_unverified(&unverified, keys) {
            match answer {
                Ok(handshake) => {
                    report.step(
                        true,
                        "handshake",
                        format!("`{}` answered 200 {}", challenge.name(), handshake.content_type),
                    );
                    report.accepted = true;
                }
                Err(error) => {
                    report.step(false, "handshake", format!("`{}` refused: {}", challenge.name(), explain(&error)))
                }
            }
            return report;
        }
    }
    if request.method != Method::POST {
        report.step(
            false,
            "method",
            format!("{} is answered 405: only POST (and this source's handshakes) are served", request.method),
        );
        return report;
    }
    if request.body.len() > source.max_body_bytes {
        report.step(
            false,
            "body",
            format!("{} bytes, over max_body_bytes {}", request.body.len(), source.max_body_bytes),
        );
        return report;
    }
    let mut unverified = unverified;
    let url = source.signed_url(request.query());
    if let Some(url) = &url {
        unverified = unverified.with_url(url);
    }
    let proof = match signature::verify(source.scheme.as_ref(), &unverified, &source.secrets) {
        Ok(proof) => proof,
        Err(error) => {
            let active: Vec<&str> =
                signature::active_secrets(&source.secrets, at_ms).map(|secret| secret.id.as_str()).collect();
            let detail = format!("{} (secrets tried: {})", explain(&error), active.join(", "));
            let step = if error.skew_ms().is_some() { "timestamp" } else { "signature" };
            report.step(false, step, detail);
            return report;
        }
    };
    let coverage = match proof.coverage() {
        Coverage::WholeBody => "the whole body",
        Coverage::SignedFields { .. } => "some body fields only",
        Coverage::Token => "nothing (a token)",
        Coverage::BodyChecksum => "a CRC32 of the body only (anyone can match it)",
    };
    report.step(true, "signature", format!("matched secret `{}`; the proof covers {coverage}", proof.secret_id()));
    if let Some(handshake) = source
        .secrets
        .iter()
        .find(|secret| secret.id == proof.secret_id())
        .and_then(|secret| source.scheme.handshake(&unverified, secret))
    {
        report.step(true, "handshake", format!("the scheme's own, answered 200 {}", handshake.content_type));
        report.accepted = true;
        return report;
    }
    if let Some(challenge) = source.handshakes.iter().find(|challenge| challenge.answer_verified(&unverified).is_some())
    {
        report.step(true, "handshake", format!("`{}` answered 200", challenge.name()));
        report.accepted = true;
        return report;
    }
    let (event_id, event_type) = match proof.coverage() {
        Coverage::SignedFields { event_id, event_type } => (Some(event_id.clone()), event_type.clone()),
        _ => {
            let verifying = source.scheme.is_verifying();
            let identity = source
                .identity
                .identify_signed(&request.headers, &request.body, &|name| !verifying || proof.signs_header(name));
            (identity.event_id, identity.event_type)
        }
    };
    match event_id {
        Some(event_id) => {
            let mut detail = format!("event id `{event_id}`");
            let _ = write!(detail, ", type `{}`", event_type.as_deref().unwrap_or("-"));
            report.step(true, "identity", detail);
            report.accepted = true;
        }
        None => {
            report.step(false, "identity", "no event id where this source expects one: answered 400 event_id_missing")
        }
    }
    report
}

/// What a verification error means for whoever is debugging a captured request.
fn explain(error: &VerifyError) -> String {
    let hint = match error {
        VerifyError::MissingSignature(_) => "the header (or field) the scheme reads is not in the capture",
        VerifyError::MalformedSignature(_) => "it is there but not in the provider's format (prefix, encoding, length)",
        VerifyError::Mismatch => {
            "no active secret gives this signature: wrong secret, a body changed in capture (re-encoded JSON, \
             a trailing newline), or the wrong scheme"
        }
        VerifyError::TimestampStale { .. } | VerifyError::TimestampFuture { .. } => {
            "outside the tolerance at the time checked: pass --at with the time the request was sent"
        }
        _ => "",
    };
    let skew = error
        .skew_ms()
        .map(|skew| format!(" (timestamp {:+} s from the time checked)", skew / 1000))
        .unwrap_or_default();
    format!("{} [{}]{skew}: {hint}", error, error.reason())
}

#[cfg(test)]
mod tests {
    use hookline_common::config::SecretRef;

    use super::*;
    use crate::config::SourceConfig;

    fn config(secret_file: &str) -> GatewayConfig {
        GatewayConfig {
            sources: vec![SourceConfig {
                type_from_header: Some(true),
                ..SourceConfig::new("gh", "github", vec![SecretRef::from_file("a", secret_file)])
            }],
            ..GatewayConfig::default()
        }
    }

    fn secret_file(contents: &str) -> String {
        let path = std::env::temp_dir().join(format!("hookline-offline-verify-{}-{contents}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }

    /// GitHub's documented vector, captured with `\n` line ends.
    const CAPTURE: &[u8] = b"POST /webhooks/gh HTTP/1.1\nHost: x\nX-Hub-Signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17\nX-GitHub-Delivery: d-1\n\nHello, World!";

    #[test]
    fn a_genuine_capture_passes_every_step() {
        let config = config(&secret_file("It's a Secret to Everybody"));
        let request = CapturedRequest::parse(CAPTURE).unwrap();
        assert_eq!(request.body.as_ref(), b"Hello, World!");
        let report = check(&config, "gh", &request, 0);
        assert!(report.accepted, "{:?}", report.lines);
        assert!(
            report.lines.iter().any(|line| line.starts_with("ok   identity: event id `sha256:")),
            "{:?}",
            report.lines
        );
    }

    #[test]
    fn a_handshake_capture_is_checked_with_the_sources_verify_token() {
        let config = GatewayConfig {
            sources: vec![SourceConfig {
                verify_tokens: vec![SecretRef::from_file("v", secret_file("meta-verify"))],
                ..SourceConfig::new("wa", "meta", vec![SecretRef::from_file("app", secret_file("meta-app"))])
            }],
            ..GatewayConfig::default()
        };
        let good = b"GET /webhooks/wa?hub.mode=subscribe&hub.verify_token=meta-verify&hub.challenge=42 HTTP/1.1\n\n";
        let report = check(&config, "wa", &CapturedRequest::parse(good).unwrap(), 0);
        assert!(report.accepted, "{:?}", report.lines);
        let bad = b"GET /webhooks/wa?hub.mode=subscribe&hub.verify_token=guess&hub.challenge=42 HTTP/1.1\n\n";
        let report = check(&config, "wa", &CapturedRequest::parse(bad).unwrap(), 0);
        assert!(!report.accepted);
        assert!(report.lines.last().unwrap().contains("`meta_hub` refused"), "{:?}", report.lines);
    }

    #[test]
    fn the_failing_step_is_named() {
        let config = config(&secret_file("not the secret"));
        let report = check(&config, "gh", &CapturedRequest::parse(CAPTURE).unwrap(), 0);
        assert!(!report.accepted);
        assert!(report.lines.last().unwrap().starts_with("FAIL signature:"), "{:?}", report.lines);
        assert!(report.lines.last().unwrap().contains("signature_mismatch"));
        let report = check(&config, "nope", &CapturedRequest::parse(CAPTURE).unwrap(), 0);
        assert!(report.lines[0].starts_with("FAIL source: no source `nope`"));
        let get = CapturedRequest::parse(b"GET /webhooks/gh HTTP/1.1\r\n\r\n").unwrap();
        assert!(check(&config, "gh", &get, 0).lines.last().unwrap().starts_with("FAIL method"));
        assert!(CapturedRequest::parse(b"POST /x HTTP/1.1\nno-colon\n\nbody").is_err());
        assert!(CapturedRequest::parse(b"no blank line").is_err());
    }
}
