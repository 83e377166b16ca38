//! Binding a statement's parameters: where each value comes from (a JSON pointer into the verified body, or the
//! event's metadata) and how it becomes the SQL type the server inferred when the statement was prepared. A type
//! hookline cannot bind stops the consumer at start; a value that does not convert makes the event poison.

use std::{
    error::Error,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::BytesMut;
use hookline_common::wire::InboundEvent;
use serde_json::Value;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// Why a parameter's source does not parse, does not fit its SQL type, or gives no value for an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error(
        "`{0}` is neither a JSON pointer (`/data/id`, `\"\"` for the whole body) nor one of event.id, event.source, \
         event.type, event.received_at, event.body, event.service, event.provider_event_id"
    )]
    UnknownSource(String),
    #[error(
        "the server infers type `{0}`, which hookline does not bind; cast through text in the SQL \
         (`$n::text::{0}`) and the server converts it (a value it cannot convert is poison)"
    )]
    UnsupportedType(Type),
    #[error("this value cannot be bound to the inferred type `{0}`")]
    WrongType(Type),
    #[error("the body has no value at JSON pointer `{0}`")]
    NoValue(String),
    /// The value at the pointer does not convert (`problem` says how, e.g. "is out of range for int2").
    #[error("the value at `{pointer}` {problem}")]
    BadValue { pointer: String, problem: String },
    #[error("the body is not UTF-8 text")]
    NotUtf8(#[source] std::str::Utf8Error),
}

/// Where a parameter's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamSource {
    /// An RFC 6901 pointer into the body parsed as JSON (`""`: the whole body).
    Pointer(String),
    EventId,
    Source,
    EventType,
    ReceivedAt,
    /// The raw body bytes.
    Body,
    Service,
    ProviderEventId,
}

impl ParamSource {
    pub fn parse(text: &str) -> Result<Self, ParamError> {
        Ok(match text {
            "event.id" => Self::EventId,
            "event.source" => Self::Source,
            "event.type" => Self::EventType,
            "event.received_at" => Self::ReceivedAt,
            "event.body" => Self::Body,
            "event.service" => Self::Service,
            "event.provider_event_id" => Self::ProviderEventId,
            pointer if pointer.is_empty() || pointer.starts_with('/') => Self::Pointer(pointer.to_owned()),
            other => return Err(ParamError::UnknownSource(other.to_owned())),
        })
    }

    /// Whether binding this parameter needs the body parsed as JSON.
    pub fn needs_json(&self) -> bool {
        matches!(self, Self::Pointer(_))
    }

