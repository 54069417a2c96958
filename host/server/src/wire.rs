//! Values as the wire carries them, each with its schema: exact DAC amounts,
//! times, identifiers and the domain's closed vocabularies.
//!
//! Request and response bodies are structs built from these (and plain
//! strings, numbers and booleans); `/openapi.json` is generated from the same
//! types, so a body and its documented schema cannot drift apart.
//!
//! Reading goes through `body`, whose errors carry the API's
//! `error_code`s: a value that is not what its type wants reports itself with
//! [`refused`] and its code (`INVALID_UUID`, `INVALID_VALUE`, …).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

use anchor_domain::{MilliDac, WireEnum};

/// A refusal with its `error_code`, raised inside a `Deserialize` impl. The
/// body reader recognizes it and reports `code` with the field's path before
/// `message` ("must be a UUID; got …").
pub fn refused<E: de::Error>(code: &'static str, message: impl fmt::Display) -> E {
    E::custom(format_args!("{CODE_MARK}{code}{CODE_MARK}{message}"))
}

/// Separates a code from its message inside a serde error's text.
pub(crate) const CODE_MARK: char = '\u{1}';

/// The codes [`refused`] may carry.
const REFUSAL_CODES: &[&str] = &[
    "INVALID_VALUE",
    "INVALID_UUID",
    "INVALID_ENUM",
    "INVALID_INPUT",
    "MISSING_FIELD",
    "PII_DETECTED",
    "UNKNOWN_FIELD",
    "INVALID_ARA_CONNECTION",
];

/// Splits what [`refused`] wrote back into code and message; a code outside
/// [`REFUSAL_CODES`] reads as `INVALID_VALUE`.
pub(crate) fn coded(text: &str) -> Option<(&'static str, &str)> {
    let (code, message) = text.strip_prefix(CODE_MARK)?.split_once(CODE_MARK)?;
    Some((REFUSAL_CODES.iter().find(|c| **c == code).copied().unwrap_or("INVALID_VALUE"), message))
}

/// Gives a wire type its schema, always inlined where the type is used.
macro_rules! inline_schema {
    ($type:ident, $schema:tt) => {
        impl JsonSchema for $type {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                stringify!($type).into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

/// A DAC amount: an exact JSON number of DAC with at most three decimals
/// (`10`, `157.5`, `0.001`), never passed through a float either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dac(pub MilliDac);

impl From<MilliDac> for Dac {
    fn from(amount: MilliDac) -> Dac {
        Dac(amount)
    }
}

impl Serialize for Dac {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // serde_json's arbitrary_precision keeps the decimal text as written.
        let number: serde_json::Number = self.0.to_decimal_string().parse().map_err(serde::ser::Error::custom)?;
        number.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Dac {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Dac, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        let text = number.to_string();
        let bad = || refused("INVALID_VALUE", format_args!("must be a DAC amount of 0 or more with at most three decimals; got {text}"));
        let milli = fixed_point(&text, 3).and_then(|m| i64::try_from(m).ok()).ok_or_else(bad)?;
        Ok(Dac(MilliDac(milli)))
    }
}

inline_schema!(Dac, { "type": "number", "minimum": 0, "multipleOf": 0.001 });

/// A tool's price, as TSL register reads it: a [`Dac`] amount, where the
/// interface names every mistake (a negative or malformed number) 400
/// `INVALID_INPUT` rather than `INVALID_VALUE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolPrice(pub MilliDac);

impl<'de> Deserialize<'de> for ToolPrice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ToolPrice, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let refuse = || refused("INVALID_INPUT", format_args!("must be a DAC amount above 0 with at most three decimals; got {value}"));
        let serde_json::Value::Number(number) = &value else { return Err(refuse()) };
        let Ok(Dac(amount)) = serde_json::from_value::<Dac>(serde_json::Value::Number(number.clone())) else { return Err(refuse()) };
        Ok(ToolPrice(amount))
    }
}

inline_schema!(ToolPrice, { "type": "number", "minimum": 0, "exclusiveMinimum": true, "multipleOf": 0.001 });

/// A closed vocabulary read where the interface names an unknown value 400
/// `INVALID_INPUT` rather than `INVALID_ENUM` (a tool's layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputNamed<E>(pub E);

impl<'de, E: WireEnum> Deserialize<'de> for InputNamed<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<InputNamed<E>, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match value.as_str().and_then(E::parse) {
            Some(parsed) => Ok(InputNamed(parsed)),
            None => Err(refused("INVALID_INPUT", format_args!("must be one of {}; got {}", E::NAMES.join(", "), quoted(&value)))),
        }
    }
}

