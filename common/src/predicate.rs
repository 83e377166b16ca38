//! A condition on an event's verified JSON body, `'<json pointer> <op> <value>'`, shared by event search
//! (`hookline-replayer events --where`) and the consumer's route filters (`[[routes.filters]] skip_when`), so that
//! a filter skips exactly the events a search with the same conditions finds. Operators: `==`, `!=`, `in` (a JSON
//! array), `exists` (no value), `prefix` (a string), and `<`, `<=`, `>`, `>=` on numbers. The value is JSON
//! (`"cus_123"`, `42`, `true`, `["a","b"]`); a value that is not JSON is taken as a string (`== cus_123`). Numbers
//! compare by value (`1 == 1.0`). A pointer the body lacks matches only `!=` (the value is not there). A body that
//! is not JSON is for the caller to judge: no condition is asked about it (a search does not match it, a filter
//! does not skip it).

use std::{fmt, str::FromStr};

use serde_json::Value;

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pointer: String,
    op: Op,
    value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    In,
    Exists,
    Prefix,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "==" => Self::Eq,
            "!=" => Self::Ne,
            "in" => Self::In,
            "exists" => Self::Exists,
            "prefix" => Self::Prefix,
            "<" => Self::Lt,
            "<=" => Self::Le,
            ">" => Self::Gt,
            ">=" => Self::Ge,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::In => "in",
            Self::Exists => "exists",
            Self::Prefix => "prefix",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
        }
    }
}

/// Why a condition's text does not parse: what was given, and what a condition looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConditionError(String);

impl FromStr for Condition {
    type Err = ConditionError;

    fn from_str(text: &str) -> Result<Self, ConditionError> {
        Self::parse_text(text).map_err(ConditionError)
    }
}

impl Condition {
    fn parse_text(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let usage = || format!("`{text}`: a condition is '<json pointer> <op> <value>', e.g. '/customer == \"cus_1\"'");
        let (pointer, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        if !pointer.starts_with('/') {
            return Err(format!("{}: the pointer starts with `/`", usage()));
        }
        if !valid_escapes(pointer) {
            return Err(format!("`{text}`: in a JSON pointer `~` is followed by 0 (`~`) or 1 (`/`)"));
        }
        let rest = rest.trim_start();
        let (op_text, value_text) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let op = Op::parse(op_text)
            .ok_or_else(|| format!("{}: `{op_text}` is not one of == != in exists prefix < <= > >=", usage()))?;
        let value_text = value_text.trim();
        if op == Op::Exists {
            if !value_text.is_empty() {
                return Err(format!("`{text}`: exists takes no value"));
            }
            return Ok(Self { pointer: pointer.to_owned(), op, value: Value::Null });
        }
        if value_text.is_empty() {
            return Err(format!("`{text}`: {} needs a value", op.as_str()));
        }
        let value = serde_json::from_str(value_text).unwrap_or_else(|_| Value::String(value_text.to_owned()));
        match op {
            Op::In if !value.is_array() => return Err(format!("`{text}`: in takes a JSON array, e.g. [\"a\",\"b\"]")),
            Op::Prefix if !value.is_string() => return Err(format!("`{text}`: prefix takes a string")),
            Op::Lt | Op::Le | Op::Gt | Op::Ge if !value.is_number() => {
                return Err(format!("`{text}`: {} compares numbers", op.as_str()));
            }
            _ => {}
        }
        Ok(Self { pointer: pointer.to_owned(), op, value })
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Op::Exists => write!(f, "{} exists", self.pointer),
            op => write!(f, "{} {} {}", self.pointer, op.as_str(), self.value),
        }
    }
}

/// Whether every `~` of `pointer` starts an escape RFC 6901 knows: `~0` or `~1`.
fn valid_escapes(pointer: &str) -> bool {
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

/// JSON equality with numbers compared by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

impl Condition {
    /// Whether `body` satisfies the condition.
    pub fn matches(&self, body: &Value) -> bool {
        let Some(found) = body.pointer(&self.pointer) else { return self.op == Op::Ne };
        let number = |value: &Value| value.as_f64();
        match self.op {
            Op::Exists => true,
            Op::Eq => equal(found, &self.value),
            Op::Ne => !equal(found, &self.value),
            Op::In => self.value.as_array().is_some_and(|values| values.iter().any(|value| equal(found, value))),
            Op::Prefix => {
                found.as_str().zip(self.value.as_str()).is_some_and(|(text, prefix)| text.starts_with(prefix))
            }
            Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                let (Some(left), Some(right)) = (number(found), number(&self.value)) else { return false };
                match self.op {
                    Op::Lt => left < right,
                    Op::Le => left <= right,
                    Op::Gt => left > right,
                    _ => left >= right,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn holds(condition: &str, body: &Value) -> bool {
        condition.parse::<Condition>().unwrap_or_else(|error| panic!("{error}")).matches(body)
    }

    #[test]
    fn every_operator_matches_what_it_says() {
        let body = json!({"customer": "cus_123", "amount": 1500, "paid": true, "tags": ["a"], "nested": {"n": 2.5}});
        assert!(holds("/customer == \"cus_123\"", &body));
        assert!(holds("/customer == cus_123", &body), "a bare word is a string");
        assert!(!holds("/customer == \"cus_12\"", &body));
        assert!(holds("/amount == 1500.0", &body), "numbers by value");
        assert!(holds("/customer != \"cus_9\"", &body));
        assert!(!holds("/customer != \"cus_123\"", &body));
        assert!(holds("/missing != 1", &body), "absent is not equal");
        assert!(holds("/customer in [\"cus_1\", \"cus_123\"]", &body));
        assert!(!holds("/customer in [\"cus_1\"]", &body));
        assert!(holds("/paid exists", &body) && holds("/tags/0 exists", &body) && !holds("/missing exists", &body));
        assert!(holds("/customer prefix \"cus_\"", &body) && !holds("/customer prefix \"acct_\"", &body));
        assert!(!holds("/amount prefix \"15\"", &body), "prefix is for strings");
        assert!(holds("/amount < 1501", &body) && !holds("/amount < 1500", &body));
        assert!(holds("/amount <= 1500", &body) && !holds("/amount <= 1499", &body));
        assert!(holds("/amount > 1499", &body) && !holds("/amount > 1500", &body));
        assert!(holds("/amount >= 1500", &body) && !holds("/amount >= 1501", &body));
        assert!(holds("/nested/n > 2", &body));
        assert!(!holds("/customer > 1", &body), "a string is not compared as a number");
        assert!(!holds("/missing < 1", &body) && !holds("/missing == 1", &body));
        let escaped = json!({"a/b": 1, "m~n": 2});
        assert!(holds("/a~1b == 1", &escaped) && holds("/m~0n == 2", &escaped), "escapes per RFC 6901");
    }

    #[test]
    fn malformed_conditions_say_why() {
        for (text, says) in [
            ("customer == 1", "starts with `/`"),
            ("/a~2b == 1", "followed by 0"),
            ("/a~ == 1", "followed by 0"),
            ("/a ~ 1", "is not one of"),
            ("/a ==", "needs a value"),
            ("/a exists 1", "takes no value"),
            ("/a in 1", "JSON array"),
            ("/a prefix 1", "takes a string"),
            ("/a < \"x\"", "compares numbers"),
        ] {
            let error = text.parse::<Condition>().expect_err(text);
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }
}
