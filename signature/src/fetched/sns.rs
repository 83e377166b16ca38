//! AWS SNS over HTTPS (and what rides on it: SES, CloudWatch alarms, S3 events): the JSON body carries
//! `Signature` (base64), `SignatureVersion` (`1`: SHA1withRSA, `2`: SHA256withRSA) and `SigningCertURL`, which
//! must be https on `sns.<region>.amazonaws.com` (or `.amazonaws.com.cn`) under `/SimpleNotificationService-*.pem`.
//!
//! The signed string is `name\nvalue\n` for each of the message type's fields in this order, as AWS documents it
//! ("Verifying the signatures of Amazon SNS messages"): a `Notification` signs `Message`, `MessageId`, `Subject`
//! (only when present), `Timestamp`, `TopicArn`, `Type`; a `SubscriptionConfirmation` or
//! `UnsubscribeConfirmation` signs `Message`, `MessageId`, `SubscribeURL`, `Timestamp`, `Token`, `TopicArn`,
//! `Type`. Other body fields (`MessageAttributes`, `UnsubscribeURL`) are not signed, so the proof covers these
//! fields only: the event id is the signed `MessageId`, its type the signed `Type`.
//!
//! The certificate must chain to a trusted root and be issued to SNS's own name ([`signing_names`]).
//!
//! The source's secrets are the topic ARNs it accepts (anyone can have SNS sign a message from a topic of their
//! own). `Timestamp` is the publish time and SNS keeps it on retries, so the default window is an hour.

use super::{
    super::{
        FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
        support::{BASE64, Tolerance, parse_rfc3339_ms},
    },
    CheckedKey, Confirmation, FetchedKeyScheme, KeyUrl,
    pin::{HostPin, Pins},
    x509::RsaDigest,
};
use crate::SecretError;
use base64::Engine;

/// SNS keeps a message's `Timestamp` across its delivery retries (up to an hour with a custom delivery policy).
pub const DEFAULT_TOLERANCE_S: u64 = 3600;

const CERTIFICATE_PINS: Pins =
    Pins { hosts: &[HostPin::SnsRegional], path_prefix: "/SimpleNotificationService-", path_suffix: ".pem" };
const SUBSCRIBE_PINS: Pins =
    Pins { hosts: &[HostPin::SnsRegional], path_prefix: "/?Action=ConfirmSubscription&", path_suffix: "" };

const NOTIFICATION_FIELDS: &[&str] = &["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"];
const SUBSCRIPTION_FIELDS: &[&str] =
    &["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"];

/// The names SNS's signing certificate for the key host `host` (`sns.<region>.amazonaws.com[.cn]`) is issued to,
/// as AWS's own message validator (the Java SDK's SNS message manager) expects them: `sns.amazonaws.com` in the
/// commercial regions, `sns-signing.<region>.amazonaws.com` in the opt-in ones, `sns-us-gov-west-1.amazonaws.com`
/// in GovCloud, `sns-<region>.amazonaws.com.cn` (or `sns.amazonaws.com.cn`) in China. All are AWS's own names: a
/// certificate a public CA issued to anyone else is refused, whatever host served it.
pub fn signing_names(host: &str) -> Vec<String> {
    let region = host.strip_prefix("sns.").unwrap_or_default();
    match region.strip_suffix(".amazonaws.com.cn") {
        Some(region) => vec!["sns.amazonaws.com.cn".to_owned(), format!("sns-{region}.amazonaws.com.cn")],
        None => {
            let region = region.strip_suffix(".amazonaws.com").unwrap_or_default();
            vec![
                "sns.amazonaws.com".to_owned(),
                format!("sns-signing.{region}.amazonaws.com"),
                "sns-us-gov-west-1.amazonaws.com".to_owned(),
            ]
        }
    }
}

#[derive(Debug)]
pub struct Sns {
    tolerance: Tolerance,
}

impl Sns {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { tolerance }
    }
}

impl Default for Sns {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

/// The fields of an SNS message body, each a JSON string.
struct Message(serde_json::Map<String, serde_json::Value>);

impl Message {
    fn parse(body: &[u8]) -> Result<Self, VerifyError> {
        match serde_json::from_slice(body) {
            Ok(serde_json::Value::Object(fields)) => Ok(Self(fields)),
            _ => Err(VerifyError::malformed("SNS message body")),
        }
    }

    fn field(&self, name: &'static str) -> Option<&str> {
        self.0.get(name).and_then(serde_json::Value::as_str)
    }

    fn required(&self, name: &'static str) -> Result<&str, VerifyError> {
        self.field(name).ok_or(VerifyError::missing(name))
    }