/// A value as a refusal quotes it: a string once, in quotes, at most 64
/// characters; anything else as its JSON text, as briefly.
pub(crate) fn quoted(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => anchor_domain::brief(text),
        serde_json::Value::Array(_) => "an array".into(),
        serde_json::Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}

/// A closed vocabulary read where the interface names an unknown value with
/// a code of its own: an ARA connection's `observation_type` outside the
/// list is 400 `INVALID_ARA_CONNECTION`, as an unpriced pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionNamed<E>(pub E);

impl<'de, E: WireEnum> Deserialize<'de> for ConnectionNamed<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ConnectionNamed<E>, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match value.as_str().and_then(E::parse) {
            Some(parsed) => Ok(ConnectionNamed(parsed)),
            None => Err(refused(
                "INVALID_ARA_CONNECTION",
                format_args!("is not an ARA observation a tool can connect to; one of {}; got {}", E::NAMES.join(", "), quoted(&value)),
            )),
        }
    }
}

impl<E: WireEnum> JsonSchema for ConnectionNamed<E> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        E::TYPE_NAME.into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Named::<E>::json_schema(generator)
    }
}

/// A key a route does not accept though another route does (a layer-2
/// purchase's `request_id`): refused 400 `UNKNOWN_FIELD`, so the client
/// learns it did not do what it meant, where any other unknown key is left
/// out (decision 0061). Not part of any schema.
#[derive(Debug)]
pub struct NotHere;

impl<'de> Deserialize<'de> for NotHere {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NotHere, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer)?;
        Err(refused("UNKNOWN_FIELD", "is not accepted on this route"))
    }
}

impl<E: WireEnum> JsonSchema for InputNamed<E> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        E::TYPE_NAME.into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Named::<E>::json_schema(generator)
    }
}

/// An amount that may be negative (a change between two periods), in DAC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignedDac(pub MilliDac);

impl Serialize for SignedDac {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Dac(self.0).serialize(serializer)
    }
}

inline_schema!(SignedDac, { "type": "number", "multipleOf": 0.001 });

/// An amount of USDC given in base units (six decimals), as an exact decimal
/// number of USDC (`10500` is `0.0105`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usdc(pub i64);

impl Serialize for Usdc {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = format!("{}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000);
        let text = text.trim_end_matches('0').trim_end_matches('.');
        let number: serde_json::Number = text.parse().map_err(serde::ser::Error::custom)?;
        number.serialize(serializer)
    }
}

inline_schema!(Usdc, { "type": "number", "minimum": 0 });

/// A ratio given in thousandths, as an exact decimal number (1500 is `1.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio(pub u32);

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Dac(MilliDac(i64::from(self.0))).serialize(serializer)
    }
}

inline_schema!(Ratio, { "type": "number", "minimum": 0 });

/// A JSON number's text (as serde_json's arbitrary_precision keeps it) as
/// a whole count of `10^-decimals`: `157.5` at 3 decimals is 157,500, and
/// so are `1.575e2` and `157500e-3` (a client's JSON encoder may write
/// either). `None` for a negative number, one with more decimals than
/// that, or one too large.
pub(crate) fn fixed_point(text: &str, decimals: u32) -> Option<u64> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        // No amount this service reads is 10^1000 or 10^-1000 away from its digits.
        Some((m, e)) => (m, e.strip_prefix('+').unwrap_or(e).parse::<i64>().ok().filter(|e| (-1000..=1000).contains(e))?),
        None => (text, 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{whole}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    // The digits times 10^shift is the count.
    let shift = i64::from(decimals) - frac.len() as i64 + exponent;
    let kept = if shift >= 0 {
        digits
    } else {
        let cut = usize::try_from(-shift).ok().filter(|cut| *cut <= digits.len())?;
        let (kept, dropped) = digits.split_at(digits.len() - cut);
        if !dropped.bytes().all(|b| b == b'0') {
            return None;
        }
        kept
    };
    if kept.len() > 20 {
        return None;
    }
    let value: u64 = if kept.is_empty() { 0 } else { kept.parse().ok()? };
    let shift = u32::try_from(shift.max(0)).ok().filter(|s| *s <= 20)?;
    value.checked_mul(10u64.checked_pow(shift)?)
}

