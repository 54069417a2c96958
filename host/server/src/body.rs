//! Reading a request's JSON body (or its query string) into the route's
//! request type, so every mistake gets its documented `error_code` and the
//! path of the field it is about:
//!
//! | mistake | code |
//! | --- | --- |
//! | a required field absent (or `null`) | `MISSING_FIELD` |
//! | a key a route names as not accepted there (`wire::NotHere`) | `UNKNOWN_FIELD` |
//! | a name outside a closed vocabulary | `INVALID_ENUM` |
//! | not a UUID where one is wanted | `INVALID_UUID` |
//! | an object wanted, something else sent | `INVALID_INPUT` |
//! | any other wrong type or value | `INVALID_VALUE` |
//!
//! The request types derive `serde::Deserialize`; this module is the
//! `Deserializer` they read from, over an already parsed `serde_json::Value`.
//! It differs from serde_json's own in three ways: a struct is read from an
//! object only (serde_json also takes an array, field by position); an
//! explicit `null` is the same as an absent field; every error knows its path
//! and code. In query mode every value is text, and numbers and booleans are
//! parsed from it.
//!
//! A key a request type does not define is left out, not refused (decision
//! 0061): a client newer or older than this service keeps working. The keys
//! left out of a body are reported ([`read_reporting`]), and the service
//! names them to the client in the `Anchor-Ignored-Fields` header.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, Expected, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

use crate::error::ApiError;

/// Reads a JSON body into `T`.
pub fn read<T: DeserializeOwned>(value: &Value) -> Result<T, ReadError> {
    read_reporting(value).0
}

/// Reads a JSON body into `T`, with the keys it left out because `T` does
/// not define them (at most [`IGNORED_MAX`], each as a message quotes it),
/// those met before a mistake too.
pub fn read_reporting<T: DeserializeOwned>(value: &Value) -> (Result<T, ReadError>, Vec<String>) {
    IGNORED.with_borrow_mut(Vec::clear);
    let read = T::deserialize(Reader { value, query: false });
    (read, IGNORED.with_borrow_mut(std::mem::take))
}

/// The most keys left out that one read reports.
pub const IGNORED_MAX: usize = 16;

