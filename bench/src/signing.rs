//! Requests exactly as the providers send them: a unique event id, a JSON body of the configured size, and a real
//! signature made with the scheme's own `sign` function from `hookline-common` (the same code the scheme's unit
//! tests and the official-SDK cross-checks pin down). A "bad" request carries a signature over other bytes, so the
//! gateway must refuse it with 401 and never produce it.

use bytes::Bytes;
use hookline_signature::{github, standard_webhooks, stripe};
use http::{HeaderName, HeaderValue};

/// The signature schemes the generator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemeKind {
    /// `X-Hub-Signature-256`; event id in `X-GitHub-Delivery`.
    Github,
    /// `Stripe-Signature: t=,v1=`; event id in the body's `/id`.
    Stripe,
    /// `webhook-id`/`-timestamp`/`-signature`; secret `whsec_<base64>`.
    StandardWebhooks,
    /// `X-Twilio-Email-Event-Webhook-Signature` (ECDSA P-256) over timestamp + body; the loadgen's secret file
    /// holds the *private* key as base64 PKCS#8 DER (the gateway's holds the public key). Event id: the body's
    /// SHA-256. For forged floods against a public-key source.
    Sendgrid,
}

impl SchemeKind {
    /// The gateway's config name of the scheme.
    pub fn config_name(self) -> &'static str {
        match self {
            Self::Github => "github",
            Self::Stripe => "stripe",
            Self::StandardWebhooks => "standard_webhooks",
            Self::Sendgrid => "sendgrid",
        }
    }

    /// The source name the bench gateway serves this scheme under (`POST /webhooks/<name>`).
    pub fn source_name(self) -> &'static str {
        match self {
            Self::Github => "bench-github",
            Self::Stripe => "bench-stripe",
            Self::StandardWebhooks => "bench-standard",
            Self::Sendgrid => "bench-sendgrid",
        }
    }
}

/// A request ready to send: everything but the connection.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub event_id: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// Builds signed requests for one scheme and secret.
#[derive(Debug, Clone)]
pub struct Signer {
    scheme: SchemeKind,
    /// The key the scheme signs with (for Standard Webhooks: the decoded `whsec_` secret).
    key: Vec<u8>,
    body_bytes: usize,
    /// SendGrid forgeries sign fixed bytes, so the signature changes only with the timestamp: made once per
    /// second and shared, so that a flood costs the generator (which shares the gateway's cores) no ECDSA per
    /// request. An attacker's signing happens on the attacker's machines.
    forged_sendgrid: std::sync::Arc<std::sync::Mutex<Option<(i64, String)>>>,
}

impl Signer {
    /// `secret` as it would appear in the gateway's secret file.
    pub fn new(scheme: SchemeKind, secret: &str, body_bytes: usize) -> Result<Self, String> {
        let key = match scheme {
            SchemeKind::StandardWebhooks => {
                standard_webhooks::decode_secret(secret.as_bytes()).map_err(|error| error.to_string())?
            }
            SchemeKind::Github | SchemeKind::Stripe => secret.as_bytes().to_vec(),
            SchemeKind::Sendgrid => {
                use base64::Engine;
                use p256::pkcs8::DecodePrivateKey;
                let der = base64::engine::general_purpose::STANDARD
                    .decode(secret.trim())
                    .map_err(|_| "the SendGrid signing key is not base64 PKCS#8 DER".to_owned())?;
                p256::ecdsa::SigningKey::from_pkcs8_der(&der)
                    .map_err(|_| "the SendGrid signing key is not a P-256 PKCS#8 key".to_owned())?;
                der
            }
        };
        Ok(Self { scheme, key, body_bytes, forged_sendgrid: std::sync::Arc::default() })
    }

