//! DD (Decision Declaration) and EE (accountability scope): the vocabulary an
//! agent declares with, and the rules a declaration must satisfy.
//!
//! Only metadata lives here. There is no field for what was decided, and the
//! template's dimensions are closed enums or short tokens.

pub mod dd;
pub mod ee;
pub mod template;

/// Defines a closed string enum: its wire names, parsing and listing.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub const NAMES: &'static [&'static str] = &[$($wire),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }

            pub fn parse(text: &str) -> Option<$name> {
                match text { $($wire => Some($name::$variant),)+ _ => None }
            }
        }

        impl $crate::WireEnum for $name {
            const TYPE_NAME: &'static str = stringify!($name);
            const NAMES: &'static [&'static str] = &[$($wire),+];
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn parse(text: &str) -> Option<$name> {
                $name::parse(text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
                $name::parse(&text).ok_or_else(|| serde::de::Error::unknown_variant(&text, $name::NAMES))
            }
        }
    };
}
pub(crate) use wire_enum;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::MilliDac;

/// Everything the service keeps about one declaration, apart from payment state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Declaration {
    pub dd_id: Uuid,
    pub ee_id: Uuid,
    pub agent_id: Uuid,
    pub dd: dd::DdFields,
    pub ee: ee::EeFields,
    pub content_inclusion: bool,
    pub template: Option<template::Template>,
    /// When the service received and fixed the declaration.
    pub anchored_at: DateTime<Utc>,
    /// The lineage group: the root declaration's id.
    pub lineage_group_id: Uuid,
    pub pricing_version: String,
    pub pricing_sha256: String,
    pub dac_amount: MilliDac,
    /// Private to the declaring agent; keeps enum-only records from being guessed
    /// back from their hash.
    pub salt: [u8; 32],
    /// When the agent sent its trace context: the key that, with the trace
    /// id, gives `salt` ([`crate::trace`]). Not part of the hashed record;
    /// the salt it gives is.
    pub trace_key: Option<[u8; 32]>,
}