thread_local! {
    /// The keys the read under way on this thread left out (a read is
    /// synchronous: nothing else runs on the thread meanwhile).
    static IGNORED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn ignore(key: &str) {
    IGNORED.with_borrow_mut(|ignored| {
        if ignored.len() < IGNORED_MAX {
            ignored.push(shorten(key));
        }
    });
}

/// Reads query parameters (name, value) into `T`.
pub fn read_query<T: DeserializeOwned>(pairs: Vec<(String, String)>) -> Result<T, ReadError> {
    let object = Value::Object(pairs.into_iter().map(|(k, v)| (k, Value::String(v))).collect());
    T::deserialize(Reader { value: &object, query: true }).map_err(|mut e| {
        e.query = true;
        e
    })
}

/// Parses a UUID path parameter: 400 `INVALID_UUID` otherwise.
pub fn path_uuid(name: &str, value: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::try_parse(value)
        .map_err(|_| ApiError::bad("INVALID_UUID", format!("{name} must be a UUID; got {}", anchor_domain::brief(value))))
}

/// Where in the body a mistake is.
#[derive(Clone, Debug)]
enum Segment {
    Key(String),
    Index(usize),
}

#[derive(Debug)]
enum Kind {
    Missing(&'static str),
    Unknown { field: String, accepted: &'static [&'static str] },
    NotObject,
    Enum { got: String, names: &'static [&'static str] },
    Coded { code: &'static str, message: String },
    Invalid(String),
}

/// A request that does not fit its type: where, and what is wrong.
#[derive(Debug)]
pub struct ReadError {
    kind: Kind,
    /// Innermost segment first (filled in as the error travels outwards).
    path: Vec<Segment>,
    query: bool,
}

impl ReadError {
    fn new(kind: Kind) -> ReadError {
        ReadError { kind, path: Vec::new(), query: false }
    }

    fn under(mut self, segment: Segment) -> ReadError {
        self.path.push(segment);
        self
    }

    /// The path as a message names it: `dd.decision_type`, `template.call_chain[2]`.
    fn path_text(&self) -> String {
        let mut text = String::new();
        for segment in self.path.iter().rev() {
            match segment {
                Segment::Key(key) => {
                    if !text.is_empty() {
                        text.push('.');
                    }
                    text.push_str(&shorten(key));
                }
                Segment::Index(i) => text.push_str(&format!("[{i}]")),
            }
        }
        text
    }

    fn field_text(&self, field: &str) -> String {
        let path = self.path_text();
        if path.is_empty() { shorten(field) } else { format!("{path}.{}", shorten(field)) }
    }

    /// The documented code and the message.
    pub fn code_and_message(&self) -> (&'static str, String) {
        let path = self.path_text();
        let subject = if !path.is_empty() {
            path.clone()
        } else if self.query {
            "the query".to_string()
        } else {
            "the request body".to_string()
        };
        match &self.kind {
            Kind::Missing(field) => ("MISSING_FIELD", format!("{} is required", self.field_text(field))),
            Kind::Unknown { field, accepted } if self.query => {
                ("INVALID_VALUE", format!("unknown query parameter {}; accepted: {}", anchor_domain::brief(field), accepted.join(", ")))
            }
            Kind::Unknown { field, accepted } => (
                "UNKNOWN_FIELD",
                format!("unknown field {}; accepted fields here: {}", anchor_domain::brief(&self.field_text(field)), accepted.join(", ")),
            ),
            Kind::NotObject => ("INVALID_INPUT", format!("{subject} must be a JSON object")),
            Kind::Enum { got, names } => ("INVALID_ENUM", format!("{subject} must be one of {}; got {got}", names.join(", "))),
            Kind::Coded { code, message } => (code, format!("{subject} {message}")),
            Kind::Invalid(message) => ("INVALID_VALUE", format!("{subject} {message}")),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(error: ReadError) -> ApiError {
        let (code, message) = error.code_and_message();
        ApiError::bad(code, message)
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (code, message) = self.code_and_message();
        write!(f, "{code}: {message}")
    }
}

impl std::error::Error for ReadError {}

/// A key as a message quotes it: at most 64 characters.
fn shorten(key: &str) -> String {
    if key.chars().count() <= anchor_domain::error::BRIEF_CHARS {
        key.to_string()
    } else {
        format!("{}…", key.chars().take(anchor_domain::error::BRIEF_CHARS).collect::<String>())
    }
}

/// What a type wanted, in words (serde names primitive types by their Rust name).
fn wanted(expected: &dyn Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".into(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number (0 or more)".into(),
        "f32" | "f64" => "a number".into(),
        "a sequence" => "an array".into(),
        "a boolean" | "a string" => text,
        _ => text,
    }
}

fn got(unexpected: Unexpected) -> String {
    match unexpected {
        Unexpected::Str(s) => anchor_domain::brief(s),
        Unexpected::Unit => "null".into(),
        Unexpected::Map => "an object".into(),
        Unexpected::Seq => "an array".into(),
        Unexpected::Bool(b) => b.to_string(),
        Unexpected::Unsigned(n) => n.to_string(),
        Unexpected::Signed(n) => n.to_string(),
        Unexpected::Float(n) => n.to_string(),
        Unexpected::Other(other) => other.to_string(),
        other => other.to_string(),
    }
}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(message: T) -> ReadError {
        let text = message.to_string();
        match crate::wire::coded(&text) {
            Some((code, message)) => ReadError::new(Kind::Coded { code, message: message.to_string() }),
            None => ReadError::new(Kind::Invalid(format!("is not valid: {}", anchor_domain::brief(&text)))),
        }
    }

    fn invalid_type(unexpected: Unexpected, expected: &dyn Expected) -> ReadError {
        ReadError::new(Kind::Invalid(format!("must be {}; got {}", wanted(expected), got(unexpected))))
    }

    fn invalid_value(unexpected: Unexpected, expected: &dyn Expected) -> ReadError {
        ReadError::new(Kind::Invalid(format!("must be {}; got {}", wanted(expected), got(unexpected))))
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> ReadError {
        ReadError::new(Kind::Invalid(format!("must be {}; got {len} items", wanted(expected))))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> ReadError {
        ReadError::new(Kind::Enum { got: variant.to_string(), names: expected })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> ReadError {
        ReadError::new(Kind::Unknown { field: field.to_string(), accepted: expected })
    }

    fn missing_field(field: &'static str) -> ReadError {
        ReadError::new(Kind::Missing(field))
    }

    fn duplicate_field(field: &'static str) -> ReadError {
        ReadError::new(Kind::Invalid(format!("names {field} twice")))
    }
}

/// An error of serde_json's own (from reading a number), as a `ReadError`.
fn from_json(error: serde_json::Error) -> ReadError {
    de::Error::custom(error)
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("a number"),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// A short rendering of a value for "got …".
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => anchor_domain::brief(s),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}

#[derive(Clone, Copy)]
struct Reader<'de> {
    value: &'de Value,
    query: bool,
}

impl<'de> Reader<'de> {
    fn refuse<V: Expected>(self, expected: &V) -> ReadError {
        de::Error::invalid_type(unexpected(self.value), expected)
    }

    fn integer<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => visitor.visit_i64(i),
                (_, Some(u)) => visitor.visit_u64(u),
                _ => Err(de::Error::invalid_type(Unexpected::Other(&format!("{n}")), &visitor)),
            },
            Value::String(s) if self.query => match (s.parse::<i64>(), s.parse::<u64>()) {
                (Ok(i), _) => visitor.visit_i64(i),
                (_, Ok(u)) => visitor.visit_u64(u),
                _ => Err(de::Error::invalid_value(Unexpected::Str(s), &visitor)),
            },
            _ => Err(self.refuse(&visitor)),
        }
    }

    fn float<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Number(n) => match n.as_f64() {
                Some(f) => visitor.visit_f64(f),
                None => Err(self.refuse(&visitor)),
            },
            Value::String(s) if self.query => match s.parse::<f64>() {
                Ok(f) if f.is_finite() => visitor.visit_f64(f),
                _ => Err(de::Error::invalid_value(Unexpected::Str(s), &visitor)),
            },
            _ => Err(self.refuse(&visitor)),
        }
    }
}