/// A rate between 0 and 1, exact to six decimals, read from and written as a
/// JSON number (`0.25`) and held in parts per million, never a float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate(pub u32);

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let number: serde_json::Number = anchor_app::tsl::ppm_text(self.0).parse().map_err(serde::ser::Error::custom)?;
        number.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        let text = number.to_string();
        let bad = || refused("INVALID_VALUE", format_args!("must be a number from 0 to 1 with at most six decimals; got {text}"));
        let ppm = fixed_point(&text, 6).filter(|ppm| *ppm <= 1_000_000).ok_or_else(bad)?;
        Ok(Rate(ppm as u32))
    }
}

inline_schema!(Rate, { "type": "number", "minimum": 0, "maximum": 1 });

/// A point in time, RFC 3339 in UTC with microseconds (`2026-11-01T09:00:00.000000Z`).
/// Read: any RFC 3339 date-time with an offset, normalized to UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub DateTime<Utc>);

/// A point in time to the second (`2026-12-01T00:00:00Z`): period boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeSecs(pub DateTime<Utc>);

impl From<DateTime<Utc>> for Time {
    fn from(t: DateTime<Utc>) -> Time {
        Time(t)
    }
}

impl From<DateTime<Utc>> for TimeSecs {
    fn from(t: DateTime<Utc>) -> TimeSecs {
        TimeSecs(t)
    }
}

impl Time {
    pub fn text(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Micros, true)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl Serialize for TimeSecs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Time, D::Error> {
        struct TimeVisitor;
        impl Visitor<'_> for TimeVisitor {
            type Value = Time;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an ISO 8601 date-time with an offset (2026-01-01T00:00:00Z), in the years 0000 to 9999")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Time, E> {
                anchor_domain::dates::parse_instant(text).map(Time).ok_or_else(|| E::invalid_value(Unexpected::Str(text), &self))
            }
        }
        deserializer.deserialize_str(TimeVisitor)
    }
}

inline_schema!(Time, { "type": "string", "format": "date-time" });

inline_schema!(TimeSecs, { "type": "string", "format": "date-time" });

/// A UUID in a request: anything else is 400 `INVALID_UUID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id(pub Uuid);

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Id, D::Error> {
        struct IdVisitor;
        impl<'de> Visitor<'de> for IdVisitor {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a UUID")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Id, E> {
                Uuid::try_parse(text)
                    .map(Id)
                    .map_err(|_| refused("INVALID_UUID", format_args!("must be a UUID; got {}", anchor_domain::brief(text))))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Id, E> {
                Err(refused("INVALID_UUID", format_args!("must be a UUID; got {n}")))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Id, E> {
                Err(refused("INVALID_UUID", format_args!("must be a UUID; got {n}")))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Id, E> {
                Err(refused("INVALID_UUID", format_args!("must be a UUID; got {n}")))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Id, E> {
                Err(refused("INVALID_UUID", format_args!("must be a UUID; got {b}")))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Id, A::Error> {
                Err(refused("INVALID_UUID", "must be a UUID; got an object"))
            }
        }
        deserializer.deserialize_str(IdVisitor)
    }
}

inline_schema!(Id, { "type": "string", "format": "uuid" });

/// A value of one of the domain's closed vocabularies, by its wire name.
/// Anything else, a string or not, is 400 `INVALID_ENUM` naming the choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Named<E>(pub E);

impl<E: WireEnum> Serialize for Named<E> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de, E: WireEnum> Deserialize<'de> for Named<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Named<E>, D::Error> {
        deserializer.deserialize_str(NamedVisitor(PhantomData))
    }
}

struct NamedVisitor<E>(PhantomData<E>);

impl<E: WireEnum> NamedVisitor<E> {
    fn other<Er: de::Error>(shown: &str) -> Er {
        Er::unknown_variant(shown, E::NAMES)
    }
}

impl<'de, E: WireEnum> Visitor<'de> for NamedVisitor<E> {
    type Value = Named<E>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "one of {}", E::NAMES.join(", "))
    }
    fn visit_str<Er: de::Error>(self, text: &str) -> Result<Named<E>, Er> {
        E::parse(text).map(Named).ok_or_else(|| Self::other(&anchor_domain::brief(text)))
    }
    fn visit_bool<Er: de::Error>(self, b: bool) -> Result<Named<E>, Er> {
        Err(Self::other(&b.to_string()))
    }
    fn visit_i64<Er: de::Error>(self, n: i64) -> Result<Named<E>, Er> {
        Err(Self::other(&n.to_string()))
    }
    fn visit_u64<Er: de::Error>(self, n: u64) -> Result<Named<E>, Er> {
        Err(Self::other(&n.to_string()))
    }
    fn visit_f64<Er: de::Error>(self, n: f64) -> Result<Named<E>, Er> {
        Err(Self::other(&n.to_string()))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Named<E>, A::Error> {
        Err(Self::other("an array"))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Named<E>, A::Error> {
        Err(Self::other("an object"))
    }
}

impl<E: WireEnum> JsonSchema for Named<E> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        E::TYPE_NAME.into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "enum": E::NAMES })
    }
}

