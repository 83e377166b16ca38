//! Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 with the auth token (or, when a Webhook Setting applies and
//! `X-Twilio-Webhooks-Signature-Settings` says `algorithm=HMAC_SHA256`, HMAC-SHA256 with its shared key) of the full
//! URL Twilio requested followed by every POST parameter, sorted by name, as `name + value`.
//!
//! Form-encoded bodies are signed through their parameters. A JSON body is signed through the URL alone, which
//! then carries `bodySHA256=<hex>` of the raw body; that hash is checked too. Any other body cannot be verified
//! (415). The URL is the source's `public_url` plus the query string; as Twilio's SDKs do, it is tried with and
//! without the scheme's default port. Event id from `I-Twilio-Idempotency-Token`, else the body's SHA-256.
//!
//! Cost: the signed string is the sorted parameters, so it must be built before the signature can be checked,
//! and a forged form costs what building it costs. Twilio sends fewer than 100 parameters in a few KiB, so a form
//! over [`MAX_FORM_BYTES`] or [`MAX_FORM_PARAMS`] is refused (413 `form_too_large`) before it is parsed; the
//! string is built once (the deduplicated variant from the same sorted list), and the gateway runs the scheme on
//! the blocking pool under the source's verification budget ([`Scheme::is_costly`], as every URL-signing scheme).

use sha2::{Digest, Sha256};

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, BASE64_LENIENT, equal, first_hmac_match, header, hmac, required_header},
};
use base64::Engine;

const SIGNATURE: &str = "X-Twilio-Signature";
const SETTINGS: &str = "X-Twilio-Webhooks-Signature-Settings";
const FORM: &str = "application/x-www-form-urlencoded";

/// Largest form body verified (bytes): Twilio's requests are a few KiB.
pub const MAX_FORM_BYTES: usize = 64 * 1024;
/// Most form parameters verified: Twilio sends fewer than 100.
pub const MAX_FORM_PARAMS: usize = 256;

#[derive(Debug, Clone, Copy, Default)]
pub struct Twilio;

/// The algorithm a `X-Twilio-Webhooks-Signature-Settings` value names (`key=<sid>,algorithm=HMAC_SHA256`).
pub fn settings_algorithm(value: &str) -> Option<Algorithm> {
    let algorithm = value.split(',').find_map(|item| item.trim().strip_prefix("algorithm="))?;
    match algorithm.trim() {
        "HMAC_SHA1" => Some(Algorithm::Sha1),
        "HMAC_SHA256" => Some(Algorithm::Sha256),
        _ => None,
    }
}

/// The URL with the scheme's default port added when absent, or removed when present.
pub fn toggle_default_port(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return None,
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (format!("{userinfo}@"), host_port),
        None => (String::new(), authority),
    };
    // An IPv6 literal's colons are inside brackets; a port follows the closing one.
    let port_start = host_port.rfind(':').filter(|&colon| !host_port[colon..].contains(']'));
    let host_port = match port_start {
        Some(colon) if &host_port[colon + 1..] == default_port => host_port[..colon].to_owned(),
        Some(_) => return None,
        None => format!("{host_port}:{default_port}"),
    };
    Some(format!("{scheme}://{userinfo}{host_port}{tail}"))
}

/// The POST parameters as Twilio signs them: sorted by name (then value), `name + value` concatenated.
pub fn signed_params(body: &[u8]) -> String {
    signed_param_strings(body).0
}

/// [`signed_params`] with repeated name/value pairs counted once, as Twilio's Python SDK builds the string.
/// Tried as well when the body repeats a pair, so either convention verifies.
pub fn signed_params_deduplicated(body: &[u8]) -> String {
    let (all, deduplicated) = signed_param_strings(body);
    deduplicated.unwrap_or(all)
}

