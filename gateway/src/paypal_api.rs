//! PayPal's event API, asked for every PayPal delivery before it becomes an event (docs/security.md, "PayPal").
//!
//! PayPal signs a delivery's body only by its CRC32, so one captured delivery lets anyone make another body, with
//! another `/id` and amount, that verifies as well. By default a `paypal` source therefore holds the operator's REST
//! credentials (`[sources.paypal] api_credentials`, `client_id:secret`): once the signature verified, the gateway
//! asks PayPal for the event the body names (`GET /v1/notifications/webhooks-events/{id}` with an OAuth token of
//! those credentials, cached until shortly before it expires) and produces the body only when every member of it
//! is what PayPal holds ([`hookline_signature::fetched::paypal::confirmed`]). A body PayPal does not know
//! is refused 401 `not_confirmed`; PayPal's API that cannot be reached is a 503 with `Retry-After` (PayPal
//! retries), never a 401. Without credentials a source must opt in to the checksum alone (`allow_crc_only`).

use std::time::{Duration, Instant};

use base64::Engine;
use hookline_common::config::SecretRef;
use hookline_signature::{Verified, VerifyError, fetched::paypal};
use http::{HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};

use crate::{
    error::Rejection,
    key_fetch::{FetchError, KeyFetcher},
};

/// `[sources.paypal]`: how a `paypal` source makes sure a delivery's body is PayPal's.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PayPalOptions {
    /// The REST app's credentials, `client_id:secret` (a secret reference, like `secrets`), with which each
    /// delivery's event is confirmed against PayPal's API. Required unless `allow_crc_only`.
    pub api_credentials: Option<SecretRef>,
    /// The credentials are the sandbox's (`api-m.sandbox.paypal.com`), not live (`api-m.paypal.com`).
    pub sandbox: bool,
    /// Accept a delivery on its signature alone, which binds the body only by a CRC32: anyone holding one delivery
    /// less than `tolerance_s` old can then make any number of new events, with any id and amount. Off by default.
    pub allow_crc_only: bool,
}

/// A source's way to PayPal's event API: its credentials and the token they bought.
pub struct PayPalApi {
    sandbox: bool,
    /// `Basic <base64(client_id:secret)>`, marked sensitive.
    basic: HeaderValue,
    /// `Bearer <token>` and until when it is used; one token fetch at a time.
    token: tokio::sync::Mutex<Option<(HeaderValue, Instant)>>,
}

/// Never prints the credentials or the token.
impl std::fmt::Debug for PayPalApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayPalApi").field("sandbox", &self.sandbox).finish_non_exhaustive()
    }
}

/// What PayPal's token endpoint answers (the fields read).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
}

/// A token is used until this long before PayPal says it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

impl PayPalApi {
    /// The API of a `paypal` source's `options` (`None` for another scheme, or a `paypal` source that opted in to
    /// the checksum alone); every problem is pushed to `problems`.
    pub fn from_config(scheme: &str, options: Option<&PayPalOptions>, problems: &mut Vec<String>) -> Option<Self> {
        if scheme != "paypal" {
            return None;
        }
        let options = options.cloned().unwrap_or_default();
        match (&options.api_credentials, options.allow_crc_only) {
            (None, false) => {
                problems.push(
                    "scheme `paypal` signs the body only by its CRC32, which anyone holding one delivery can match \
                     with a body of their own (another id, another amount): set [sources.paypal] api_credentials \
                     (the REST app's `client_id:secret`) so each event is confirmed against PayPal's API, or \
                     allow_crc_only = true to accept that (docs/security.md, 'PayPal')"
                        .to_owned(),
                );
                None
            }
            (Some(_), true) => {
                problems.push(
                    "[sources.paypal]: api_credentials and allow_crc_only exclude each other (with credentials every \
                     event is confirmed)"
                        .to_owned(),
                );
                None
            }
            (None, true) => None,
            (Some(credentials), false) => {
                let raw = credentials.load().map_err(|problem| problems.push(problem.to_string())).ok()?;
                let text = String::from_utf8(raw).unwrap_or_default();
                let text = text.trim();
                let valid = text.split_once(':').is_some_and(|(id, secret)| {
                    !id.is_empty() && !secret.is_empty() && !text.contains(char::is_whitespace)
                });
                if !valid {
                    problems.push(format!(
                        "[sources.paypal] api_credentials `{}` must be the REST app's `client_id:secret`",
                        credentials.id
                    ));
                    return None;
                }
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                let mut basic = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
                basic.set_sensitive(true);
                Some(Self { sandbox: options.sandbox, basic, token: tokio::sync::Mutex::new(None) })
            }
        }
    }

    /// `proof` (a PayPal signature, its body bound by a CRC32) made a proof of the whole body, if PayPal's API holds
    /// the event the body names with every member the body has.
    pub async fn confirm(&self, fetcher: &KeyFetcher, proof: Verified) -> Result<Verified, Rejection> {
        let url = paypal::event_url(&proof, self.sandbox).map_err(Rejection::Verify)?;
        let token = self.token(fetcher).await?;
        match fetcher.call_api("paypal", "event", &url, &token, None).await {
            Ok(answer) => paypal::confirmed(proof, &answer).map_err(Rejection::Verify),
            Err(FetchError::Status(StatusCode::NOT_FOUND)) => Err(Rejection::Verify(VerifyError::NotConfirmed)),
            Err(error) => {
                if matches!(error, FetchError::Status(StatusCode::UNAUTHORIZED)) {
                    // The token was revoked or expired early: the next request asks for another.
                    *self.token.lock().await = None;
                }
                tracing::warn!(error = %error, "PayPal's event API cannot confirm an event now");
                Err(unavailable(fetcher))
            }
        }
    }

    async fn token(&self, fetcher: &KeyFetcher) -> Result<HeaderValue, Rejection> {
        let mut held = self.token.lock().await;
        if let Some((token, _)) = held.as_ref().filter(|(_, until)| Instant::now() < *until) {
            return Ok(token.clone());
        }
        let url = paypal::token_url(self.sandbox);
        let form = Some("grant_type=client_credentials");
        let answer = fetcher.call_api("paypal", "token", &url, &self.basic, form).await.map_err(|error| {
            tracing::warn!(error = %error, "no OAuth token from PayPal (check [sources.paypal] api_credentials)");
            unavailable(fetcher)
        })?;
        let parsed: TokenAnswer = serde_json::from_slice(&answer).map_err(|_| unavailable(fetcher))?;
        let mut token =
            HeaderValue::from_str(&format!("Bearer {}", parsed.access_token)).map_err(|_| unavailable(fetcher))?;
        token.set_sensitive(true);
        let lifetime = Duration::from_secs(parsed.expires_in);
        let until = Instant::now() + if lifetime > TOKEN_MARGIN * 2 { lifetime - TOKEN_MARGIN } else { lifetime / 2 };
        *held = Some((token.clone(), until));
        Ok(token)
    }
}

fn unavailable(fetcher: &KeyFetcher) -> Rejection {
    Rejection::KeyUnavailable { retry_after_s: fetcher.failure_hold_s(), after_miss: false }
}
