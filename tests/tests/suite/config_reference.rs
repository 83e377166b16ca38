//! docs/configuration/<service>.md and the four config parsers agree: every key a service page's table documents is
//! a key that service's parser accepts, and every key the service prints as its effective config (its defaults, and its
//! documented example with every default applied) is documented.
//!
//! A documented key is proven to exist by feeding the parser a file that sets only that key, to a value of the
//! wrong type: an existing key fails on its value (or on a missing sibling), a key that does not exist fails as an
//! unknown field, because every config table refuses unknown fields.

use std::collections::BTreeSet;

use hookline_common::config::{self, ConfigError, effective_table};
use serde::{Serialize, de::DeserializeOwned};

/// The four services' pages of the configuration reference, one after the other.
const DOC: &str = concat!(
    include_str!("../../../docs/configuration/gateway.md"),
    include_str!("../../../docs/configuration/consumer.md"),
    include_str!("../../../docs/configuration/replayer.md"),
    include_str!("../../../docs/configuration/reconciler.md"),
);

#[test]
fn gateway_keys_are_documented_and_exist() {
    check::<hookline_gateway::GatewayConfig>("Gateway keys", "gateway.toml");
}

#[test]
fn consumer_keys_are_documented_and_exist() {
    check::<hookline_consumer::ConsumerConfig>("Consumer keys", "consumer.toml");
}

#[test]
fn replayer_keys_are_documented_and_exist() {
    check::<hookline_dlq_replayer::ReplayerConfig>("Replayer keys", "replayer.toml");
}

#[test]
fn reconciler_keys_are_documented_and_exist() {
    check::<hookline_reconciler::ReconcilerConfig>("Reconciler keys", "reconciler.toml");
}

#[test]
fn an_undocumented_key_and_a_documented_key_that_does_not_exist_are_both_found() {
    let documented: BTreeSet<String> =
        ["listen_addr", "limits.max_in_flight", "limits.no_such_limit"].into_iter().map(str::to_owned).collect();
    assert_eq!(missing_from_parser::<hookline_gateway::GatewayConfig>(&documented), vec!["limits.no_such_limit"]);
    let printed = printed_keys(&hookline_gateway::GatewayConfig::default());
    let undocumented = undocumented(&printed, &documented);
    assert!(undocumented.contains(&"admin_addr".to_owned()), "{undocumented:?}");
    assert!(!undocumented.contains(&"listen_addr".to_owned()), "{undocumented:?}");
}

fn check<T: DeserializeOwned + Serialize + Default>(table_heading: &str, example: &str) {
    let documented = documented_keys(table_heading);
    assert!(documented.len() > 5, "no key table under `## {table_heading}`");
    let missing = missing_from_parser::<T>(&documented);
    assert!(missing.is_empty(), "{table_heading}: documented but not accepted by the parser: {missing:?}");

    let example: T = config::parse_str(example_block(example), "docs/configuration/").expect("the example parses");
    let mut printed = printed_keys(&T::default());
    printed.extend(printed_keys(&example));
    let undocumented = undocumented(&printed, &documented);
    assert!(undocumented.is_empty(), "{table_heading}: printed by --print-config but not documented: {undocumented:?}");
}

/// The first-column keys of the table under `## {heading}`.
fn documented_keys(heading: &str) -> BTreeSet<String> {
    let start = DOC.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("no `## {heading}` section"));
    let section = &DOC[start..];
    let end = section[4..].find("\n## ").map_or(section.len(), |at| at + 4);
    section[..end]
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |").map(|(key, _)| key.to_owned()))
        .collect()
}

fn example_block(file: &str) -> &'static str {
    let start = DOC.find(&format!("## Example: {file}")).unwrap_or_else(|| panic!("no example {file}"));
    DOC[start..].split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a toml block")
}

/// The documented keys the parser refuses as unknown.
fn missing_from_parser<T: DeserializeOwned>(documented: &BTreeSet<String>) -> Vec<String> {
    documented
        .iter()
        .filter(|key| match config::parse_str::<T>(&file_setting(key), "probe") {
            Err(ConfigError::Parse { source, .. }) => source.message().contains("unknown field"),
            _ => false,
        })
        .cloned()
        .collect()
}

/// A TOML file that sets only `key` (dotted, with `[]` for an array element and `<name>` for a chosen name), to a
/// value no key takes: the boolean-in-an-array `[[true]]`.
fn file_setting(key: &str) -> String {
    let segments: Vec<String> = key.split('.').map(|segment| segment.replace("<name>", "x")).collect();
    let (leaf, tables) = segments.split_last().expect("a key");
    let mut path = Vec::new();
    let mut text = String::new();
    for table in tables {
        match table.strip_suffix("[]") {
            Some(array) => {
                path.push(array.to_owned());
                text.push_str(&format!("[[{}]]\n", path.join(".")));
            }
            None => {
                path.push(table.clone());
                text.push_str(&format!("[{}]\n", path.join(".")));
            }
        }
    }
    format!("{text}{} = [[true]]\n", leaf.trim_end_matches("[]"))
}

/// Every key of `config` as `--print-config` prints it: dotted paths, `[]` for an array element.
fn printed_keys<T: Serialize>(config: &T) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    flatten("", &toml::Value::Table(effective_table(config).expect("printable")), &mut keys);
    keys
}

fn flatten(prefix: &str, value: &toml::Value, keys: &mut BTreeSet<String>) {
    match value {
        toml::Value::Table(table) => {
            if !prefix.is_empty() {
                keys.insert(prefix.to_owned());
            }
            for (name, inner) in table {
                let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                flatten(&path, inner, keys);
            }
        }
        toml::Value::Array(items) if items.iter().any(toml::Value::is_table) => {
            for item in items {
                flatten(&format!("{prefix}[]"), item, keys);
            }
        }
        _ => {
            keys.insert(prefix.to_owned());
        }
    }
}

/// The printed keys no documented key covers. A documented key covers a printed one when they are equal segment by
/// segment (`<name>` matches any name), or when the printed key lies in the documented one (a free-form table such
/// as `kafka.properties`, or a value written as an inline table such as `sources[].event_id`). Tables themselves
/// need no row of their own: a printed table is covered by the keys documented in it.
fn undocumented(printed: &BTreeSet<String>, documented: &BTreeSet<String>) -> Vec<String> {
    // `a` covers `b` when `a` is `b` or a table `b` lies in; an empty array prints without its `[]`.
    let covers = |a: &str, b: &str| {
        let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
        let same =
            |x: &str, y: &str| x.trim_end_matches("[]") == y.trim_end_matches("[]") || x == "<name>" || y == "<name>";
        a.len() <= b.len() && a.iter().zip(&b).all(|(x, y)| same(x, y))
    };
    printed
        .iter()
        .filter(|key| !documented.iter().any(|doc| covers(doc, key)))
        .filter(|key| !documented.iter().any(|doc| covers(key, doc)))
        .cloned()
        .collect()
}
