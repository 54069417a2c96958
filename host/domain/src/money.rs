//! DAC amounts as exact integers of milli-DAC.
//!
//! 1 DAC = 1000 milli-DAC = 1000 USDC base units (USDC has 6 decimals), so the
//! smallest DAC amount the service handles, 0.001 DAC, is one USDC base unit.

use std::fmt;
use std::ops::{Add, Sub};

/// An amount of DAC in thousandths. Never a float.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct MilliDac(pub i64);

impl MilliDac {
    pub const ZERO: MilliDac = MilliDac(0);

    pub const fn from_dac(dac: i64) -> MilliDac {
        MilliDac(dac * 1000)
    }

    pub const fn milli(self) -> i64 {
        self.0
    }

    /// The same amount in USDC base units (six decimals).
    pub const fn usdc_base_units(self) -> i64 {
        self.0
    }

    /// The amount as a decimal string of DAC with no trailing zeros: `157.5`, `10`, `0.001`.
    pub fn to_decimal_string(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let (whole, frac) = (abs / 1000, abs % 1000);
        if frac == 0 {
            format!("{sign}{whole}")
        } else {
            let digits = format!("{frac:03}");
            format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
        }
    }

    /// Reads a non-negative decimal of DAC with at most three decimals
    /// (`10`, `157.5`, `0.001`); `None` for anything else.
    pub fn parse_decimal(text: &str) -> Option<MilliDac> {
        let text = text.trim();
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || (!frac.is_empty() && !digits(frac)) || frac.len() > 3 || text.ends_with('.') {
            return None;
        }
        let whole: i64 = whole.parse().ok()?;
        let frac: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<3}").parse().ok()? };
        whole.checked_mul(1000)?.checked_add(frac).map(MilliDac)
    }

    /// The amount as a JSON number of DAC.
    ///
    /// The number is parsed from [`Self::to_decimal_string`], so JSON carries the
    /// shortest decimal that reads back to the same amount; no arithmetic is done
    /// in floating point.
    pub fn to_json_number(self) -> serde_json::Value {
        let text = self.to_decimal_string();
        match text.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            Some(n) if self.0 % 1000 != 0 => serde_json::Value::Number(n),
            _ => serde_json::Value::from(self.0 / 1000),
        }
    }
}

impl fmt::Display for MilliDac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_decimal_string())
    }
}

impl Add for MilliDac {
    type Output = MilliDac;
    fn add(self, rhs: MilliDac) -> MilliDac {
        MilliDac(self.0 + rhs.0)
    }
}

impl Sub for MilliDac {
    type Output = MilliDac;
    fn sub(self, rhs: MilliDac) -> MilliDac {
        MilliDac(self.0 - rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_strings_are_exact() {
        assert_eq!(MilliDac(157_500).to_decimal_string(), "157.5");
        assert_eq!(MilliDac(10_000).to_decimal_string(), "10");
        assert_eq!(MilliDac(1).to_decimal_string(), "0.001");
        assert_eq!(MilliDac(-2_050).to_decimal_string(), "-2.05");
    }

    #[test]
    fn json_numbers_read_back_to_the_same_decimal() {
        assert_eq!(MilliDac(157_500).to_json_number().to_string(), "157.5");
        assert_eq!(MilliDac(490_000).to_json_number().to_string(), "490");
        assert_eq!(MilliDac(123_456_789).to_json_number().to_string(), "123456.789");
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn decimals_of_dac_are_read_exactly() {
        assert_eq!(MilliDac::parse_decimal("157.5"), Some(MilliDac(157_500)));
        assert_eq!(MilliDac::parse_decimal("10"), Some(MilliDac(10_000)));
        assert_eq!(MilliDac::parse_decimal("0.001"), Some(MilliDac(1)));
        for bad in ["", "-1", "1.0001", "1e3", "1.", ".5", "ten", "99999999999999999999"] {
            assert_eq!(MilliDac::parse_decimal(bad), None, "{bad}");
        }
    }
}