    pub fn scheme(&self) -> SchemeKind {
        self.scheme
    }

    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// A request for a new event `event_id`, signed now; with `valid_signature = false` the signature is over
    /// different bytes (a forgery, refused with 401).
    pub fn request(&self, event_id: &str, now_s: i64, signature: SignatureKind) -> SignedRequest {
        let body = Bytes::from(json_body(event_id, self.body_bytes));
        let signed_body: &[u8] = match signature {
            SignatureKind::Valid => &body,
            SignatureKind::Forged => b"not the body that was sent",
        };
        let mut headers = vec![(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        let value = |text: String| HeaderValue::try_from(text).expect("signature header values are ASCII");
        match self.scheme {
            SchemeKind::Github => {
                headers.push((HeaderName::from_static("x-github-delivery"), value(event_id.to_owned())));
                headers.push((HeaderName::from_static("x-github-event"), HeaderValue::from_static("push")));
                headers.push((
                    HeaderName::from_static("x-hub-signature-256"),
                    value(github::sign(&self.key, signed_body)),
                ));
            }
            SchemeKind::Stripe => {
                headers.push((
                    HeaderName::from_static("stripe-signature"),
                    value(stripe::sign(&self.key, signed_body, now_s)),
                ));
            }
            SchemeKind::StandardWebhooks => {
                headers.push((HeaderName::from_static("webhook-id"), value(event_id.to_owned())));
                headers.push((HeaderName::from_static("webhook-timestamp"), value(now_s.to_string())));
                headers.push((
                    HeaderName::from_static("webhook-signature"),
                    value(standard_webhooks::sign(&self.key, event_id, now_s, signed_body)),
                ));
            }
            SchemeKind::Sendgrid => {
                let timestamp = now_s.to_string();
                let encoded = match signature {
                    SignatureKind::Valid => self.sendgrid_signature(&timestamp, signed_body),
                    SignatureKind::Forged => {
                        let mut cached = self.forged_sendgrid.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                        match cached.as_ref() {
                            Some((at_s, encoded)) if *at_s == now_s => encoded.clone(),
                            _ => {
                                let encoded = self.sendgrid_signature(&timestamp, signed_body);
                                *cached = Some((now_s, encoded.clone()));
                                encoded
                            }
                        }
                    }
                };
                headers.push((HeaderName::from_static("x-twilio-email-event-webhook-timestamp"), value(timestamp)));
                headers.push((HeaderName::from_static("x-twilio-email-event-webhook-signature"), value(encoded)));
            }
        }
        // The id the gateway records the event under (the record key the topic check counts): GitHub's delivery id
        // is not signed and SendGrid sends none, so for them it is the body's SHA-256.
        let event_id = match self.scheme {
            SchemeKind::Github | SchemeKind::Sendgrid => body_sha256(&body),
            SchemeKind::Stripe | SchemeKind::StandardWebhooks => event_id.to_owned(),
        };
        SignedRequest { event_id, headers, body }
    }
}

impl Signer {
    /// SendGrid's ECDSA P-256 signature over timestamp + bytes, base64 DER.
    fn sendgrid_signature(&self, timestamp: &str, signed: &[u8]) -> String {
        use base64::Engine;
        use p256::{ecdsa::signature::Signer as _, pkcs8::DecodePrivateKey};
        #[allow(clippy::expect_used)] // Checked by `Signer::new`.
        let key = p256::ecdsa::SigningKey::from_pkcs8_der(&self.key).expect("checked in new");
        let signature: p256::ecdsa::Signature = key.sign(&[timestamp.as_bytes(), signed].concat());
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

/// `sha256:<hex>` of a body, as the gateway computes it.
fn body_sha256(body: &[u8]) -> String {
    use hookline_signature::{FieldSource, IdentityRule};
    IdentityRule::new(vec![FieldSource::BodySha256], vec![])
        .identify(&http::HeaderMap::new(), body)
        .event_id
        .unwrap_or_default()
}

/// Whether a request's signature is genuine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureKind {
    Valid,
    Forged,
}

/// A JSON event of exactly `size` bytes (or the smallest possible, if `size` is smaller): `id` and `type` where
/// Stripe's identity rule looks, padded with a filler string.
pub fn json_body(event_id: &str, size: usize) -> Vec<u8> {
    let head = format!(r#"{{"id":"{event_id}","type":"bench.event","data":{{"pad":""#);
    let tail = r#""}}"#;
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + pad + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.resize(head.len() + pad, b'x');
    body.extend_from_slice(tail.as_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PKCS#8 P-256 key (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -outform DER | base64`)
    /// and the gateway's SendGrid scheme agree on what the bench sends.
    #[test]
    fn sendgrid_requests_verify_and_forgeries_do_not() {
        // Made with `openssl genpkey ... | openssl pkcs8 -topk8 -nocrypt -outform DER | base64` and
        // `openssl pkey -pubout -outform DER | base64`.
        let private = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgmz9uo59iGvMCdhjSEbJzQqNAFzh1Dxfk/9equBGYMg2hRANCAAQoSfOBJ01hSGIAXcdc2w5oxTPs2OPHOGEVekCtHU/SbqCO7QU/3MQOV45D4MpXgSS18HNcBiGKHkLV5fbkWENF";
        let public = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKEnzgSdNYUhiAF3HXNsOaMUz7NjjxzhhFXpArR1P0m6gju0FP9zEDleOQ+DKV4EktfBzXAYhih5C1eX25FhDRQ==";
        let signer = Signer::new(SchemeKind::Sendgrid, private, 256).unwrap();
        let scheme = hookline_signature::scheme_by_name("sendgrid").unwrap();
        let secret = hookline_signature::Secret::new("k", scheme.decode_secret(public.as_bytes()).unwrap());
        let now_s = 1_700_000_000;
        for (kind, expected) in [(SignatureKind::Valid, true), (SignatureKind::Forged, false)] {
            let request = signer.request("evt", now_s, kind);
            let headers: http::HeaderMap = request.headers.into_iter().collect();
            let unverified = hookline_signature::UnverifiedRequest::new(&headers, &request.body, now_s * 1000);
            let verified = hookline_signature::verify(scheme.as_ref(), &unverified, std::slice::from_ref(&secret));
            assert_eq!(verified.is_ok(), expected, "{kind:?}: {verified:?}");
        }
    }

    #[test]
    fn bodies_are_json_of_the_requested_size() {
        let body = json_body("evt_1", 1024);
        assert_eq!(body.len(), 1024);
        let value: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(value["id"], "evt_1");
    }
}