    /// The signed string for this message's `Type`.
    fn signed_string(&self) -> Result<String, VerifyError> {
        let fields = match self.required("Type")? {
            "Notification" => NOTIFICATION_FIELDS,
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => SUBSCRIPTION_FIELDS,
            _ => return Err(VerifyError::malformed("Type")),
        };
        let mut signed = String::new();
        for &name in fields {
            let value = match self.field(name) {
                Some(value) => value,
                None if name == "Subject" => continue,
                None => return Err(VerifyError::missing(name)),
            };
            signed.push_str(name);
            signed.push('\n');
            signed.push_str(value);
            signed.push('\n');
        }
        Ok(signed)
    }
}

impl Scheme for Sns {
    fn signs_timestamp(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "sns"
    }

    fn is_costly(&self) -> bool {
        true
    }

    /// A topic ARN (`arn:aws:sns:<region>:<account>:<topic>`).
    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        let text = super::secret_text(raw, "the topic ARN")?;
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 6 || parts[0] != "arn" || !parts[1].starts_with("aws") || parts[2] != "sns" {
            return Err("an sns source's secrets are topic ARNs (arn:aws:sns:<region>:<account>:<topic>)".into());
        }
        Ok(text.as_bytes().to_vec())
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        super::verify_offline(self, request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/MessageId")], vec![FieldSource::pointer("/Type")])
    }

    fn covers_whole_body(&self) -> bool {
        false
    }

    fn fetched_key(&self) -> Option<&dyn FetchedKeyScheme> {
        Some(self)
    }
}

impl FetchedKeyScheme for Sns {
    /// Nothing is fetched for a message that could not be accepted whatever its signature: a stale one, one from a
    /// topic this source does not accept (`TopicArn` is signed, so refusing it before the signature is checked
    /// changes no answer), or one whose certificate is not on the SNS host of the topic's own region.
    fn locate(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<KeyUrl, VerifyError> {
        let message = Message::parse(request.body)?;
        message.required("Signature")?;
        match message.required("SignatureVersion")? {
            "1" | "2" => {}
            _ => return Err(VerifyError::malformed("SignatureVersion")),
        }
        let timestamp = message.required("Timestamp")?;
        let timestamp_ms = parse_rfc3339_ms(timestamp).ok_or(VerifyError::malformed("Timestamp"))?;
        self.tolerance.check(timestamp_ms, request.now_ms)?;
        let topic = message.required("TopicArn")?;
        if !secrets.iter().any(|secret| secret.key() == topic.as_bytes()) {
            return Err(VerifyError::Mismatch);
        }
        let url = KeyUrl::pinned(message.required("SigningCertURL")?, &CERTIFICATE_PINS, "SigningCertURL")?;
        let region = topic.split(':').nth(3);
        let host_region = url
            .host()
            .strip_prefix("sns.")
            .and_then(|rest| rest.strip_suffix(".amazonaws.com").or_else(|| rest.strip_suffix(".amazonaws.com.cn")));
        if region.is_none() || host_region != region {
            return Err(VerifyError::KeyUrlNotPinned("SigningCertURL"));
        }
        Ok(url)
    }

    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        key: &CheckedKey<'_>,
    ) -> Result<SignatureMatch, VerifyError> {
        let message = Message::parse(request.body)?;
        let digest = match message.required("SignatureVersion")? {
            "1" => RsaDigest::Sha1,
            "2" => RsaDigest::Sha256,
            _ => return Err(VerifyError::malformed("SignatureVersion")),
        };
        let signature =
            BASE64.decode(message.required("Signature")?).map_err(|_| VerifyError::malformed("Signature"))?;
        let signed = message.signed_string()?;
        let url = KeyUrl::pinned(message.required("SigningCertURL")?, &CERTIFICATE_PINS, "SigningCertURL")?;
        let leaf = key.leaf()?;
        if !leaf.is_issued_to_any(&signing_names(url.host())) {
            return Err(VerifyError::CertificateUntrusted);
        }
        if !leaf.verifies_rsa(digest, signed.as_bytes(), &signature) {
            return Err(VerifyError::Mismatch);
        }
        // Genuinely from SNS; now whether it is from a topic this source accepts.
        let topic = message.required("TopicArn")?;
        let secret = secrets.iter().find(|secret| secret.key() == topic.as_bytes()).ok_or(VerifyError::Mismatch)?;
        let event_id = message.required("MessageId")?.to_owned();
        let event_type = message.required("Type")?.to_owned();
        Ok(SignatureMatch::by(secret).of_fields(event_id, Some(event_type)))
    }

