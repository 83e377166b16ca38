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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const CONFIG: &str = r#"
    [[routes]]
    source = "stripe"
    event_types = ["charge.succeeded"]
    transform = '{event: .type, amount: .data.object.amount, id: .data.object.id}'
    [routes.handler]
    kind = "log"
    
    [[routes]]
    source = "github"
    transform = '{a: .a,'
    [routes.handler]
    kind = "log"
    "#;

    /// A fresh folder with the config and the named files.
    fn folder(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hookline-transform-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("consumer.toml"), CONFIG).expect("config");
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("file");
        }
        dir
    }

    /// What `transform-test --route route --event event` prints: the output, or the error with its causes as the
    /// binary prints them (`Error: a: b: c`, exit 1).
    fn transform_test(dir: &Path, route: &str, event: &str) -> Result<String, String> {
        let config = ConsumerConfig::read(Some(&dir.join("consumer.toml"))).expect("the config reads");
        run(&config, route, &dir.join(event)).map(|output| String::from_utf8(output).expect("utf-8")).map_err(|error| {
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            message
        })
    }

    #[test]
    fn transform_test_gives_the_output_or_says_why_there_is_none() {
        let charge = r#"{"type":"charge.succeeded","data":{"object":{"id":12345678901234567890123,"amount":1999}}}"#;
        let dir = folder(&[("charge.json", charge), ("list.json", "[1,2]"), ("text.txt", "not json")]);

        // By label and by index: the bytes the route's handler would get (big numbers keep their digits).
        let expected = r#"{"event":"charge.succeeded","amount":1999,"id":12345678901234567890123}"#;
        for route in ["stripe:charge.succeeded", "0"] {
            assert_eq!(transform_test(&dir, route, "charge.json").as_deref(), Ok(expected), "{route}");
        }

        // What the consumer would dead-letter as poison.
        let error = transform_test(&dir, "0", "list.json").expect_err("poison");
        assert!(
            error.contains("transform of routes[0] (`stripe:charge.succeeded`) failed: cannot index [1,2]"),
            "{error}"
        );
        let error = transform_test(&dir, "0", "text.txt").expect_err("poison");
        assert!(error.contains("failed: the body is not JSON"), "{error}");

        // A program that does not compile, a route that does not exist, a missing file.
        let error = transform_test(&dir, "github", "charge.json").expect_err("does not compile");
        assert!(error.contains("routes[1] (`github`): transform: does not parse: line 1, column 8"), "{error}");
        let error = transform_test(&dir, "shopify", "charge.json").expect_err("no such route");
        assert!(error.contains("no route `shopify`") && error.contains("1 `github`"), "{error}");
        let error = transform_test(&dir, "0", "missing.json").expect_err("no file");
        assert!(error.contains("cannot read the event"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
