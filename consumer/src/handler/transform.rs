//! A route's transform: a jq program (the `jaq` crates, jq in safe Rust) compiled once when the config is built and
//! applied to each event's JSON body before the route's handler, so that a downstream gets the payload it wants
//! without anyone writing a [`super::Handler`]. What the handler gets, and an `http` handler forwards and signs, is
//! the program's one output, written as compact JSON; the record in Kafka, and so a dead letter and its re-drive,
//! keep the original body.
//!
//! A transform fails, and the event is poison, when the body is not JSON, when the program raises an error, when
//! it outputs no value or more than one, when its output is not JSON (NaN, infinities, byte strings and non-string
//! keys are jaq values JSON cannot carry), or when it runs past [`TIME_LIMIT`]. The same body fails the same way
//! on every attempt, so nothing is retried.
//!
//! Bounds on a hostile body: the body is checked as JSON (`serde_json`, at most 128 levels deep) before jaq reads
//! it, and the output is written at most [`MAX_OUTPUT_DEPTH`] levels deep, so neither recursion follows an
//! attacker's nesting. jaq has no step or memory budget: a program whose work grows with a value of the body (a
//! `range(.n)`, a string repeated `.n` times) does that much work. The program runs on a thread of its own, never on
//! a thread the fetch loop or other events need, and an event whose transform is still running after
//! [`TIME_LIMIT`] is poison; its thread is abandoned, not stopped (nothing can stop it), and ends when the program
//! does. The program comes from the config, not the event: `transform-test` shows what it does with a body.
//!
//! The standard library is jq's, less what reaches outside the event: `env` (and `$ENV`) raise an error instead of
//! reading the consumer's environment (its secrets), `debug` and `stderr` log nothing (no body in the logs), `halt`
//! raises an error instead of ending the process, `input`, `inputs` and modules (`import`, `include`) do not exist.
//! `now` is there: a transform that uses it forwards a different body on each attempt.

use std::{fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use jaq_core::{
    Ctx, DataT, Exn, Native, ValXs, Vars,
    box_iter::box_once,
    compile::Undefined,
    data::JustLut,
    load::{self, Arena, File, Loader},
    native::Fun,
};
use jaq_json::{Num, Val};

/// The values the compiled program runs on: jaq's JSON values, with no data but the program itself.
type Data = JustLut<Val>;

/// How long one event's transform may run before the event is poison: a typical transform of a 4 KiB body takes
/// about 90 microseconds (docs/benchmarks/transforms.md), so reaching this means a program whose work the body
/// made unbounded.
pub const TIME_LIMIT: Duration = Duration::from_secs(1);

/// Deepest output written: the body is at most 128 levels deep (serde_json's limit), and a program nesting deeper
/// than this builds its depth itself, which a downstream's parser may refuse anyway.
pub const MAX_OUTPUT_DEPTH: usize = 256;

/// Most characters of a jq error kept in the poison message: a jq error quotes the value it failed on, which can
/// be much of the body, and the message goes to the dead letter, the logs and the alert.
pub const ERROR_CHARS: usize = 256;

/// A compiled jq program. Built once per route; [`Self::apply`] runs it on one body.
pub struct Transform {
    filter: jaq_core::Filter<Data>,
}

impl fmt::Debug for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transform").finish_non_exhaustive()
    }
}

/// Why a program does not compile: every problem jaq found, each with its line and column in the program.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CompileError {
    /// Not jq syntax.
    #[error("does not parse: {}", .0.join("; "))]
    Syntax(Vec<String>),
    /// A filter, variable, label or module the program names does not exist (or not with that many arguments).
    #[error("does not compile: {}", .0.join("; "))]
    Undefined(Vec<String>),
}

