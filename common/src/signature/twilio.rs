//! Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 with the auth token (or, when a Webhook Setting applies and
//! `X-Twilio-Webhooks-Signature-Settings` says `algorithm=HMAC_SHA256`, HMAC-SHA256 with its shared key) of the full
//! URL Twilio requested followed by every POST parameter, sorted by name, as `name + value`.
//!
//! Form-encoded bodies are signed through their parameters. A JSON body is signed through the URL alone, which
//! then carries `bodySHA256=<hex>` of the raw body; that hash is checked too. Any other body cannot be verified
//! (415). The URL is the source's `public_url` plus the query string; as Twilio's SDKs do, it is tried with and
//! without the scheme's default port. Event id from `I-Twilio-Idempotency-Token`, else the body's SHA-256.

use sha2::{Digest, Sha256};

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{Algorithm, BASE64, BASE64_LENIENT, equal, first_hmac_match, header, hmac, required_header},
};
use base64::Engine;

const SIGNATURE: &str = "X-Twilio-Signature";
const SETTINGS: &str = "X-Twilio-Webhooks-Signature-Settings";
const FORM: &str = "application/x-www-form-urlencoded";

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
    let mut params: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    params.sort();
    params.iter().map(|(name, value)| format!("{name}{value}")).collect()
}

/// [`signed_params`] with repeated name/value pairs counted once, as Twilio's Python SDK builds the string.
/// Tried as well when the body repeats a pair, so either convention verifies.
pub fn signed_params_deduplicated(body: &[u8]) -> String {
    let mut params: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    params.sort();
    params.dedup();
    params.iter().map(|(name, value)| format!("{name}{value}")).collect()
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
        let body_hash = if form { None } else { Some(body_sha256_param(url)) };
        let mut param_strings = match body_hash {
            None => vec![signed_params(request.body)],
            Some(Some(_)) => vec![String::new()],
            Some(None) => return Err(VerifyError::UnsupportedContentType(FORM)),
        };
        if body_hash.is_none() {
            let deduplicated = signed_params_deduplicated(request.body);
            if deduplicated != param_strings[0] {
                param_strings.push(deduplicated);
            }
        }
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
        if let Some(Some(expected)) = body_hash {
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
    use crate::signature::tests::{check_at, headers};

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
