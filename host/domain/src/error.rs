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

/// How many characters of a client's input a message quotes.
pub const BRIEF_CHARS: usize = 64;

/// Quotes a client's input for an error message: at most [`BRIEF_CHARS`]
/// characters, with control characters escaped, and the full length named when
/// it was cut. Messages never echo a whole input, however large.
pub fn brief(text: &str) -> String {
    let total = text.chars().count();
    if total <= BRIEF_CHARS {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(BRIEF_CHARS).collect();
    format!("{head:?}… ({total} characters)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brief_quotes_short_input_and_cuts_long_input() {
        assert_eq!(brief("30x"), "\"30x\"");
        assert_eq!(brief("a\u{0}b"), "\"a\\0b\"");
        let long = "é".repeat(10_000);
        let quoted = brief(&long);
        assert!(quoted.chars().count() < BRIEF_CHARS + 30, "{quoted}");
        assert!(quoted.ends_with("(10000 characters)"), "{quoted}");
    }
}