impl<E: WireEnum> From<E> for Named<E> {
    fn from(value: E) -> Named<E> {
        Named(value)
    }
}

/// A string schema listing `names`, for `#[schemars(schema_with = …)]` on
/// string fields whose values come from a fixed list kept elsewhere.
pub fn one_of(names: &[&str]) -> Schema {
    json_schema!({ "type": "string", "enum": names })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_exponent_form_are_read_exactly() {
        // What Python's json.dumps writes for 0.000001 and 1e-05, and other encoders for large values.
        for (text, ppm) in [("1e-06", 1), ("1E-5", 10), ("2.5e-1", 250_000), ("1e0", 1_000_000), ("0e5", 0), ("100e-2", 1_000_000)] {
            assert_eq!(serde_json::from_str::<Rate>(text).unwrap(), Rate(ppm), "{text}");
        }
        for (text, milli) in [("1.575e2", 157_500), ("157500e-3", 157_500), ("1e+3", 1_000_000), ("5E-3", 5), ("0.0", 0)] {
            assert_eq!(serde_json::from_str::<Dac>(text).unwrap(), Dac(MilliDac(milli)), "{text}");
        }
        // Too many decimals, negative, past the type or the rate's 1, whatever the form.
        for text in ["1e-7", "1.0000001", "-1e-6", "1.000001", "1e1", "1e400", "1e-400"] {
            assert!(serde_json::from_str::<Rate>(text).is_err(), "{text}");
        }
        for text in [
            "1e-4",
            "0.0001",
            "-0",
            "-1e3",
            "1e16",
            "9223372036854775.808",
            "1e99999999999999999999",
            "1e9223372036854775807",
            "1.5e-9223372036854775808",
        ] {
            assert!(serde_json::from_str::<Dac>(text).is_err(), "{text}");
        }
        assert_eq!(fixed_point("9223372036854775.807", 3), Some(i64::MAX as u64));
    }

    #[test]
    fn dac_amounts_are_exact_both_ways() {
        for (milli, text) in [(10_000, "10"), (157_500, "157.5"), (1, "0.001"), (0, "0")] {
            assert_eq!(serde_json::to_string(&Dac(MilliDac(milli))).unwrap(), text);
            let read: Dac = serde_json::from_str(text).unwrap();
            assert_eq!(read, Dac(MilliDac(milli)));
        }
        assert_eq!(serde_json::to_string(&SignedDac(MilliDac(-2_500))).unwrap(), "-2.5");
        assert_eq!(serde_json::to_string(&Usdc(10_500)).unwrap(), "0.0105");
        assert_eq!(serde_json::to_string(&Usdc(2_000_000)).unwrap(), "2");
        assert_eq!(serde_json::to_string(&Ratio(1_500)).unwrap(), "1.5");
        for bad in ["0.0001", "-1", "\"10\""] {
            assert!(serde_json::from_str::<Dac>(bad).is_err(), "{bad} was read");
        }
    }

    #[test]
    fn times_are_utc_with_their_precision() {
        let t = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 1, 0, 0, 0).unwrap();
        assert_eq!(serde_json::to_string(&Time(t)).unwrap(), "\"2026-12-01T00:00:00.000000Z\"");
        assert_eq!(serde_json::to_string(&TimeSecs(t)).unwrap(), "\"2026-12-01T00:00:00Z\"");
        let read: Time = serde_json::from_str("\"2026-12-01T09:00:00+09:00\"").unwrap();
        assert_eq!(read, Time(t));
    }
}