impl<'de> Deserializer<'de> for Reader<'de> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            // serde_json's number keeps its exact text (arbitrary_precision),
            // but hands `-0` to a visitor as the integer 0, and a decimal the
            // float's own text writes the same (`0.0000004`) as a float,
            // which comes back written otherwise (`4e-7`). Its parser hands
            // both over as their text: those are read again from it.
            Value::Number(n) if n.as_str() == "-0" || !(n.is_u64() || n.is_i64()) => {
                serde_json::Deserializer::from_str(n.as_str()).deserialize_any(visitor).map_err(from_json)
            }
            Value::Number(n) => n.clone().deserialize_any(visitor).map_err(from_json),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items { items: items.iter(), index: 0, query: self.query }),
            Value::Object(map) => visitor.visit_map(Fields { fields: map.iter(), pending: None, query: self.query, known: None }),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::String(s) if self.query => match s.as_str() {
                "true" | "1" => visitor.visit_bool(true),
                "false" | "0" => visitor.visit_bool(false),
                _ => Err(de::Error::invalid_value(Unexpected::Str(s), &visitor)),
            },
            _ => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.integer(visitor)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.float(visitor)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.float(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => visitor.visit_i64(i),
                (_, Some(u), _) => visitor.visit_u64(u),
                (_, _, Some(f)) => visitor.visit_f64(f),
                _ => Err(self.refuse(&visitor)),
            },
            Value::Array(items) => visitor.visit_seq(Items { items: items.iter(), index: 0, query: self.query }),
            Value::Object(map) => visitor.visit_map(Fields { fields: map.iter(), pending: None, query: self.query, known: None }),
            Value::Null => visitor.visit_unit(),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            _ => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Array(items) => visitor.visit_seq(Items { items: items.iter(), index: 0, query: self.query }),
            _ => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(self, _name: &'static str, _len: usize, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            Value::Object(map) => visitor.visit_map(Fields { fields: map.iter(), pending: None, query: self.query, known: None }),
            _ => Err(ReadError::new(Kind::NotObject)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        match self.value {
            // A body's struct leaves out the keys it does not define (a
            // query's type decides for itself, as serde's derive does).
            Value::Object(map) => {
                let known = (!self.query).then_some(fields);
                visitor.visit_map(Fields { fields: map.iter(), pending: None, query: self.query, known })
            }
            _ => Err(ReadError::new(Kind::NotObject)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        match self.value {
            Value::String(s) => visitor.visit_enum(de::value::BorrowedStrDeserializer::<ReadError>::new(s)),
            other => Err(ReadError::new(Kind::Enum { got: shown(other), names: variants })),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! { i128 u128 char bytes byte_buf }
}

/// An object's fields; `null` ones are skipped, as if absent, and so are
/// keys outside `known` (a struct's fields), which are reported.
struct Fields<'de> {
    fields: serde_json::map::Iter<'de>,
    pending: Option<(&'de String, &'de Value)>,
    query: bool,
    known: Option<&'static [&'static str]>,
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ReadError> {
        for (key, value) in self.fields.by_ref() {
            if value.is_null() {
                continue;
            }
            if let Some(known) = self.known
                && !known.contains(&key.as_str())
            {
                ignore(key);
                continue;
            }
            self.pending = Some((key, value));
            return seed.deserialize(de::value::BorrowedStrDeserializer::<ReadError>::new(key)).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ReadError> {
        let (key, value) = self.pending.take().ok_or_else(|| de::Error::custom("a value was read before its key"))?;
        seed.deserialize(Reader { value, query: self.query }).map_err(|e| e.under(Segment::Key(key.clone())))
    }
}

struct Items<'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
    query: bool,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, ReadError> {
        let Some(value) = self.items.next() else { return Ok(None) };
        let index = self.index;
        self.index += 1;
        seed.deserialize(Reader { value, query: self.query }).map(Some).map_err(|e| e.under(Segment::Index(index)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::wire::{Dac, Id, Named};
    use anchor_domain::declarations::dd::UnitType;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        unit: Named<UnitType>,
        chain: Option<Vec<String>>,
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        id: Id,
        inner: Inner,
        amount: Option<Dac>,
        quota: Option<i64>,
        exact: Option<serde_json::Number>,
    }

    fn error(value: Value) -> (&'static str, String) {
        read::<Outer>(&value).expect_err("refused").code_and_message()
    }

    const ID: &str = "00000000-0000-4000-8000-000000000000";

    #[test]
    fn a_number_keeps_its_text_and_sign() {
        for text in ["-0", "-0.0", "0", "1e+2", "123456789012345678901234567890", "-1.50"] {
            let value: Value = serde_json::from_str(&format!(r#"{{"id":"{ID}","inner":{{"unit":"single"}},"exact":{text}}}"#)).unwrap();
            assert_eq!(value["exact"].to_string(), text, "as parsed");
            let read = read::<Outer>(&value).unwrap();
            assert_eq!(read.exact.map(|n| n.to_string()).as_deref(), Some(text));
        }
    }

    #[test]
    fn every_mistake_has_its_code_and_path() {
        let ok = read::<Outer>(&json!({ "id": ID, "inner": { "unit": "single", "chain": null }, "quota": null })).unwrap();
        assert!(ok.inner.chain.is_none() && ok.quota.is_none());
        assert_eq!(error(json!({ "inner": { "unit": "single" } })), ("MISSING_FIELD", "id is required".into()));
        assert_eq!(error(json!({ "id": null, "inner": { "unit": "single" } })).0, "MISSING_FIELD");
        assert_eq!(error(json!({ "id": ID, "inner": {} })), ("MISSING_FIELD", "inner.unit is required".into()));
        assert_eq!(error(json!({ "id": "x", "inner": { "unit": "single" } })).0, "INVALID_UUID");
        assert_eq!(error(json!({ "id": 5, "inner": { "unit": "single" } })).0, "INVALID_UUID");
        let (code, message) = error(json!({ "id": ID, "inner": { "unit": "many" } }));
        assert_eq!(code, "INVALID_ENUM");
        assert!(message.starts_with("inner.unit must be one of single"), "{message}");
        assert_eq!(error(json!({ "id": ID, "inner": { "unit": 3 } })).0, "INVALID_ENUM");
        let (read, ignored) = read_reporting::<Outer>(&json!({ "id": ID, "inner": { "unit": "single", "zz": 1 }, "yy": null, "xx": [] }));
        assert!(read.is_ok());
        assert_eq!(ignored, ["zz", "xx"], "unknown keys are left out and named; a null one is absent");
        let (_, ignored) = read_reporting::<Outer>(&json!({ "id": ID, "inner": { "unit": "single" } }));
        assert!(ignored.is_empty(), "a read reports only its own keys: {ignored:?}");
        let many: serde_json::Map<String, Value> = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let mut body = json!({ "id": ID, "inner": { "unit": "single" } });
        body.as_object_mut().unwrap().extend(many);
        assert_eq!(read_reporting::<Outer>(&body).1.len(), IGNORED_MAX);
        let (code, message) = error(json!({ "id": ID, "inner": { "unit": "many", "zz": 1 } }));
        assert_eq!(code, "INVALID_ENUM", "{message}");
        assert_eq!(error(json!({ "id": ID, "inner": ["single"] })), ("INVALID_INPUT", "inner must be a JSON object".into()));
        assert_eq!(error(json!([ID])), ("INVALID_INPUT", "the request body must be a JSON object".into()));
        assert_eq!(error(json!(null)).0, "INVALID_INPUT");
        let (code, message) = error(json!({ "id": ID, "inner": { "unit": "single", "chain": ["a", 5] } }));
        assert_eq!(code, "INVALID_VALUE");
        assert!(message.starts_with("inner.chain[1] must be a string"), "{message}");
        assert_eq!(error(json!({ "id": ID, "inner": { "unit": "single" }, "quota": 1.5 })).0, "INVALID_VALUE");
        assert_eq!(error(json!({ "id": ID, "inner": { "unit": "single" }, "quota": "1" })).0, "INVALID_VALUE");
        assert_eq!(error(json!({ "id": ID, "inner": { "unit": "single" }, "amount": 0.0001 })).0, "INVALID_VALUE");
    }

    #[test]
    fn numbers_keep_their_text() {
        let value: Value = serde_json::from_str(&format!(
            r#"{{ "id": "{ID}", "inner": {{ "unit": "single" }}, "exact": 18446744073709551616.50, "amount": 157.5 }}"#
        ))
        .unwrap();
        let read = read::<Outer>(&value).unwrap();
        assert_eq!(read.exact.unwrap().to_string(), "18446744073709551616.50");
        assert_eq!(read.amount.unwrap().0.milli(), 157_500);
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Query {
        limit: Option<i64>,
        flag: Option<bool>,
        id: Option<Id>,
    }

    #[test]
    fn query_values_are_parsed_from_text() {
        let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let q: Query = read_query(pairs(&[("limit", "20"), ("flag", "true"), ("id", ID)])).unwrap();
        assert_eq!((q.limit, q.flag, q.id.map(|i| i.0.to_string())), (Some(20), Some(true), Some(ID.to_string())));
        let e = read_query::<Query>(pairs(&[("limit", "x")])).unwrap_err().code_and_message();
        assert_eq!(e.0, "INVALID_VALUE");
        assert!(e.1.starts_with("limit must be an integer"), "{}", e.1);
        let e = read_query::<Query>(pairs(&[("other", "1")])).unwrap_err().code_and_message();
        assert_eq!(e.0, "INVALID_VALUE");
        assert!(e.1.starts_with("unknown query parameter \"other\""), "{}", e.1);
    }
}
