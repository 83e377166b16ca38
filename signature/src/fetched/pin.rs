//! Where a fetched key may come from: https on a pinned host, under a pinned path. A URL is parsed strictly
//! (no user info, no port, no fragment, no `..`, ASCII only) before anything is fetched, so a request can only
//! choose among the provider's own certificates, never another host and never a path outside the pinned one.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretSlice};

use super::super::VerifyError;

/// One host a provider's keys are served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPin {
    /// This host exactly (`api.paypal.com`).
    Exact(&'static str),
    /// `sns.<region>.amazonaws.com` or `sns.<region>.amazonaws.com.cn`, region letters, digits and `-` (at least 3),
    /// the pattern AWS's own message validators accept, less a region starting with `s3`: `sns.s3-accelerate.
    /// amazonaws.com` and `sns.s3-<region>.amazonaws.com` are S3 endpoints of a bucket named `sns`, whose owner
    /// could serve any file there.
    SnsRegional,
}

impl HostPin {
    fn matches(self, host: &str) -> bool {
        match self {
            Self::Exact(pinned) => host == pinned,
            Self::SnsRegional => {
                let Some(rest) = host.strip_prefix("sns.") else { return false };
                let region = rest
                    .strip_suffix(".amazonaws.com")
                    .or_else(|| rest.strip_suffix(".amazonaws.com.cn"))
                    .unwrap_or("");
                region.len() >= 3
                    && !region.to_ascii_lowercase().starts_with("s3")
                    && region.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            }
        }
    }
}

/// The hosts and the path a URL must have.
#[derive(Debug, Clone, Copy)]
pub struct Pins {
    pub hosts: &'static [HostPin],
    /// The path (with its query) starts with this.
    pub path_prefix: &'static str,
    /// The path ends with this (`.pem`), or "".
    pub path_suffix: &'static str,
}

/// An https URL that passed its [`Pins`]: the only kind the gateway fetches; with a [`KeyPost`], the key is asked
/// for by a `POST` of that body instead of a `GET`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyUrl {
    host: String,
    path: String,
    post: Option<KeyPost>,
}

/// The JSON body a key is asked for with (Plaid: the API credentials and the key id). It holds a credential, so it
/// is never printed; the `label` (the key id and the credential's id, nothing secret) tells keys at one URL apart,
/// and is what the cache compares.
#[derive(Clone)]
pub struct KeyPost {
    label: String,
    body: Arc<SecretSlice<u8>>,
}

impl PartialEq for KeyPost {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label
    }
}

impl Eq for KeyPost {}

impl std::hash::Hash for KeyPost {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.label.hash(state);
    }
}

impl std::fmt::Debug for KeyPost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPost").field("label", &self.label).finish_non_exhaustive()
    }
}

/// At most this long; a certificate URL is a few dozen bytes, a confirmation URL a few hundred.
const MAX_URL_BYTES: usize = 2048;

impl KeyUrl {
    /// `url` if it is https on one of `pins`' hosts under its path; otherwise why not, as the header or field
    /// `what` that carried it.
    pub fn pinned(url: &str, pins: &Pins, what: &'static str) -> Result<Self, VerifyError> {
        let refused = || VerifyError::KeyUrlNotPinned(what);
        if url.len() > MAX_URL_BYTES || !url.bytes().all(|byte| byte.is_ascii_graphic()) || url.contains('#') {
            return Err(refused());
        }
        let rest = url.strip_prefix("https://").ok_or_else(refused)?;
        let (host, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let host = host.to_ascii_lowercase();
        let host_ok = !host.is_empty()
            && host.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-')
            && pins.hosts.iter().any(|pin| pin.matches(&host));
        let path_only = path.split('?').next().unwrap_or("");
        let path_ok = path.starts_with(pins.path_prefix)
            && path_only.ends_with(pins.path_suffix)
            && !path_only.contains("..")
            && !path_only.contains("//")
            && !path_only.contains('%');
        if host_ok && path_ok { Ok(Self { host, path: path.to_owned(), post: None }) } else { Err(refused()) }
    }

    /// The key is asked for by a `POST` of `body` (JSON); `label` names it among the keys of this URL (never a
    /// secret: it is logged and compared).
    pub fn posting(self, label: String, body: Vec<u8>) -> Self {
        Self { post: Some(KeyPost { label, body: Arc::new(SecretSlice::from(body)) }), ..self }
    }

    /// The body to `POST`, if the key is asked for that way.
    pub fn post_body(&self) -> Option<&[u8]> {
        self.post.as_ref().map(|post| post.body.expose_secret())
    }

    /// The host, lowercase: the TLS name and the `Host` header.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The path and query, as the request line's target.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl std::fmt::Display for KeyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "https://{}{}", self.host, self.path)?;
        match &self.post {
            Some(post) => write!(f, " (POST, key {})", post.label),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNS: Pins =
        Pins { hosts: &[HostPin::SnsRegional], path_prefix: "/SimpleNotificationService-", path_suffix: ".pem" };

    #[test]
    fn a_posted_key_is_told_apart_by_its_label_and_never_prints_its_body() {
        let pins = Pins { hosts: &[HostPin::Exact("production.plaid.com")], path_prefix: "/w", path_suffix: "" };
        let url = KeyUrl::pinned("https://production.plaid.com/w", &pins, "u").expect("pinned");
        let one = url.clone().posting("k1 by a".to_owned(), b"{\"secret\":\"s3cret\"}".to_vec());
        let other = url.clone().posting("k2 by a".to_owned(), b"{\"secret\":\"s3cret\"}".to_vec());
        assert_ne!(one, other);
        assert_ne!(one, url);
        assert_eq!(one.post_body(), Some(&b"{\"secret\":\"s3cret\"}"[..]));
        for shown in [format!("{one:?}"), one.to_string()] {
            assert!(!shown.contains("s3cret") && shown.contains("k1 by a"), "{shown}");
        }
    }

    #[test]
    fn only_https_on_a_pinned_host_under_the_pinned_path_passes() {
        let good = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem";
        let url = KeyUrl::pinned(good, &SNS, "SigningCertURL").expect("pinned");
        assert_eq!((url.host(), url.to_string().as_str()), ("sns.us-east-1.amazonaws.com", good));
        assert!(
            KeyUrl::pinned("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-a.pem", &SNS, "u")
                .is_ok()
        );
        for refused in [
            "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-a.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-a.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com/SimpleNotificationService-a.pem",
            "https://sns.us-east-1.amazonaws.com@evil.example/SimpleNotificationService-a.pem",
            "https://sns.us-east-1.amazonaws.com:8443/SimpleNotificationService-a.pem",
            "https://sns.amazonaws.com/SimpleNotificationService-a.pem",
            "https://sns.a.b.amazonaws.com/SimpleNotificationService-a.pem",
            "https://sns.us-east-1.amazonaws.com/other.pem",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-a.pem#x",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-a/../../x.pem",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-a.txt",
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-%2e%2e.pem",
            // S3 endpoints of a bucket named `sns`, not SNS.
            "https://sns.s3-accelerate.amazonaws.com/SimpleNotificationService-x.pem",
            "https://sns.s3-us-west-2.amazonaws.com/SimpleNotificationService-x.pem",
            "https://sns.S3-external-1.amazonaws.com/SimpleNotificationService-x.pem",
            "https://sns.s3-website-us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        ] {
            assert_eq!(KeyUrl::pinned(refused, &SNS, "u"), Err(VerifyError::KeyUrlNotPinned("u")), "{refused}");
        }
    }
}
