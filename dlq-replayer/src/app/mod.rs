//! The replayer's one HTTP surface as an axum [`Router`]: the JSON API under `/v1/` ([`crate::api`]), the console
//! under `/ui` ([`crate::console`]), and `/livez`, `/readyz`, `/metrics` for everything else. The router is a plain
//! `tower` service: [`serve_on`] runs it behind `hookline_common::http::serve` (the same connection limits, body
//! timeouts and drain as every listener of hookline), and tests call it in-process with
//! `tower::ServiceExt::oneshot`.

use std::sync::Arc;

use axum::{
    Router,
    extract::{Request, State},
    middleware::from_fn_with_state,
    response::Response,
};
use bytes::Bytes;
use hookline_common::http::{Body, admin_response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::ServiceExt as _;

use crate::{api, api::Api, console};

/// Every route of the admin listener, with `api`'s state.
pub fn router(api: Arc<Api>) -> Router {
    Router::new()
        .merge(api::routes())
        .merge(console::routes())
        .fallback(fallback)
        // After the fallback, so an unknown `/v1/` path needs the token too.
        .layer(from_fn_with_state(api.clone(), api::guard))
        .with_state(api)
}

/// A path no route took: a console path (its own login redirect, 404 or 405 page), an API path (JSON 404), or one
/// of the probes.
async fn fallback(State(api): State<Arc<Api>>, request: Request) -> Response {
    let path = request.uri().path();
    if path == "/ui" || path.starts_with("/ui/") {
        console::fallback(State(api), request).await
    } else if path.starts_with("/v1/") {
        api::not_found().await
    } else {
        admin_response(&request, &api.registry, &api.readiness).map(axum::body::Body::new)
    }
}

/// Answers one request of the listener with `router`: the answer is built whole (pages and JSON are rendered in
/// memory), so it is handed to hyper as one buffer.
pub async fn serve_on(router: Router, request: http::Request<Incoming>) -> http::Response<Body> {
    let response = match router.oneshot(request.map(axum::body::Body::new)).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let bytes =
        body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_else(|_: axum::Error| Bytes::new());
    http::Response::from_parts(parts, Body::new(bytes))
}

#[cfg(test)]
mod tests;
