//! One log line per event without `tracing`'s formatter: the `log` handler's line is its whole work, and
//! `tracing-subscriber` spent about 15k instructions formatting it (visiting each field through `dyn Value`,
//! the span's fields, the timestamp). [`EventLine`] writes the same line as the subscriber [`super::init_tracing`]
//! set up would (the same text layout, or the same JSON object), straight to stdout, in a few hundred.
//!
//! It is used only when the process logs through [`super::init_tracing`] (the binaries) and its filter lets an
//! INFO line of the caller's module through; otherwise (a test's own subscriber, a library user's) the caller
//! falls back to `tracing`.

use std::{
    cell::RefCell,
    fmt::Write as _,
    io::Write as _,
    sync::atomic::{AtomicU8, Ordering},
    time::SystemTime,
};

use crate::time::{Precision, Rfc3339};

/// The layout [`super::init_tracing`] chose: 0 not initialised, 1 text, 2 JSON.
static LAYOUT: AtomicU8 = AtomicU8::new(0);

pub(super) fn set_layout(json: bool) {
    LAYOUT.store(if json { 2 } else { 1 }, Ordering::Relaxed);
}

/// A field's value, written as `tracing`'s `%` (display) or `?` (debug, quoted for strings) would write it.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// Like `field = %value`: unquoted in text.
    Display(&'a str),
    /// Like `field = value` for a `&str`: quoted and escaped in text.
    Quoted(&'a str),
    Int(i64),
}

/// A line to write: the span it is in (name and fields), its message and its fields, in order.
#[derive(Debug)]
pub struct EventLine<'a> {
    pub span: (&'a str, &'a [(&'a str, &'a str)]),
    pub message: &'a str,
    pub fields: &'a [(&'a str, Value<'a>)],
}

thread_local! {
    static BUFFER: RefCell<String> = RefCell::new(String::with_capacity(512));
}

impl EventLine<'_> {
    /// Writes the line at INFO level when the binaries' subscriber is set up; false when the caller must log it
    /// through `tracing` instead (no such subscriber: the caller's `tracing::enabled!` said yes to another one).
    pub fn write_info(&self) -> bool {
        let json = match LAYOUT.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => return false,
        };
        BUFFER.with(|buffer| {
            let Ok(mut line) = buffer.try_borrow_mut() else { return false };
            line.clear();
            let now = Rfc3339::of_time(SystemTime::now(), Precision::Micros);
            if json {
                self.json(&mut line, now);
            } else {
                self.text(&mut line, now);
            }
            line.push('\n');
            // One write of the whole line under stdout's lock, as the subscriber's writer does.
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
            true
        })
    }

    /// `tracing-subscriber`'s default text layout without ANSI: `<time>  INFO <span>{<fields>}: <message> <k=v>...`.
    fn text(&self, line: &mut String, now: Rfc3339) {
        let _ = write!(line, "{now}");
        line.push_str("  INFO ");
        line.push_str(self.span.0);
        line.push('{');
        for (i, (name, value)) in self.span.1.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
        line.push_str("}: ");
        line.push_str(self.message);
        for (name, value) in self.fields {
            line.push(' ');
            line.push_str(name);
            line.push('=');
            match value {
                Value::Display(text) => line.push_str(text),
                Value::Quoted(text) => debug_quoted(line, text),
                Value::Int(number) => line.push_str(itoa::Buffer::new().format(*number)),
            }
        }
    }

    /// `tracing-subscriber`'s JSON layout: timestamp, level, fields (message first), target-less, span and spans.
    fn json(&self, line: &mut String, now: Rfc3339) {
        let _ = write!(line, "{{\"timestamp\":\"{now}\",\"level\":\"INFO\",\"fields\":{{\"message\":");
        json_string(line, self.message);
        for (name, value) in self.fields {
            line.push(',');
            json_string(line, name);
            line.push(':');
            match value {
                Value::Display(text) | Value::Quoted(text) => json_string(line, text),
                Value::Int(number) => line.push_str(itoa::Buffer::new().format(*number)),
            }
        }
        line.push_str("},\"span\":");
        self.json_span(line);
        line.push_str(",\"spans\":[");
        self.json_span(line);
        line.push_str("]}");
    }

    fn json_span(&self, line: &mut String) {
        line.push('{');
        for (name, value) in self.span.1 {
            json_string(line, name);
            line.push(':');
            json_string(line, value);
            line.push(',');
        }
        line.push_str("\"name\":");
        json_string(line, self.span.0);
        line.push('}');
    }
}

/// `text` as `{text:?}` writes it: quoted, and escaped where `Debug` escapes. Printable ASCII other than `"` and
/// `\` (ids, event types: nearly every value) is copied as it is; anything else goes through `Debug` itself.
fn debug_quoted(line: &mut String, text: &str) {
    if text.bytes().all(|byte| (b' '..=b'~').contains(&byte) && byte != b'"' && byte != b'\\') {
        line.push('"');
        line.push_str(text);
        line.push('"');
    } else {
        let _ = write!(line, "{text:?}");
    }
}

/// `text` as a JSON string, escaped.
fn json_string(line: &mut String, text: &str) {
    line.push('"');
    for c in text.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(line, "\\u{:04x}", u32::from(c));
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_value_is_written_as_debug_writes_it() {
        for text in
            ["", "push", "evt_1 A-b.c~", "pu\"sh", "a\\b", "tab\there", "é", "\u{7f}", "line\n", "\u{301}x", "it's"]
        {
            let mut line = String::new();
            debug_quoted(&mut line, text);
            assert_eq!(line, format!("{text:?}"), "{text:?}");
        }
    }

    fn line(json: bool) -> String {
        let fields =
            [("source", Value::Display("github")), ("event_type", Value::Quoted("pu\"sh")), ("offset", Value::Int(-7))];
        let event =
            EventLine { span: ("consumer", &[("service", "billing")]), message: "event processed", fields: &fields };
        let mut line = String::new();
        let now = Rfc3339::of_time(SystemTime::UNIX_EPOCH, Precision::Micros);
        if json {
            event.json(&mut line, now)
        } else {
            event.text(&mut line, now)
        }
        line
    }

    #[test]
    fn the_text_line_reads_as_the_subscribers() {
        assert_eq!(
            line(false),
            "1970-01-01T00:00:00.000000Z  INFO consumer{service=billing}: event processed source=github \
             event_type=\"pu\\\"sh\" offset=-7"
        );
    }

    #[test]
    fn the_json_line_is_json_with_the_subscribers_shape() {
        let value: serde_json::Value = serde_json::from_str(&line(true)).expect("json");
        assert_eq!(value["level"], "INFO");
        assert_eq!(value["fields"]["message"], "event processed");
        assert_eq!(value["fields"]["event_type"], "pu\"sh");
        assert_eq!(value["fields"]["offset"], -7);
        assert_eq!(value["span"]["service"], "billing");
        assert_eq!(value["spans"][0]["name"], "consumer");
    }
}
