//! Reading request bodies field by field, so every mistake gets its documented
//! code: `UNKNOWN_FIELD`, `MISSING_FIELD`, `INVALID_ENUM`, `INVALID_UUID`,
//! `INVALID_VALUE`. An explicit `null` counts as absent.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::ApiError;

/// One JSON object being read, with its path for messages (`dd`, `ee`, …).
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// A client's JSON value as a message quotes it: never more than a short prefix.
pub fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= anchor_domain::error::BRIEF_CHARS { text } else { anchor_domain::brief(&text) }
}

impl<'a> Obj<'a> {
    /// Reads `value` as an object whose keys must all be in `allowed`.
    pub fn new(value: &'a Value, path: &str, allowed: &[&str]) -> Result<Obj<'a>, ApiError> {
        let Value::Object(map) = value else {
            let what = if path.is_empty() { "the request body".to_string() } else { path.to_string() };
            return Err(ApiError::bad("INVALID_INPUT", format!("{what} must be a JSON object")));
        };
        if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::bad(
                "UNKNOWN_FIELD",
                format!("unknown field {}; accepted fields here: {}", anchor_domain::brief(&join(path, unknown)), allowed.join(", ")),
            ));
        }
        Ok(Obj { map, path: path.to_string() })
    }

    /// Reads `value` as an object and ignores keys outside `allowed`.
    pub fn lenient(value: &'a Value, path: &str) -> Result<Obj<'a>, ApiError> {
        let Value::Object(map) = value else {
            return Err(ApiError::bad("INVALID_INPUT", format!("{path} must be a JSON object")));
        };
        Ok(Obj { map, path: path.to_string() })
    }

    pub fn path_of(&self, name: &str) -> String {
        join(&self.path, name)
    }

    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn missing(&self, name: &str) -> ApiError {
        ApiError::bad("MISSING_FIELD", format!("{} is required", self.path_of(name)))
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::bad("INVALID_VALUE", format!("{} must be a string", self.path_of(name)))),
        }
    }

    pub fn req_str(&self, name: &str) -> Result<&'a str, ApiError> {
        self.opt_str(name)?.ok_or_else(|| self.missing(name))
    }

    pub fn opt_enum<T>(&self, name: &str, parse: fn(&str) -> Option<T>, names: &[&str]) -> Result<Option<T>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        value.as_str().and_then(parse).map(Some).ok_or_else(|| {
            ApiError::bad("INVALID_ENUM", format!("{} must be one of {}; got {}", self.path_of(name), names.join(", "), shown(value)))
        })
    }

    pub fn req_enum<T>(&self, name: &str, parse: fn(&str) -> Option<T>, names: &[&str]) -> Result<T, ApiError> {
        self.opt_enum(name, parse, names)?.ok_or_else(|| self.missing(name))
    }

    pub fn opt_uuid(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        value
            .as_str()
            .and_then(|s| Uuid::try_parse(s).ok())
            .map(Some)
            .ok_or_else(|| ApiError::bad("INVALID_UUID", format!("{} must be a UUID; got {}", self.path_of(name), shown(value))))
    }

    pub fn req_uuid(&self, name: &str) -> Result<Uuid, ApiError> {
        self.opt_uuid(name)?.ok_or_else(|| self.missing(name))
    }

    /// An RFC 3339 timestamp with an offset, normalized to UTC.
    pub fn opt_datetime(&self, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        value.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| Some(t.with_timezone(&Utc))).ok_or_else(|| {
            ApiError::bad(
                "INVALID_VALUE",
                format!("{} must be an ISO 8601 date-time with an offset (2026-01-01T00:00:00Z); got {}", self.path_of(name), shown(value)),
            )
        })
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        value
            .as_bool()
            .map(Some)
            .ok_or_else(|| ApiError::bad("INVALID_VALUE", format!("{} must be true or false; got {}", self.path_of(name), shown(value))))
    }

    /// A DAC amount as a JSON number with at most three decimals, read exactly
    /// from its decimal text (never through a float).
    pub fn opt_dac(&self, name: &str) -> Result<Option<anchor_domain::MilliDac>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        let bad = || {
            ApiError::bad(
                "INVALID_VALUE",
                format!("{} must be a DAC amount with at most three decimals; got {}", self.path_of(name), shown(value)),
            )
        };
        let Value::Number(number) = value else { return Err(bad()) };
        let text = number.to_string();
        let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
        if whole.starts_with('-') || frac.len() > 3 || text.contains(['e', 'E']) {
            return Err(bad());
        }
        let whole: i64 = whole.parse().map_err(|_| bad())?;
        let frac: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<3}").parse().map_err(|_| bad())? };
        whole.checked_mul(1000).and_then(|w| w.checked_add(frac)).map(|m| Some(anchor_domain::MilliDac(m))).ok_or_else(bad)
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        let Some(value) = self.get(name) else { return Ok(None) };
        value
            .as_i64()
            .map(Some)
            .ok_or_else(|| ApiError::bad("INVALID_VALUE", format!("{} must be an integer; got {}", self.path_of(name), shown(value))))
    }
}

/// Parses an RFC 3339 query parameter.
pub fn query_datetime(name: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .map(|s| {
            DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).map_err(|_| {
                ApiError::bad(
                    "INVALID_VALUE",
                    format!("{name} must be an ISO 8601 date-time with an offset; got {}", anchor_domain::brief(s)),
                )
            })
        })
        .transpose()
}

/// Parses a UUID path parameter.
pub fn path_uuid(name: &str, value: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(value).map_err(|_| ApiError::bad("INVALID_UUID", format!("{name} must be a UUID; got {}", anchor_domain::brief(value))))
}
