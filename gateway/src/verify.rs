//! The verify step of `POST /webhooks/{source}`: which way a source's scheme runs, and where.
//!
//! A cheap scheme (one HMAC over the body) runs on the request's task. A costly one (public-key cryptography, a
//! form to parse, URL variants to try) runs on the blocking pool under its source's budget, taken by the caller
//! before the in-flight permit. A fetched-key scheme (SNS, PayPal, Google Pub/Sub, Plaid) does its cheap checks first (timestamp,
//! the key URL's pins: nothing is fetched for a stale or unpinned request), then awaits its certificate (or key set) from the
//! [`KeyFetcher`] (cached; a key that cannot be had is a 503, never a 401), then checks the chain and the
//! signature on the blocking pool, all under the same budget. A verified SNS subscription confirmation is
//! confirmed (a `GET` of its pinned `SubscribeURL`, still under the budget, and not again for a URL confirmed
//! lately) and answered as a handshake, never produced.

use std::sync::Arc;

use bytes::Bytes;
use hookline_signature::{
    self as signature, UnverifiedRequest, Verified,
    fetched::{Confirmation, FetchedKeyScheme},
};
use http::{HeaderMap, Method};
use tokio::sync::OwnedSemaphorePermit;

use crate::{error::Rejection, key_fetch::KeyFetcher, source::Source};

/// What verification made of a request.
#[derive(Debug)]
pub enum Checked {
    /// An event, to be produced.
    Event(Verified),
    /// A verified subscription message, answered 200 and never produced (its kind, for the count and the log).
    Confirmed(&'static str),
}

/// The request as the verify step needs it, owned so that it can move to the blocking pool.
pub struct Presented {
    pub headers: HeaderMap,
    pub method: Method,
    pub body: Bytes,
    pub url: Option<String>,
    pub query: Option<String>,
    pub received_at_ms: i64,
}

/// Never prints the headers (a signature, a bearer token) or the body.
impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented")
            .field("method", &self.method)
            .field("body_len", &self.body.len())
            .field("received_at_ms", &self.received_at_ms)
            .finish_non_exhaustive()
    }
}

impl Presented {
    fn unverified(&self) -> UnverifiedRequest<'_> {
        let unverified = UnverifiedRequest::new(&self.headers, &self.body, self.received_at_ms)
            .with_method(&self.method)
            .with_query(self.query.as_deref());
        match &self.url {
            Some(url) => unverified.with_url(url),
            None => unverified,
        }
    }
}

/// Verifies `request` for `source`; `permit` is the source's costly-verification budget, when it has one.
pub async fn verify(
    source: &Arc<Source>,
    fetcher: &KeyFetcher,
    request: Presented,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<Checked, Rejection> {
    if let Some(scheme) = source.scheme.fetched_key() {
        return verify_fetched(source, scheme, fetcher, request, permit).await;
    }
    let verified = match permit {
        // Off the async workers, so the other sources' requests keep being served.
        Some(permit) => {
            let source = source.clone();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                signature::verify(source.scheme.as_ref(), &request.unverified(), &source.secrets)
            })
            .await
            .map_err(|_| Rejection::VerifyBusy)?
        }
        None => signature::verify(source.scheme.as_ref(), &request.unverified(), &source.secrets),
    };
    verified.map(Checked::Event).map_err(Rejection::Verify)
}

async fn verify_fetched(
    source: &Arc<Source>,
    scheme: &dyn FetchedKeyScheme,
    fetcher: &KeyFetcher,
    request: Presented,
    permit: Option<OwnedSemaphorePermit>,
) -> Result<Checked, Rejection> {
    let active: Vec<&signature::Secret> = signature::active_secrets(&source.secrets, request.received_at_ms).collect();
    let key_url = scheme.locate(&request.unverified(), &active).map_err(Rejection::Verify)?;
    let unavailable = |error: crate::key_fetch::KeyUnavailable| Rejection::KeyUnavailable {
        retry_after_s: error.retry_after_s,
        after_miss: error.after_miss,
    };
    let provider = source.scheme.name();
    let key = fetcher.key(&source.name, provider, scheme.key_format(), &key_url).await.map_err(unavailable)?;
    let (checking, roots) = (source.clone(), fetcher.roots().clone());
    // The permit comes back from the blocking pool and is held until a confirmation's `GET` returns, so the
    // source's budget bounds those too.
    let (verified, confirmation, _permit) = tokio::task::spawn_blocking(move || {
        let scheme = checking.scheme.fetched_key().expect("a fetched-key scheme");
        let unverified = request.unverified();
        let verified = signature::verify_fetched(scheme, &unverified, &checking.secrets, &key, &roots);
        let confirmation = verified.as_ref().ok().map(|_| scheme.confirmation(&unverified));
        (verified, confirmation, permit)
    })
    .await
    .map_err(|_| Rejection::VerifyBusy)?;
    let proof = verified.map_err(Rejection::Verify)?;
    match confirmation.transpose().map_err(Rejection::Verify)?.flatten() {
        // PayPal binds the body by a CRC32 only: its event API must confirm it (unless the source opted out).
        None => match &source.paypal {
            Some(api) => api.confirm(fetcher, proof).await.map(Checked::Event),
            None => Ok(Checked::Event(proof)),
        },
        Some(Confirmation::Acknowledge { kind }) => Ok(Checked::Confirmed(kind)),
        Some(Confirmation::Visit { kind, url }) => {
            fetcher.confirm(provider, &url).await.map_err(unavailable)?;
            Ok(Checked::Confirmed(kind))
        }
    }
}