/// Why a transform failed on one body. Every variant makes the event poison: the same body fails the same way.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TransformError {
    /// The body is not one JSON value (or nests deeper than 128 levels).
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The program raised an error (`error(...)`, a type error such as indexing a string): jaq's message,
    /// truncated to [`ERROR_CHARS`].
    #[error("{0}")]
    Failed(String),
    #[error("it output nothing (a transform must output exactly one JSON value)")]
    NoOutput,
    #[error("it output more than one value (a transform must output exactly one JSON value)")]
    SeveralOutputs,
    /// The output holds what JSON cannot carry.
    #[error("its output is not JSON: it holds {0}")]
    OutputNotJson(&'static str),
    #[error("it ran past its time limit of {} ms", .0.as_millis())]
    TimedOut(Duration),
    /// jaq panicked (a bug of jaq's): the event is poison rather than the process gone.
    #[error("it panicked")]
    Panicked,
    /// The operating system refused a thread (the process is at its limit): the event is poison rather than
    /// waited on, and the dead letter can be re-driven.
    #[error("no thread could be started to run it")]
    NoThread,
}

impl Transform {
    /// Parses and compiles `program` against the standard library; every problem found is reported.
    pub fn compile(program: &str) -> Result<Self, CompileError> {
        let loader = Loader::new(jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs()));
        let arena = Arena::default();
        let modules = loader.load(&arena, File { code: program, path: () }).map_err(|errors| {
            CompileError::Syntax(errors.iter().flat_map(|(_, error)| load_problems(program, error)).collect())
        })?;
        let filter = jaq_core::Compiler::default().with_funs(funs::<Data>()).compile(modules).map_err(|errors| {
            CompileError::Undefined(
                errors
                    .iter()
                    .flat_map(|(_, undefined)| {
                        undefined.iter().map(|(name, what)| undefined_problem(program, name, what))
                    })
                    .collect(),
            )
        })?;
        Ok(Self { filter })
    }

    /// Runs the program on `body`: its one output, as compact JSON.
    pub fn apply(&self, body: &[u8]) -> Result<Vec<u8>, TransformError> {
        // serde_json first: it refuses what is not strict JSON (jaq's reader takes `NaN` and more) and bounds the
        // nesting jaq's recursive reader then follows.
        serde_json::from_slice::<StrictJson>(body).map_err(|error| TransformError::NotJson(error.to_string()))?;
        let input = jaq_json::read::parse_single(body).map_err(|error| TransformError::NotJson(error.to_string()))?;
        let context = Ctx::<Data>::new(&self.filter.lut, Vars::new([]));
        let mut outputs = self.filter.id.run((context, input));
        let output = match outputs.next() {
            None => return Err(TransformError::NoOutput),
            Some(output) => output.map_err(failed)?,
        };
        // Only as far as a second output: a program that would output many stops there.
        if let Some(second) = outputs.next() {
            second.map_err(failed)?;
            return Err(TransformError::SeveralOutputs);
        }
        let mut written = Vec::with_capacity(body.len());
        write_json(&mut written, &output, 0)?;
        Ok(written)
    }

    /// [`Self::apply`] on a thread of its own, answered within [`TIME_LIMIT`]: a slow program never holds a thread
    /// the consumer's tasks run on. Not tokio's blocking pool: the runtime waits for its threads when it shuts
    /// down, and a program that never ends would keep the process from exiting; a thread of its own is detached.
    pub async fn apply_off_runtime(self: &Arc<Self>, body: Bytes) -> Result<Bytes, TransformError> {
        let transform = Arc::clone(self);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new().name("transform".to_owned()).spawn(move || {
            // The receiver is gone only when the caller stopped waiting: nobody wants the answer then.
            let _ = answer.send(transform.apply(&body));
        });
        if spawned.is_err() {
            return Err(TransformError::NoThread);
        }
        match tokio::time::timeout(TIME_LIMIT, answered).await {
            Ok(Ok(result)) => result.map(Bytes::from),
            Ok(Err(_panicked)) => Err(TransformError::Panicked),
            Err(_elapsed) => Err(TransformError::TimedOut(TIME_LIMIT)),
        }
    }
}

