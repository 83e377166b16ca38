//! `hookline-consumer transform-test --route R --event FILE`: a route's transform run on a body from a file, offline
//! (no Kafka, no Redis, no secret read): what the route's handler would get, or why the event would be poison.

use std::path::Path;

use crate::{
    config::ConsumerConfig,
    handler::transform::{CompileError, Transform, TransformError},
};

/// Why `transform-test` printed no output.
#[derive(Debug, thiserror::Error)]
pub enum TransformTestError {
    #[error("no route `{wanted}` (routes by index or label: {known})")]
    NoRoute { wanted: String, known: String },
    #[error("routes[{index}] (`{label}`) has no transform")]
    NoTransform { index: usize, label: String },
    #[error("routes[{index}] (`{label}`): transform")]
    Compile {
        index: usize,
        label: String,
        #[source]
        source: CompileError,
    },
    #[error("cannot read the event {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// What the consumer would dead-letter as poison (its message says the same, this error and its source).
    #[error("transform of routes[{index}] (`{label}`) failed")]
    Failed {
        index: usize,
        label: String,
        #[source]
        source: TransformError,
    },
}

/// The route `wanted` names (its index in `[[routes]]`, or its label: `github`, `github:issues,push`) transformed
/// `event`'s body to this: the bytes its handler would get.
pub fn run(config: &ConsumerConfig, wanted: &str, event: &Path) -> Result<Vec<u8>, TransformTestError> {
    let found =
        config.routes.iter().enumerate().find(|(index, route)| {
            wanted.parse::<usize>().is_ok_and(|wanted| wanted == *index) || route.label() == wanted
        });
    let Some((index, route)) = found else {
        let known = config.routes.iter().enumerate().map(|(index, route)| format!("{index} `{}`", route.label()));
        return Err(TransformTestError::NoRoute {
            wanted: wanted.to_owned(),
            known: known.collect::<Vec<_>>().join(", "),
        });
    };
    let label = route.label();
    let program =
        route.transform.as_deref().ok_or_else(|| TransformTestError::NoTransform { index, label: label.clone() })?;
    let transform = Transform::compile(program).map_err(|source| TransformTestError::Compile {
        index,
        label: label.clone(),
        source,
    })?;
    let body = std::fs::read(event)
        .map_err(|source| TransformTestError::Read { path: event.display().to_string(), source })?;
    transform.apply(&body).map_err(|source| TransformTestError::Failed { index, label, source })
}