/// Both strings from one parse and one sort: every pair, and (only when the body repeats a pair) each pair once.
fn signed_param_strings(body: &[u8]) -> (String, Option<String>) {
    let mut params: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> =
        form_urlencoded::parse(body).collect();
    params.sort_unstable();
    let length = params.iter().map(|(name, value)| name.len() + value.len()).sum();
    let mut all = String::with_capacity(length);
    let mut deduplicated: Option<String> = None;
    for (index, (name, value)) in params.iter().enumerate() {
        let repeated = index > 0 && params[index - 1] == params[index];
        if repeated && deduplicated.is_none() {
            deduplicated = Some(all.clone());
        }
        all.push_str(name);
        all.push_str(value);
        if let Some(deduplicated) = deduplicated.as_mut().filter(|_| !repeated) {
            deduplicated.push_str(name);
            deduplicated.push_str(value);
        }
    }
    (all, deduplicated)
}

/// Whether a form is small enough to verify: at most [`MAX_FORM_BYTES`] and [`MAX_FORM_PARAMS`] parameters,
/// counted without parsing (each `&` starts one).
fn form_within_bounds(body: &[u8]) -> bool {
    body.len() <= MAX_FORM_BYTES && body.iter().filter(|&&byte| byte == b'&').count() < MAX_FORM_PARAMS
}

fn is_form(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|value| value.split(';').next())
        .is_some_and(|media_type| media_type.trim().eq_ignore_ascii_case(FORM))
}

/// The `bodySHA256` query parameter of a URL, if any.
fn body_sha256_param(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == "bodySHA256").map(|(_, value)| value.into_owned())
}

impl Scheme for Twilio {
    fn name(&self) -> &'static str {
        "twilio"
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let value = required_header(request.headers, "x-twilio-signature", SIGNATURE)?;
        let algorithm = match header(request.headers, "x-twilio-webhooks-signature-settings") {
            None => Algorithm::Sha1,
            Some(settings) => settings_algorithm(settings).ok_or(VerifyError::malformed(SETTINGS))?,
        };
        let length = if algorithm == Algorithm::Sha1 { 20 } else { 32 };
        let signature = BASE64_LENIENT
            .decode(value.trim())
            .ok()
            .filter(|bytes| bytes.len() == length)
            .ok_or(VerifyError::malformed(SIGNATURE))?;
        let url = request.url.ok_or(VerifyError::Mismatch)?;

        let form = is_form(header(request.headers, "content-type"));
        if form && !form_within_bounds(request.body) {
            return Err(VerifyError::FormTooLarge { max_bytes: MAX_FORM_BYTES, max_params: MAX_FORM_PARAMS });
        }
        // A JSON body is signed through the URL, which carries its hash.
        let body_hash = if form { None } else { body_sha256_param(url) };
        let param_strings: Vec<String> = if form {
            let (all, deduplicated) = signed_param_strings(request.body);
            std::iter::once(all).chain(deduplicated).collect()
        } else if body_hash.is_some() {
            vec![String::new()]
        } else {
            return Err(VerifyError::UnsupportedContentType(FORM));
        };
        let mut urls = vec![url.to_owned()];
        urls.extend(toggle_default_port(url));
        let verified = urls
            .iter()
            .flat_map(|url| param_strings.iter().map(move |params| (url, params)))
            .find_map(|(url, params)| {
                let parts: [&[u8]; 2] = [url.as_bytes(), params.as_bytes()];
                first_hmac_match(algorithm, secrets, &parts, std::slice::from_ref(&signature)).ok()
            })
            .ok_or(VerifyError::Mismatch)?;
        if let Some(expected) = body_hash {
            let actual = hex::encode(Sha256::digest(request.body));
            if !equal(actual.as_bytes(), expected.to_ascii_lowercase().as_bytes()) {
                return Err(VerifyError::Mismatch);
            }
        }
        Ok(verified)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::header("i-twilio-idempotency-token"), FieldSource::BodySha256], vec![])
    }

    fn signs_url(&self) -> bool {
        true
    }
}