    /// Whether a parameter of SQL type `ty` can take this source's values; otherwise why not, for the start error.
    pub fn check_type(&self, ty: &Type) -> Result<(), ParamError> {
        let supported = [
            Type::BOOL,
            Type::INT2,
            Type::INT4,
            Type::INT8,
            Type::FLOAT4,
            Type::FLOAT8,
            Type::TEXT,
            Type::VARCHAR,
            Type::BPCHAR,
            Type::NAME,
            Type::JSON,
            Type::JSONB,
            Type::BYTEA,
            Type::TIMESTAMPTZ,
        ];
        if !supported.contains(ty) {
            return Err(ParamError::UnsupportedType(ty.clone()));
        }
        let fits = match self {
            Self::Pointer(_) => true,
            Self::ReceivedAt => [Type::TIMESTAMPTZ, Type::INT8, Type::TEXT, Type::VARCHAR].contains(ty),
            Self::Body => [Type::BYTEA, Type::TEXT, Type::VARCHAR, Type::JSON, Type::JSONB].contains(ty),
            Self::EventId | Self::Source | Self::EventType | Self::Service | Self::ProviderEventId => {
                [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(ty)
            }
        };
        if fits { Ok(()) } else { Err(ParamError::WrongType(ty.clone())) }
    }

    /// The value for `event` as SQL type `ty`; `json` is the body parsed when any parameter needs it.
    pub fn bind(
        &self,
        event: &InboundEvent,
        json: Option<&Value>,
        service: &str,
        ty: &Type,
    ) -> Result<Bound, ParamError> {
        let text = |value: Option<&str>| Ok(value.map_or(Bound::Null, |value| Bound::Text(value.to_owned())));
        match self {
            Self::Pointer(pointer) => {
                let value =
                    json.and_then(|body| body.pointer(pointer)).ok_or_else(|| ParamError::NoValue(pointer.clone()))?;
                from_json(value, ty).map_err(|problem| ParamError::BadValue { pointer: pointer.clone(), problem })
            }
            Self::EventId => text(Some(&event.meta.event_id)),
            Self::Source => text(Some(&event.meta.source)),
            Self::EventType => text(event.meta.event_type.as_deref()),
            Self::Service => text(Some(service)),
            Self::ProviderEventId => text(event.provider_event_id.as_deref()),
            Self::ReceivedAt => Ok(match *ty {
                Type::TIMESTAMPTZ => Bound::Time(epoch_ms(event.meta.received_at_ms)),
                Type::INT8 => Bound::Int(event.meta.received_at_ms),
                _ => Bound::Text(event.meta.received_at_ms.to_string()),
            }),
            Self::Body => match *ty {
                Type::BYTEA => Ok(Bound::Bytes(event.body.to_vec())),
                Type::JSON | Type::JSONB => Ok(Bound::Json(event.body.to_vec())),
                _ => std::str::from_utf8(&event.body)
                    .map(|body| Bound::Text(body.to_owned()))
                    .map_err(ParamError::NotUtf8),
            },
        }
    }
}

fn epoch_ms(ms: i64) -> SystemTime {
    let magnitude = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 { UNIX_EPOCH + magnitude } else { UNIX_EPOCH - magnitude }
}

/// The Unix seconds PostgreSQL's `timestamptz` holds (4714-11-24 BC to 294276-12-31 AD). Outside them the
/// conversion to its microseconds since 2000 overflows: a panic in a debug build, a wrapped time in release.
const TIMESTAMPTZ_SECONDS: std::ops::RangeInclusive<i64> = -210_866_803_200..=9_224_318_015_999;

/// A float the server can store as `ty`: `NaN` and the infinities (`"NaN"`, `"inf"`, `"infinity"`, `"1e999"`)
/// are refused, as a `real` past its range would become one.
fn finite(value: f64, ty: &Type) -> Result<f64, String> {
    let limit = if *ty == Type::FLOAT4 { f64::from(f32::MAX) } else { f64::MAX };
    if value.is_finite() && value.abs() <= limit {
        Ok(value)
    } else {
        Err(format!("({value}) is not a finite number in the range of {ty}"))
    }
}

/// A JSON value as SQL type `ty`, or why it does not convert (finishing "the value at `/x` ...").
fn from_json(value: &Value, ty: &Type) -> Result<Bound, String> {
    if value.is_null() {
        return Ok(Bound::Null);
    }
    let integer = || -> Result<i64, String> {
        match value {
            Value::Number(number) => number.as_i64().ok_or_else(|| format!("({number}) is not an integer")),
            Value::String(text) => text.trim().parse().map_err(|_| format!("(\"{text}\") is not an integer")),
            _ => Err("is not an integer".to_owned()),
        }
    };
    let float = || -> Result<f64, String> {
        match value {
            Value::Number(number) => number.as_f64().ok_or_else(|| format!("({number}) is not a number")),
            Value::String(text) => text.trim().parse().map_err(|_| format!("(\"{text}\") is not a number")),
            _ => Err("is not a number".to_owned()),
        }
    };
    let in_range = |value: i64, min: i64, max: i64| {
        if (min..=max).contains(&value) {
            Ok(Bound::Int(value))
        } else {
            Err(format!("({value}) is out of range for {ty}"))
        }
    };
    match *ty {
        Type::BOOL => value.as_bool().map(Bound::Bool).ok_or_else(|| "is not a JSON boolean".to_owned()),
        Type::INT2 => in_range(integer()?, i16::MIN.into(), i16::MAX.into()),
        Type::INT4 => in_range(integer()?, i32::MIN.into(), i32::MAX.into()),
        Type::INT8 => Ok(Bound::Int(integer()?)),
        Type::FLOAT4 | Type::FLOAT8 => finite(float()?, ty).map(Bound::Float),
        Type::JSON | Type::JSONB => Ok(Bound::Json(value.to_string().into_bytes())),
        Type::TIMESTAMPTZ => match value {
            // Unix seconds, as Stripe's `created` and most providers' integer timestamps.
            Value::Number(_) => {
                let seconds = integer()?;
                if TIMESTAMPTZ_SECONDS.contains(&seconds) {
                    Ok(Bound::Time(epoch_ms(seconds * 1000)))
                } else {
                    Err(format!("({seconds}) is out of range for {ty} (Unix seconds from 4714 BC to 294276 AD)"))
                }
            }
            Value::String(text) => hookline_common::time::parse_rfc3339_weak_ms(text.trim())
                .map(|ms| Bound::Time(epoch_ms(ms)))
                .map_err(|_| format!("(\"{text}\") is not an RFC 3339 time")),
            _ => Err("is not a time (RFC 3339 text or Unix seconds)".to_owned()),
        },
        Type::BYTEA => Ok(Bound::Bytes(match value {
            Value::String(text) => text.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        })),
        // Text: a JSON string as it is, any other value as its JSON text.
        _ => Ok(Bound::Text(match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })),
    }
}

/// A parameter value, converted for the type the server inferred.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    /// JSON text, already valid or checked by the server (a `json`/`jsonb` parameter).
    Json(Vec<u8>),
    Bytes(Vec<u8>),
    Time(SystemTime),
}

