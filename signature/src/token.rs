//! The token family: the provider presents a shared secret itself (a header, HTTP Basic credentials, a query
//! parameter or a field of the body) instead of signing the request. Okta, Postmark, Telegram, Auth0, Chargebee,
//! Pipedrive, Azure Event Grid (a secret in the URL) and Microsoft Graph (`clientState`) are presets of it.
//!
//! ```toml
//! [sources.token]
//! header = "Authorization"            # exactly one of header, query, json_pointer
//! # query = "code"                    # a query parameter of the URL the provider was given
//! # json_pointer = "/value/*/clientState"   # `*` once: every element of that array must carry the token
//! prefix = "Bearer "                  # stripped before comparing (header only); default none
//! basic = false                       # true: HTTP Basic; each secret is `user:password`
//! ```
//!
//! A token proves less than a signature: anyone who sees one request (a logging proxy, a misrouted copy) can send
//! any body with it for as long as the secret is valid, and it covers neither the body nor a timestamp, so
//! nothing stops a replay. Sources must opt in (`allow_token = true`, see docs/security.md). Comparisons hash both
//! sides and compare the digests in constant time, so neither the token's length nor where it differs shows.

use std::borrow::Cow;

use base64::Engine;
use serde::Deserialize;

use super::{
    FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    support::{BASE64_LENIENT, digest_equal},
};
use crate::BuildError;

/// `[sources.token]`.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenOptions {
    pub header: Option<String>,
    pub query: Option<String>,
    pub json_pointer: Option<String>,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub basic: bool,
}

/// Where the token is presented.
#[derive(Debug, Clone)]
enum Location {
    Header(http::HeaderName),
    Basic,
    Query(String),
    /// Every element of the array at `array` carries the token at `field` (`field` empty: the pointer itself).
    Body {
        array: Option<String>,
        field: String,
    },
}

/// A configured token scheme.
#[derive(Debug, Clone)]
pub struct Token {
    name: &'static str,
    location: Location,
    prefix: String,
}

impl Token {
    pub fn new(options: &TokenOptions) -> Result<Self, BuildError> {
        let given = [options.header.is_some(), options.query.is_some(), options.json_pointer.is_some()];
        if options.basic && (options.query.is_some() || options.json_pointer.is_some()) {
            return Err("token.basic reads the Authorization header: set no query or json_pointer".into());
        }
        if !options.basic && given.iter().filter(|given| **given).count() != 1 {
            return Err("token needs exactly one of header, query or json_pointer".into());
        }
        if !options.prefix.is_empty() && (options.header.is_none() || options.basic) {
            return Err("token.prefix applies only to a header token".into());
        }
        let location = if options.basic {
            if options.header.as_deref().is_some_and(|name| !name.eq_ignore_ascii_case("authorization")) {
                return Err("token.basic reads the Authorization header".into());
            }
            Location::Basic
        } else if let Some(name) = &options.header {
            Location::Header(
                http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("token.header `{name}` is not a valid header name"))?,
            )
        } else if let Some(name) = &options.query {
            Location::Query(name.clone())
        } else {
            let pointer = options.json_pointer.clone().unwrap_or_default();
            if !pointer.starts_with('/') {
                return Err(format!("token.json_pointer `{pointer}` must start with `/`").into());
            }
            match pointer.split_once("/*") {
                None => Location::Body { array: None, field: pointer },
                Some((array, field)) if !field.contains("/*") && (field.is_empty() || field.starts_with('/')) => {
                    Location::Body { array: Some(array.to_owned()), field: field.to_owned() }
                }
                Some(_) => {
                    return Err(
                        format!("token.json_pointer `{pointer}`: `*` may appear once, as a whole segment").into()
                    );
                }
            }
        };
        Ok(Self { name: "token", location, prefix: options.prefix.clone() })
    }

    fn display(&self) -> Cow<'static, str> {
        match &self.location {
            Location::Header(name) => Cow::Owned(name.as_str().to_owned()),
            Location::Basic => Cow::Borrowed("authorization"),
            Location::Query(name) => Cow::Owned(format!("query {name}")),
            Location::Body { array: Some(array), field } => Cow::Owned(format!("body {array}/*{field}")),
            Location::Body { array: None, field } => Cow::Owned(format!("body {field}")),
        }
    }

    /// The tokens the request presents (several for a batch whose every element carries one).
    fn presented(&self, request: &UnverifiedRequest<'_>) -> Result<Vec<Vec<u8>>, VerifyError> {
        let missing = || VerifyError::MissingSignature(self.display());
        let malformed = || VerifyError::MalformedSignature(self.display());
        match &self.location {
            Location::Header(name) => {
                let value = request.headers.get(name).ok_or_else(missing)?.as_bytes();
                let token = value.strip_prefix(self.prefix.as_bytes()).ok_or_else(malformed)?;
                Ok(vec![token.to_vec()])
            }
            Location::Basic => {
                let value = request.headers.get(http::header::AUTHORIZATION).ok_or_else(missing)?;
                let value = value.to_str().map_err(|_| malformed())?.trim();
                let (scheme, credentials) = value.split_once(' ').ok_or_else(malformed)?;
                if !scheme.eq_ignore_ascii_case("basic") {
                    return Err(malformed());
                }
                Ok(vec![BASE64_LENIENT.decode(credentials.trim()).map_err(|_| malformed())?])
            }
            Location::Query(name) => Ok(vec![request.query_parameter(name).ok_or_else(missing)?.into_bytes()]),
            Location::Body { array, field } => {
                let body: serde_json::Value = serde_json::from_slice(request.body)
                    .map_err(|_| VerifyError::UnsupportedContentType("application/json"))?;
                let text = |value: &serde_json::Value| value.as_str().map(|text| text.as_bytes().to_vec());
                match array {
                    None => Ok(vec![body.pointer(field).and_then(text).ok_or_else(missing)?]),
                    Some(array) => {
                        let items = body.pointer(array).and_then(serde_json::Value::as_array).ok_or_else(missing)?;
                        if items.is_empty() {
                            return Err(missing());
                        }
                        items.iter().map(|item| item.pointer(field).and_then(text).ok_or_else(missing)).collect()
                    }
                }
            }
        }
    }
}