    fn confirmation(&self, request: &UnverifiedRequest<'_>) -> Result<Option<Confirmation>, VerifyError> {
        let message = Message::parse(request.body)?;
        Ok(match message.required("Type")? {
            "SubscriptionConfirmation" => Some(Confirmation::Visit {
                kind: "sns_subscription_confirmation",
                url: KeyUrl::pinned(message.required("SubscribeURL")?, &SUBSCRIBE_PINS, "SubscribeURL")?,
            }),
            "UnsubscribeConfirmation" => Some(Confirmation::Acknowledge { kind: "sns_unsubscribe_confirmation" }),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signed_string_follows_each_types_field_order() {
        let notification = Message::parse(
            br#"{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":"hi","Timestamp":"2026-01-01T00:00:00.000Z","MessageAttributes":{"a":{"Type":"String","Value":"x"}}}"#,
        )
        .expect("json");
        assert_eq!(
            notification.signed_string(),
            Ok("Message\nhi\nMessageId\nm\nTimestamp\n2026-01-01T00:00:00.000Z\nTopicArn\narn:aws:sns:us-east-1:1:t\nType\nNotification\n".to_owned()),
            "no Subject, no attributes"
        );
        let confirmation = Message::parse(
            br#"{"Type":"SubscriptionConfirmation","MessageId":"m","Token":"tok","TopicArn":"t","Message":"m2","SubscribeURL":"https://x","Timestamp":"ts"}"#,
        )
        .expect("json");
        assert_eq!(
            confirmation.signed_string(),
            Ok("Message\nm2\nMessageId\nm\nSubscribeURL\nhttps://x\nTimestamp\nts\nToken\ntok\nTopicArn\nt\nType\nSubscriptionConfirmation\n".to_owned())
        );
        let unknown = Message::parse(br#"{"Type":"Other"}"#).expect("json");
        assert_eq!(unknown.signed_string(), Err(VerifyError::malformed("Type")));
    }

    /// P6: a message from a topic the source does not accept, or whose certificate is on another region's host,
    /// is refused before anything is fetched.
    #[test]
    fn nothing_is_located_for_another_topic_or_another_regions_certificate() {
        let now_ms = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let topic = Secret::new("orders", b"arn:aws:sns:eu-west-1:123456789012:orders".to_vec());
        let headers = http::HeaderMap::new();
        let locate = |arn: &str, certificate: &str| {
            let body = serde_json::json!({
                "Type": "Notification", "MessageId": "m", "TopicArn": arn, "Message": "hi",
                "Timestamp": "2026-01-01T00:00:00.000Z", "SignatureVersion": "2", "Signature": "c2ln",
                "SigningCertURL": certificate,
            });
            let body = bytes::Bytes::from(body.to_string());
            Sns::default()
                .locate(&UnverifiedRequest::new(&headers, &body, now_ms), &[&topic])
                .map(|url| url.to_string())
        };
        let ours = "arn:aws:sns:eu-west-1:123456789012:orders";
        let certificate = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-abc.pem";
        assert!(locate(ours, certificate).is_ok());
        assert_eq!(locate("arn:aws:sns:eu-west-1:123456789012:other", certificate), Err(VerifyError::Mismatch));
        let elsewhere = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem";
        assert_eq!(locate(ours, elsewhere), Err(VerifyError::KeyUrlNotPinned("SigningCertURL")));
        let made_up = "https://sns.xyz-made-up-9.amazonaws.com/SimpleNotificationService-abc.pem";
        assert_eq!(locate(ours, made_up), Err(VerifyError::KeyUrlNotPinned("SigningCertURL")));
    }

    #[test]
    fn the_certificate_names_are_awss_own_for_the_urls_region() {
        let names = |host: &str| signing_names(host);
        assert!(names("sns.us-east-1.amazonaws.com").contains(&"sns.amazonaws.com".to_owned()));
        assert!(names("sns.me-south-1.amazonaws.com").contains(&"sns-signing.me-south-1.amazonaws.com".to_owned()));
        assert!(names("sns.us-gov-east-1.amazonaws.com").contains(&"sns-us-gov-west-1.amazonaws.com".to_owned()));
        assert_eq!(
            names("sns.cn-north-1.amazonaws.com.cn"),
            ["sns.amazonaws.com.cn", "sns-cn-north-1.amazonaws.com.cn"]
        );
        for host in ["sns.us-east-1.amazonaws.com", "sns.cn-north-1.amazonaws.com.cn"] {
            assert!(
                names(host).iter().all(|name| name.starts_with("sns") && name.contains(".amazonaws.com")),
                "{host}"
            );
        }
    }

    #[test]
    fn topic_arns_are_the_secrets() {
        assert!(Sns::default().decode_secret(b"arn:aws:sns:us-east-1:123456789012:orders").is_ok());
        assert!(Sns::default().decode_secret(b"arn:aws-cn:sns:cn-north-1:123456789012:orders").is_ok());
        assert!(Sns::default().decode_secret(b"not-an-arn").is_err());
        assert!(Sns::default().decode_secret(b"arn:aws:sqs:us-east-1:123456789012:q").is_err());
    }
}
