//! PayPal (REST webhooks): `PAYPAL-TRANSMISSION-SIG` (base64) is SHA256withRSA over
//! `<PAYPAL-TRANSMISSION-ID>|<PAYPAL-TRANSMISSION-TIME>|<webhook id>|<CRC32 of the body, decimal>`, made with the
//! key of the certificate at `PAYPAL-CERT-URL`, which must be https on `api.paypal.com`, `api-m.paypal.com` or
//! their sandbox twins, under `/v1/notifications/certs/`. This is PayPal's documented offline verification
//! ("Verify webhook signature", and its SDKs' `WebhookEvent.verify`).
//!
//! The source's secrets are its webhook ids (the signed string names the webhook, so a message for another
//! PayPal webhook does not verify here). The body is bound only by its CRC32, which is not a cryptographic digest
//! (docs/security.md, "Fetched keys"): the timestamp window is therefore kept short (300 s by default).
//! Event id and type from the body (`/id`, `/event_type`).

use base64::Engine;

use super::{
    super::{
        FieldSource, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
        support::{BASE64, Tolerance, header, parse_rfc3339_ms, required_header},
    },
    CheckedKey, FetchedKeyScheme, KeyUrl,
    pin::{HostPin, Pins},
    x509::RsaDigest,
};

pub const DEFAULT_TOLERANCE_S: u64 = 300;

const TRANSMISSION_ID: &str = "paypal-transmission-id";
const TRANSMISSION_TIME: &str = "paypal-transmission-time";
const TRANSMISSION_SIG: &str = "paypal-transmission-sig";
const CERT_URL: &str = "paypal-cert-url";
const AUTH_ALGO: &str = "paypal-auth-algo";

const CERTIFICATE_PINS: Pins = Pins {
    hosts: &[
        HostPin::Exact("api.paypal.com"),
        HostPin::Exact("api-m.paypal.com"),
        HostPin::Exact("api.sandbox.paypal.com"),
        HostPin::Exact("api-m.sandbox.paypal.com"),
    ],
    path_prefix: "/v1/notifications/certs/",
    path_suffix: "",
};

#[derive(Debug)]
pub struct PayPal {
    tolerance: Tolerance,
}

impl PayPal {
    pub fn new(tolerance: Tolerance) -> Self {
        Self { tolerance }
    }
}

impl Default for PayPal {
    fn default() -> Self {
        Self::new(Tolerance::seconds(DEFAULT_TOLERANCE_S))
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`), bit by bit: bodies are small and this runs once per
/// verified request.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

impl Scheme for PayPal {
    fn name(&self) -> &'static str {
        "paypal"
    }

    fn is_costly(&self) -> bool {
        true
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        super::verify_offline(self, request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        IdentityRule::new(vec![FieldSource::pointer("/id")], vec![FieldSource::pointer("/event_type")])
    }

    fn signable_headers(&self) -> Vec<std::borrow::Cow<'static, str>> {
        vec![TRANSMISSION_ID.into(), TRANSMISSION_TIME.into()]
    }

    fn fetched_key(&self) -> Option<&dyn FetchedKeyScheme> {
        Some(self)
    }
}

impl FetchedKeyScheme for PayPal {
    fn locate(&self, request: &UnverifiedRequest<'_>, _secrets: &[&Secret]) -> Result<KeyUrl, VerifyError> {
        required_header(request.headers, TRANSMISSION_SIG, TRANSMISSION_SIG)?;
        required_header(request.headers, TRANSMISSION_ID, TRANSMISSION_ID)?;
        if header(request.headers, AUTH_ALGO).is_some_and(|algorithm| algorithm != "SHA256withRSA") {
            return Err(VerifyError::malformed(AUTH_ALGO));
        }
        let time = required_header(request.headers, TRANSMISSION_TIME, TRANSMISSION_TIME)?;
        let time_ms = parse_rfc3339_ms(time).ok_or(VerifyError::malformed(TRANSMISSION_TIME))?;
        self.tolerance.check(time_ms, request.now_ms)?;
        KeyUrl::pinned(required_header(request.headers, CERT_URL, CERT_URL)?, &CERTIFICATE_PINS, CERT_URL)
    }

    fn verify_with(
        &self,
        request: &UnverifiedRequest<'_>,
        secrets: &[&Secret],
        key: &CheckedKey<'_>,
    ) -> Result<SignatureMatch, VerifyError> {
        let signature = BASE64
            .decode(required_header(request.headers, TRANSMISSION_SIG, TRANSMISSION_SIG)?)
            .map_err(|_| VerifyError::malformed(TRANSMISSION_SIG))?;
        let id = required_header(request.headers, TRANSMISSION_ID, TRANSMISSION_ID)?;
        let time = required_header(request.headers, TRANSMISSION_TIME, TRANSMISSION_TIME)?;
        let certificate = key.leaf()?;
        let crc = crc32(request.body);
        secrets
            .iter()
            .find(|secret| {
                let webhook_id = String::from_utf8_lossy(secret.key());
                let signed = format!("{id}|{time}|{webhook_id}|{crc}");
                certificate.verifies_rsa(RsaDigest::Sha256, signed.as_bytes(), &signature)
            })
            .map(|secret| SignatureMatch::by(secret).covering([TRANSMISSION_ID.into(), TRANSMISSION_TIME.into()]))
            .ok_or(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
    }
}