impl Scheme for Token {
    fn name(&self) -> &'static str {
        self.name
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        let presented = self.presented(request)?;
        secrets
            .iter()
            .find(|secret| presented.iter().all(|token| digest_equal(token, secret.key())))
            .map(|secret| SignatureMatch::by(secret).by_token())
            .ok_or(VerifyError::Mismatch)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::BodySha256], vec![])
    }

    fn is_token(&self) -> bool {
        true
    }

    fn is_costly(&self) -> bool {
        matches!(self.location, Location::Body { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        support::BASE64,
        tests::{check, check_at, headers},
    };

    fn token(text: &str) -> Token {
        Token::new(&toml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn a_header_token_with_a_prefix_rotates_and_refuses_near_misses() {
        let scheme = token("header = \"Authorization\"\nprefix = \"Bearer \"\n");
        let run = |value: &str, secrets: &[(&str, &str)]| {
            check(&scheme, &headers(&[("authorization", value)]), b"{}", secrets, 0)
        };
        assert_eq!(run("Bearer s3cret", &[("new", "other"), ("old", "s3cret")]), Ok("old".into()));
        assert_eq!(run("Bearer s3cre", &[("a", "s3cret")]), Err(VerifyError::Mismatch));
        assert_eq!(run("Bearer s3cret ", &[("a", "s3cret")]), Err(VerifyError::Mismatch));
        assert_eq!(run("s3cret", &[("a", "s3cret")]), Err(VerifyError::MalformedSignature("authorization".into())));
        assert_eq!(
            check(&scheme, &headers(&[]), b"{}", &[("a", "s3cret")], 0),
            Err(VerifyError::MissingSignature("authorization".into()))
        );
    }

    #[test]
    fn basic_credentials_compare_user_and_password_together() {
        let scheme = token("basic = true\n");
        let value = format!("Basic {}", BASE64.encode("user:pass"));
        let run = |value: &str| check(&scheme, &headers(&[("Authorization", value)]), b"{}", &[("a", "user:pass")], 0);
        assert_eq!(run(&value), Ok("a".into()));
        assert_eq!(run(&value.replace("Basic", "basic")), Ok("a".into()));
        assert_eq!(run(&format!("Basic {}", BASE64.encode("user:pasS"))), Err(VerifyError::Mismatch));
        assert_eq!(run("Bearer x"), Err(VerifyError::MalformedSignature("authorization".into())));
    }

    #[test]
    fn a_query_token_is_percent_decoded() {
        let scheme = token("query = \"code\"\n");
        let secrets = [("a", "a b+c")];
        let empty = headers(&[]);
        let body = bytes::Bytes::from_static(b"{}");
        let secrets_decoded: Vec<Secret> =
            secrets.iter().map(|(id, text)| Secret::new(*id, text.as_bytes().to_vec())).collect();
        let request = UnverifiedRequest::new(&empty, &body, 0).with_query(Some("x=1&code=a%20b%2Bc"));
        assert!(crate::verify(&scheme, &request, &secrets_decoded).is_ok());
        let request = UnverifiedRequest::new(&empty, &body, 0).with_query(Some("code=a+b+c"));
        assert_eq!(crate::verify(&scheme, &request, &secrets_decoded).err(), Some(VerifyError::Mismatch));
        assert_eq!(
            check_at(&scheme, &http::Method::POST, None, &empty, b"{}", &secrets, 0),
            Err(VerifyError::MissingSignature("query code".into()))
        );
    }

    #[test]
    fn every_element_of_a_batch_must_carry_the_token() {
        let scheme = token("json_pointer = \"/value/*/clientState\"\n");
        let run = |body: &str| check(&scheme, &headers(&[]), body.as_bytes(), &[("a", "cs")], 0);
        assert_eq!(run(r#"{"value":[{"clientState":"cs"},{"clientState":"cs"}]}"#), Ok("a".into()));
        assert_eq!(run(r#"{"value":[{"clientState":"cs"},{"clientState":"no"}]}"#), Err(VerifyError::Mismatch));
        assert_eq!(
            run(r#"{"value":[{"clientState":"cs"},{}]}"#),
            Err(VerifyError::MissingSignature("body /value/*/clientState".into()))
        );
        assert_eq!(run(r#"{"value":[]}"#), Err(VerifyError::MissingSignature("body /value/*/clientState".into())));
    }

    #[test]
    fn options_are_validated() {
        let bad = |text: &str| Token::new(&toml::from_str(text).unwrap()).is_err();
        assert!(bad(""));
        assert!(bad("header = \"a\"\nquery = \"b\"\n"));
        assert!(bad("query = \"b\"\nprefix = \"x\"\n"));
        assert!(bad("basic = true\nquery = \"b\"\n"));
        assert!(bad("json_pointer = \"a\"\n"));
        assert!(bad("json_pointer = \"/a/*/b/*/c\"\n"));
        assert!(!bad("basic = true\n"));
    }
}
