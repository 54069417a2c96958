//! The one error the domain returns for bad input: a documented code and a sentence.

use std::fmt;

/// Input the rules refuse. `code` is the API's `error_code` (UPPER_SNAKE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub code: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(code: &'static str, message: impl Into<String>) -> Invalid {
        Invalid { code, message: message.into() }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Invalid {}