/// The standard library's native filters, with those that reach outside the event replaced (see the module's
/// doc). Generic as jaq's own are: a closure becomes a native filter only where the value type is a parameter.
fn funs<D: for<'a> DataT<V<'a> = Val>>() -> impl Iterator<Item = Fun<D>> {
    jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs()).map(|(name, arguments, native)| match name {
        "env" => (name, arguments, Native::new(|_| unavailable("`env` is not available in a transform"))),
        "halt" => (name, arguments, Native::new(|_| unavailable("`halt` is not available in a transform"))),
        "debug_empty" | "stderr_empty" => (name, arguments, Native::new(|_| Box::new(std::iter::empty()))),
        _ => (name, arguments, native),
    })
}

fn unavailable<'a>(message: &'static str) -> ValXs<'a, Val> {
    box_once(Err(Exn::from(jaq_core::Error::str(message))))
}

/// A body read only to be checked: strict JSON, at most 128 levels deep. serde_json counts the levels of what
/// it reads through `deserialize_any` (not of what it skips: `IgnoredAny` takes any depth), and this reads every
/// level so, allocating nothing.
struct StrictJson;

impl<'de> serde::Deserialize<'de> for StrictJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictJsonVisitor)
    }
}

struct StrictJsonVisitor;

impl<'de> serde::de::Visitor<'de> for StrictJsonVisitor {
    type Value = StrictJson;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_i64<E>(self, _: i64) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_u64<E>(self, _: u64) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_f64<E>(self, _: f64) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_str<E>(self, _: &str) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_unit<E>(self) -> Result<StrictJson, E> {
        Ok(StrictJson)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<StrictJson, A::Error> {
        while items.next_element::<StrictJson>()?.is_some() {}
        Ok(StrictJson)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<StrictJson, A::Error> {
        while entries.next_entry::<serde::de::IgnoredAny, StrictJson>()?.is_some() {}
        Ok(StrictJson)
    }
}

/// What an exception raised by the program becomes.
fn failed(exception: Exn<'_, Val>) -> TransformError {
    match exception.get_err() {
        Ok(error) => {
            // A string raised (`error("...")`, and jaq's own messages) is said as its text, not quoted as JSON.
            let mut message = match error.into_val() {
                Val::TStr(text) => String::from_utf8_lossy(&text).into_owned(),
                other => other.to_string(),
            };
            if let Some((cut, _)) = message.char_indices().nth(ERROR_CHARS) {
                message.truncate(cut);
                message.push_str("...");
            }
            TransformError::Failed(message)
        }
        // `halt` is replaced, and jaq's other exceptions (breaks, tail calls) never leave a program.
        Err(_) => TransformError::Failed("the program stopped without an output".to_owned()),
    }
}

/// `value` as compact JSON, or why it is not JSON.
fn write_json(out: &mut Vec<u8>, value: &Val, depth: usize) -> Result<(), TransformError> {
    if depth > MAX_OUTPUT_DEPTH {
        return Err(TransformError::OutputNotJson("values nested deeper than 256 levels"));
    }
    match value {
        Val::Null => out.extend_from_slice(b"null"),
        Val::Bool(true) => out.extend_from_slice(b"true"),
        Val::Bool(false) => out.extend_from_slice(b"false"),
        Val::Num(Num::Float(float)) if !float.is_finite() => {
            return Err(TransformError::OutputNotJson("a NaN or infinite number"));
        }
        // Integers, big integers, finite floats (shortest round-trip form) and decimals read from the body (their
        // digits as they came) all print as JSON numbers.
        Val::Num(number) => out.extend_from_slice(number.to_string().as_bytes()),
        Val::TStr(text) => write_string(out, text),
        Val::BStr(_) => return Err(TransformError::OutputNotJson("a byte string")),
        Val::Arr(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_json(out, item, depth + 1)?;
            }
            out.push(b']');
        }
        Val::Obj(entries) => {
            out.push(b'{');
            for (index, (key, item)) in entries.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                let Val::TStr(key) = key else {
                    return Err(TransformError::OutputNotJson("an object key that is not a string"));
                };
                write_string(out, key);
                out.push(b':');
                write_json(out, item, depth + 1)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// A text string as a JSON string (serde_json's escaping); bytes that are not UTF-8, which only a program's own
/// byte operations can produce, become U+FFFD.
fn write_string(out: &mut Vec<u8>, text: &[u8]) {
    let text = String::from_utf8_lossy(text);
    serde_json::to_writer(out, text.as_ref()).expect("writing a string to a Vec cannot fail");
}

/// One line per problem of a program that does not parse.
fn load_problems(program: &str, error: &load::Error<&str>) -> Vec<String> {
    match error {
        load::Error::Io(imports) => imports
            .iter()
            .map(|(path, _)| format!("{}: modules cannot be loaded in a transform", at(program, path)))
            .collect(),
        load::Error::Lex(lex) => lex
            .iter()
            .map(|(expected, found)| {
                let expected = match expected {
                    load::lex::Expect::Digit => "a digit".to_owned(),
                    load::lex::Expect::Ident => "an identifier".to_owned(),
                    load::lex::Expect::Delim(open) => format!("the closing counterpart of `{open}`"),
                    load::lex::Expect::Escape => "a string escape sequence".to_owned(),
                    load::lex::Expect::Unicode => "a 4-digit hexadecimal code point".to_owned(),
                    load::lex::Expect::Token => "a token".to_owned(),
                    _ => "something else".to_owned(),
                };
                format!("{}: expected {expected}", at(program, found))
            })
            .collect(),
        load::Error::Parse(parse) => parse
            .iter()
            .map(|(expected, found)| format!("{}: expected {}", at(program, found), expected.as_str()))
            .collect(),
    }
}

fn undefined_problem(program: &str, name: &str, what: &Undefined) -> String {
    let shown = match what {
        Undefined::Filter(arity) => format!("filter `{name}/{arity}`"),
        Undefined::Var => format!("variable `{name}`"),
        other => format!("{} `{name}`", other.as_str()),
    };
    format!("{}: undefined {shown}", at(program, name))
}

/// Where `part` (a slice of `program`, as jaq reports it) starts: `line L, column C` (both from 1), or the end of
/// the program when jaq points past it.
fn at(program: &str, part: &str) -> String {
    let start = program.as_ptr() as usize;
    let offset = (part.as_ptr() as usize).checked_sub(start).filter(|offset| *offset <= program.len());
    let Some(offset) = offset else { return "in the program".to_owned() };
    let before = &program[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
    format!("line {line}, column {column}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(program: &str, body: &str) -> Result<String, TransformError> {
        let transform = Transform::compile(program).expect("compiles");
        transform.apply(body.as_bytes()).map(|out| String::from_utf8(out).expect("utf-8"))
    }

    #[test]
    fn a_typical_transform_picks_renames_and_builds_an_object() {
        let body = r#"{"id":"evt_1","type":"charge.succeeded","data":{"object":{"amount":1999,"currency":"eur","customer":"cus_9"}},"livemode":false}"#;
        let program = r#"{event: .type, amount: .data.object.amount, currency: (.data.object.currency | ascii_upcase), who: .data.object.customer, test: (.livemode | not)}"#;
        assert_eq!(
            run(program, body).unwrap(),
            r#"{"event":"charge.succeeded","amount":1999,"currency":"EUR","who":"cus_9","test":true}"#
        );
        assert_eq!(run(".", r#"{ "a" : [1, 2.5, "x\n\u00e9"] }"#).unwrap(), r#"{"a":[1,2.5,"x\né"]}"#);
    }

    #[test]
    fn big_numbers_keep_their_digits() {
        let body = r#"{"id":12345678901234567890123,"price":0.10000000000000000001}"#;
        assert_eq!(run("{id, price}", body).unwrap(), body);
    }

    #[test]
    fn what_is_not_exactly_one_json_output_is_an_error() {
        assert_eq!(run("empty", "{}"), Err(TransformError::NoOutput));
        assert_eq!(run(".[]", "[1,2]"), Err(TransformError::SeveralOutputs));
        assert_eq!(run(".[]", "[1]").unwrap(), "1");
        assert!(matches!(run(".", "{nope"), Err(TransformError::NotJson(_))));
        assert!(matches!(run(".", "NaN"), Err(TransformError::NotJson(_))), "jaq reads NaN, JSON has none");
        assert!(matches!(run(".", "{} {}"), Err(TransformError::NotJson(_))));
        assert_eq!(run("nan", "{}"), Err(TransformError::OutputNotJson("a NaN or infinite number")));
        assert_eq!(run("infinite", "{}"), Err(TransformError::OutputNotJson("a NaN or infinite number")));
        assert_eq!(run(r#""x" | tobytes"#, "{}"), Err(TransformError::OutputNotJson("a byte string")));
        assert_eq!(run("{(1): 2}", "{}"), Err(TransformError::OutputNotJson("an object key that is not a string")));
        let deep = run("reduce range(300) as $i (0; [.])", "{}");
        assert_eq!(deep, Err(TransformError::OutputNotJson("values nested deeper than 256 levels")));
    }

    #[test]
    fn a_runtime_error_says_jaq_s_message_cut_short() {
        let error = run(r#"error("no customer: \(.id)")"#, r#"{"id":"evt_7"}"#).unwrap_err();
        assert_eq!(error, TransformError::Failed("no customer: evt_7".to_owned()));
        assert!(matches!(run(".a.b", r#"{"a":"text"}"#), Err(TransformError::Failed(m)) if m.contains("cannot index")));
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(10_000));
        let Err(TransformError::Failed(message)) = run(".a | error", &long) else { panic!("fails") };
        assert_eq!(message.chars().count(), ERROR_CHARS + 3, "{message}");
    }

    #[test]
    fn nothing_reaches_outside_the_event() {
        assert_eq!(run("env", "{}"), Err(TransformError::Failed("`env` is not available in a transform".to_owned())));
        assert_eq!(run("halt", "{}"), Err(TransformError::Failed("`halt` is not available in a transform".to_owned())));
        assert_eq!(
            run("halt_error", "{}"),
            Err(TransformError::Failed("`halt` is not available in a transform".to_owned()))
        );
        assert_eq!(run("debug | stderr | .a", r#"{"a":1}"#).unwrap(), "1", "debug and stderr pass their input on");
        assert!(matches!(Transform::compile("$ENV"), Err(CompileError::Undefined(_))));
        assert!(matches!(Transform::compile("input"), Err(CompileError::Undefined(_))));
        assert!(matches!(Transform::compile(r#"import "x" as x; ."#), Err(CompileError::Syntax(_))));
    }

    #[test]
    fn a_program_that_does_not_compile_says_where() {
        let Err(CompileError::Syntax(problems)) = Transform::compile("{a: .a,\n  b: }") else { panic!("syntax") };
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("line 2, column 6: expected"), "{problems:?}");
        let error = Transform::compile(".a | no_such_filter(1) | $nope").unwrap_err();
        assert_eq!(
            error.to_string(),
            "does not compile: line 1, column 6: undefined filter `no_such_filter/1`; line 1, column 26: undefined variable `$nope`"
        );
    }

    #[test]
    fn a_hostile_nesting_is_refused_before_jaq_reads_it() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(run(".", &deep), Err(TransformError::NotJson(message)) if message.contains("recursion")));
    }

    #[test]
    fn the_deepest_json_body_is_walked() {
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(run("[paths] | length", &fine).unwrap(), "99");
    }

    #[tokio::test]
    async fn a_program_past_its_time_limit_is_abandoned() {
        let transform = Arc::new(Transform::compile("last(range(.n))").unwrap());
        let quick = transform.apply_off_runtime(Bytes::from_static(br#"{"n":3}"#)).await;
        assert_eq!(quick, Ok(Bytes::from_static(b"2")));
        let started = std::time::Instant::now();
        let slow = transform.apply_off_runtime(Bytes::from_static(br#"{"n":1e12}"#)).await;
        assert_eq!(slow, Err(TransformError::TimedOut(TIME_LIMIT)));
        assert!(started.elapsed() < TIME_LIMIT * 3, "the caller is answered at the limit");
    }
}
