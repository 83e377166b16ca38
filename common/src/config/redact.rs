//! Serializers that print a config value without the credential it may carry inline.

use serde::Serializer;

/// What a redacted value becomes.
pub const REDACTED: &str = "<redacted>";

/// librdkafka properties whose values are credentials (`sasl.password`, `ssl.key.password`,
/// `sasl.jaas.config`, `sasl.oauthbearer.client.secret`, an inline `ssl.key.pem`, ...). Paths such as
/// `ssl.key.location` are not.
pub fn is_credential_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", "ssl.key.pem", "credentials"].iter().any(|part| key.contains(part))
}

pub fn kafka_properties<S: Serializer>(
    properties: &std::collections::BTreeMap<String, String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(
        properties
            .iter()
            .map(|(key, value)| (key, if is_credential_property(key) { REDACTED } else { value.as_str() })),
    )
}

/// `scheme://user:password@host/...` without the password (`scheme://user:<redacted>@host/...`); a URL with
/// no password is unchanged.
pub fn url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:{REDACTED}@{host}{tail}"),
        // `redis://secret@host`: a lone userinfo is a password to Redis.
        None if scheme.starts_with("redis") => format!("{scheme}://{REDACTED}@{host}{tail}"),
        None => url.to_owned(),
    }
}

/// A comma-separated list of URLs (Redis cluster seeds), each without its password.
pub fn url_list_passwords<S: Serializer>(urls: &str, serializer: S) -> Result<S::Ok, S::Error> {
    let redacted: Vec<String> = urls.split(',').map(url_password).collect();
    serializer.serialize_str(&redacted.join(","))
}

pub fn optional_url_password<S: Serializer>(url: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => serializer.serialize_str(&url_password(url)),
        None => serializer.serialize_none(),
    }
}

/// A URL whose path is itself the credential (a Slack incoming webhook, `https://hooks.slack.com/services/
/// T0/B0/XXXX`): only the scheme and host are printed.
pub fn optional_url_path<S: Serializer>(url: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => {
            let printed = match url.split_once("://") {
                Some((scheme, rest)) => {
                    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
                    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
                    format!("{scheme}://{host}/{REDACTED}")
                }
                None => REDACTED.to_owned(),
            };
            serializer.serialize_str(&printed)
        }
        None => serializer.serialize_none(),
    }
}