impl ToSql for Bound {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Self::Null => Ok(IsNull::Yes),
            Self::Bool(value) => value.to_sql(ty, out),
            Self::Int(value) => match *ty {
                Type::INT2 => i16::try_from(*value)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*value)?.to_sql(ty, out),
                _ => value.to_sql(ty, out),
            },
            #[allow(clippy::cast_possible_truncation)]
            Self::Float(value) if *ty == Type::FLOAT4 => (*value as f32).to_sql(ty, out),
            Self::Float(value) => value.to_sql(ty, out),
            Self::Text(value) => value.as_str().to_sql(ty, out),
            Self::Json(text) => {
                // jsonb's binary form is a version byte (1) and the text; json's is the text.
                if *ty == Type::JSONB {
                    out.extend_from_slice(&[1]);
                }
                out.extend_from_slice(text);
                Ok(IsNull::No)
            }
            Self::Bytes(bytes) => bytes.as_slice().to_sql(ty, out),
            Self::Time(time) => time.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        // Each value was converted for the type the statement declares (`bind`); `to_sql` refuses a mismatch.
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sources_parse_and_refuse_what_is_neither_pointer_nor_metadata() {
        assert_eq!(ParamSource::parse("/data/id"), Ok(ParamSource::Pointer("/data/id".into())));
        assert_eq!(ParamSource::parse(""), Ok(ParamSource::Pointer(String::new())));
        assert_eq!(ParamSource::parse("event.received_at"), Ok(ParamSource::ReceivedAt));
        assert!(ParamSource::parse("data.id").is_err());
        assert!(ParamSource::parse("event.secret").is_err());
    }

    #[test]
    fn json_values_convert_to_the_inferred_type_or_say_why_not() {
        let cases: &[(Value, Type, Result<Bound, &str>)] = &[
            (json!(42), Type::INT4, Ok(Bound::Int(42))),
            (json!("42"), Type::INT8, Ok(Bound::Int(42))),
            (json!(70000), Type::INT2, Err("out of range")),
            (json!(1.5), Type::INT8, Err("not an integer")),
            (json!("abc"), Type::INT8, Err("not an integer")),
            (json!("10.50"), Type::FLOAT8, Ok(Bound::Float(10.5))),
            (json!(true), Type::BOOL, Ok(Bound::Bool(true))),
            (json!("true"), Type::BOOL, Err("not a JSON boolean")),
            (json!(null), Type::INT8, Ok(Bound::Null)),
            (json!("ord_1"), Type::TEXT, Ok(Bound::Text("ord_1".into()))),
            (json!(7), Type::TEXT, Ok(Bound::Text("7".into()))),
            (json!({"a": 1}), Type::JSONB, Ok(Bound::Json(br#"{"a":1}"#.to_vec()))),
            (json!(0), Type::TIMESTAMPTZ, Ok(Bound::Time(UNIX_EPOCH))),
            (json!("1970-01-01T00:00:01Z"), Type::TIMESTAMPTZ, Ok(Bound::Time(UNIX_EPOCH + Duration::from_secs(1)))),
            (json!("yesterday"), Type::TIMESTAMPTZ, Err("not an RFC 3339 time")),
            // Past timestamptz's range the conversion overflowed (a panic in debug, a wrapped time in release).
            (json!(99_999_999_999_999_i64), Type::TIMESTAMPTZ, Err("out of range")),
            (json!(-210_866_803_201_i64), Type::TIMESTAMPTZ, Err("out of range")),
            (json!(i64::MAX), Type::TIMESTAMPTZ, Err("out of range")),
            (
                json!(9_224_318_015_999_i64),
                Type::TIMESTAMPTZ,
                Ok(Bound::Time(UNIX_EPOCH + Duration::from_secs(9_224_318_015_999))),
            ),
            (
                json!(-210_866_803_200_i64),
                Type::TIMESTAMPTZ,
                Ok(Bound::Time(UNIX_EPOCH - Duration::from_secs(210_866_803_200))),
            ),
            // Non-finite floats were bound as they are.
            (json!("NaN"), Type::FLOAT8, Err("not a finite number")),
            (json!("inf"), Type::FLOAT8, Err("not a finite number")),
            (json!("-infinity"), Type::FLOAT8, Err("not a finite number")),
            (json!("1e999"), Type::FLOAT8, Err("not a finite number")),
            (json!(1e300), Type::FLOAT4, Err("not a finite number")),
            (json!(-2.5), Type::FLOAT4, Ok(Bound::Float(-2.5))),
        ];
        for (value, ty, expected) in cases {
            let got = from_json(value, ty);
            match expected {
                Ok(bound) => assert_eq!(got.as_ref(), Ok(bound), "{value} as {ty}"),
                Err(fragment) => {
                    assert!(got.as_ref().is_err_and(|problem| problem.contains(fragment)), "{value} as {ty}: {got:?}");
                }
            }
        }
    }

    #[test]
    fn types_hookline_cannot_bind_are_refused_with_a_cast_to_write() {
        let problem = ParamSource::Pointer("/amount".into()).check_type(&Type::NUMERIC).unwrap_err();
        assert!(problem.to_string().contains("$n::text::numeric"), "{problem}");
        assert!(ParamSource::EventId.check_type(&Type::INT8).is_err());
        assert!(ParamSource::Body.check_type(&Type::JSONB).is_ok());
    }
}
