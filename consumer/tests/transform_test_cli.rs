//! `hookline-consumer transform-test`, the binary itself: what it prints and its exit code, offline (no broker, no
//! Redis: the config names none that is reachable, and nothing connects).

use std::{path::PathBuf, process::Command};

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

/// Exit code, stdout and stderr of `transform-test --route route --event event`.
fn transform_test(dir: &std::path::Path, route: &str, event: &str) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hookline-consumer"))
        .arg("--config")
        .arg(dir.join("consumer.toml"))
        .args(["transform-test", "--route", route, "--event"])
        .arg(dir.join(event))
        .env_remove("HOOKLINE_CONFIG")
        .output()
        .expect("runs");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf-8");
    (output.status.code().expect("exited"), text(output.stdout), text(output.stderr))
}

#[test]
fn transform_test_prints_the_output_or_the_error_and_exits_non_zero_on_error() {
    let charge = r#"{"type":"charge.succeeded","data":{"object":{"id":12345678901234567890123,"amount":1999}}}"#;
    let dir = folder(&[("charge.json", charge), ("list.json", "[1,2]"), ("text.txt", "not json")]);

    // By label and by index: the bytes the route's handler would get (big numbers keep their digits).
    let expected = "{\"event\":\"charge.succeeded\",\"amount\":1999,\"id\":12345678901234567890123}\n";
    for route in ["stripe:charge.succeeded", "0"] {
        let (code, stdout, stderr) = transform_test(&dir, route, "charge.json");
        assert_eq!((code, stdout.as_str()), (0, expected), "{route}: {stderr}");
    }

    // What the consumer would dead-letter as poison: said, nothing printed on stdout, exit 1.
    let (code, stdout, stderr) = transform_test(&dir, "0", "list.json");
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(
        stderr.contains("transform of routes[0] (`stripe:charge.succeeded`) failed: cannot index [1,2]"),
        "{stderr}"
    );
    let (code, _, stderr) = transform_test(&dir, "0", "text.txt");
    assert_eq!(code, 1);
    assert!(stderr.contains("failed: the body is not JSON"), "{stderr}");

    // A program that does not compile, a route that does not exist, a missing file.
    let (code, _, stderr) = transform_test(&dir, "github", "charge.json");
    assert_eq!(code, 1);
    assert!(stderr.contains("routes[1] (`github`): transform: does not parse: line 1, column 8"), "{stderr}");
    let (code, _, stderr) = transform_test(&dir, "shopify", "charge.json");
    assert_eq!(code, 1);
    assert!(stderr.contains("no route `shopify`") && stderr.contains("1 `github`"), "{stderr}");
    let (code, _, stderr) = transform_test(&dir, "0", "missing.json");
    assert_eq!(code, 1);
    assert!(stderr.contains("cannot read the event"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