/// The `X-Twilio-Signature` value (HMAC-SHA1) for a form-encoded `body` posted to `url`.
pub fn sign(key: &[u8], url: &str, body: &[u8]) -> String {
    let params = signed_params(body);
    BASE64.encode(hmac(Algorithm::Sha1, key, &[url.as_bytes(), params.as_bytes()]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{check_at, headers};

    const TOKEN: &str = "12345";
    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const BODY: &[u8] =
        b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1234&From=%2B14158675309&To=%2B18005551212";
    const VECTOR: &str = "RSOYDt4T1cUTdK1PDd93/VVr8B8=";

    fn run(url: &str, extra: &[(&str, &str)], body: &[u8], secrets: &[(&str, &str)]) -> Result<String, VerifyError> {
        let mut pairs = vec![(SIGNATURE, VECTOR), ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")];
        pairs.extend_from_slice(extra);
        let headers = headers(&pairs);
        check_at(&Twilio, &http::Method::POST, Some(url), &headers, body, secrets, 0)
    }

    #[test]
    fn sdk_vector_verifies_in_any_parameter_order() {
        assert_eq!(run(URL, &[], BODY, &[("a", TOKEN)]), Ok("a".to_owned()));
        let shuffled =
            b"To=%2B18005551212&Digits=1234&Caller=%2B14158675309&From=%2B14158675309&CallSid=CA1234567890ABCDE";
        assert_eq!(run(URL, &[], shuffled, &[("a", TOKEN)]), Ok("a".to_owned()));
        assert_eq!(sign(TOKEN.as_bytes(), URL, BODY), VECTOR);
    }

    #[test]
    fn repeated_pairs_verify_under_either_convention() {
        let body = b"Tag=a&Tag=a&Tag=b";
        let headers_for = |signature: &str| headers(&[(SIGNATURE, signature), ("Content-Type", FORM)]);
        for params in [signed_params(body), signed_params_deduplicated(body)] {
            let signature =
                BASE64.encode(hmac(Algorithm::Sha1, TOKEN.as_bytes(), &[URL.as_bytes(), params.as_bytes()]));
            let result =
                check_at(&Twilio, &http::Method::POST, Some(URL), &headers_for(&signature), body, &[("a", TOKEN)], 0);
            assert_eq!(result, Ok("a".to_owned()), "{params}");
        }
        assert_eq!(signed_params_deduplicated(body), "TagaTagb");
    }

    #[test]
    fn forms_past_the_bounds_are_refused_before_parsing_and_forms_within_them_verify() {
        let sign_headers = |body: &[u8]| {
            let signature = sign(TOKEN.as_bytes(), URL, body);
            headers(&[(SIGNATURE, signature.as_str()), ("Content-Type", FORM)])
        };
        let run = |body: &[u8]| {
            check_at(&Twilio, &http::Method::POST, Some(URL), &sign_headers(body), body, &[("a", TOKEN)], 0)
        };
        let params = |n: usize, value: &str| (0..n).map(|i| format!("p{i}={value}")).collect::<Vec<_>>().join("&");
        let too_large = Err(VerifyError::FormTooLarge { max_bytes: MAX_FORM_BYTES, max_params: MAX_FORM_PARAMS });
        // Genuinely signed, and refused all the same: the bound holds whoever sends it.
        assert_eq!(run(params(MAX_FORM_PARAMS + 1, "v").as_bytes()), too_large);
        let long_value = "v".repeat(MAX_FORM_BYTES);
        assert_eq!(run(format!("Body={long_value}").as_bytes()), too_large);
        assert_eq!(run(params(MAX_FORM_PARAMS, "v").as_bytes()), Ok("a".to_owned()));
        let at_size = format!("Body={}", "v".repeat(MAX_FORM_BYTES - "Body=".len()));
        assert_eq!(run(at_size.as_bytes()), Ok("a".to_owned()));
        assert_eq!(signed_param_strings(b"b=2&a=1"), ("a1b2".to_owned(), None));
        assert_eq!(signed_param_strings(b"b=2&a=1&b=2"), ("a1b2b2".to_owned(), Some("a1b2".to_owned())));
    }

    #[test]
    fn default_port_is_tried_both_ways() {
        assert_eq!(
            run("https://mycompany.com:443/myapp.php?foo=1&bar=2", &[], BODY, &[("a", TOKEN)]),
            Ok("a".to_owned())
        );
        assert_eq!(toggle_default_port("https://u:p@h.test/x"), Some("https://u:p@h.test:443/x".to_owned()));
        assert_eq!(toggle_default_port("http://h.test:80?x"), Some("http://h.test?x".to_owned()));
        assert_eq!(toggle_default_port("https://[::1]/x"), Some("https://[::1]:443/x".to_owned()));
        assert_eq!(toggle_default_port("https://h.test:8443/x"), None);
    }

    #[test]
    fn tampered_params_url_wrong_token_rotation() {
        let tampered =
            b"CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1235&From=%2B14158675309&To=%2B18005551212";
        assert_eq!(run(URL, &[], tampered, &[("a", TOKEN)]), Err(VerifyError::Mismatch));
        assert_eq!(
            run("https://mycompany.com/myapp.php?foo=1&bar=3", &[], BODY, &[("a", TOKEN)]),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(run(URL, &[], BODY, &[("a", "54321")]), Err(VerifyError::Mismatch));
        assert_eq!(run(URL, &[], BODY, &[("n", "54321"), ("o", TOKEN)]), Ok("o".to_owned()));
    }

    #[test]
    fn json_bodies_are_signed_through_body_sha256() {
        let body = br#"{"property": "value", "boolean": true}"#;
        let hash = hex::encode(Sha256::digest(body));
        let url = format!("https://mycompany.com/myapp.php?bodySHA256={hash}");
        let signature = BASE64.encode(hmac(Algorithm::Sha1, TOKEN.as_bytes(), &[url.as_bytes()]));
        let headers = headers(&[(SIGNATURE, &signature), ("Content-Type", "application/json")]);
        let run = |body: &[u8]| check_at(&Twilio, &http::Method::POST, Some(&url), &headers, body, &[("a", TOKEN)], 0);
        assert_eq!(run(body), Ok("a".to_owned()));
        assert_eq!(run(br#"{"property": "value", "boolean": false}"#), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_json_body_without_body_sha256_is_unsupported() {
        let headers = headers(&[(SIGNATURE, VECTOR), ("Content-Type", "application/json")]);
        let result = check_at(&Twilio, &http::Method::POST, Some(URL), &headers, b"{}", &[("a", TOKEN)], 0);
        assert_eq!(result, Err(VerifyError::UnsupportedContentType(FORM)));
    }

    #[test]
    fn sha256_settings_switch_the_algorithm() {
        let signature =
            BASE64.encode(hmac(Algorithm::Sha256, b"shared-key", &[URL.as_bytes(), signed_params(BODY).as_bytes()]));
        let headers =
            headers(&[(SIGNATURE, &signature), (SETTINGS, "key=WS123,algorithm=HMAC_SHA256"), ("Content-Type", FORM)]);
        let secrets = [("auth-token", TOKEN), ("shared", "shared-key")];
        assert_eq!(
            check_at(&Twilio, &http::Method::POST, Some(URL), &headers, BODY, &secrets, 0),
            Ok("shared".to_owned())
        );
        assert_eq!(settings_algorithm("key=x,algorithm=HMAC_MD5"), None);
        assert_eq!(
            run(URL, &[(SETTINGS, "algorithm=ROT13")], BODY, &[("a", TOKEN)]),
            Err(VerifyError::malformed(SETTINGS))
        );
    }
}
