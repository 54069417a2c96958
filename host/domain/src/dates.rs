//! Dates and times as the service reads them: years 0000 to 9999 only, so
//! that every one it accepts can be written back as RFC 3339 (which has four
//! digits for the year) and every step from one (the next day, a window's
//! end) stays inside what chrono can represent. Past the bounds a date is
//! refused, never wrapped, clamped silently or left to panic.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};

/// The first instant the service reads: 0000-01-01T00:00:00Z.
pub fn earliest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).single().expect("year 0 is representable")
}

/// The last instant the service reads or writes: 9999-12-31T23:59:59.999999Z.
pub fn latest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).single().expect("year 9999 is representable") + Duration::microseconds(999_999)
}

/// Whether `at` is within [`earliest`] and [`latest`].
pub fn in_range(at: DateTime<Utc>) -> bool {
    (earliest()..=latest()).contains(&at)
}

/// A calendar date written `YYYY-MM-DD` with a four-digit year (no sign, no
/// more digits): `2026-07-10`.
pub fn parse_day(text: &str) -> Option<NaiveDate> {
    let bytes = text.as_bytes();
    let shaped = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes.iter().enumerate().all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !shaped {
        return None;
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// An RFC 3339 time with an offset, whose UTC instant is within the years
/// 0000 to 9999.
pub fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    if text.len() > 64 {
        return None;
    }
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&Utc)).filter(|t| in_range(*t))
}

/// The start of `day` (UTC midnight).
pub fn day_start(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// Where a whole `day` ends, exclusive: the next day's start, or, for the
/// last day there is (9999-12-31), the last instant.
pub fn day_end(day: NaiveDate) -> DateTime<Utc> {
    day.succ_opt().filter(|next| next.year() <= 9999).map_or_else(latest, day_start)
}

/// `at + by`, kept within [`earliest`] and [`latest`].
pub fn saturating_add(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    at.checked_add_signed(by).map_or_else(|| if by < Duration::zero() { earliest() } else { latest() }, |t| t.clamp(earliest(), latest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_have_four_digit_years_and_end_inside_the_range() {
        assert_eq!(parse_day("2026-07-10"), NaiveDate::from_ymd_opt(2026, 7, 10));
        assert_eq!(parse_day("0000-01-01"), NaiveDate::from_ymd_opt(0, 1, 1));
        for refused in ["+262142-12-31", "-0001-01-01", "10000-01-01", "2026-7-10", "2026-02-30", "２０２６-07-10", "2026-07-10\0", ""]
        {
            assert_eq!(parse_day(refused), None, "{refused:?}");
        }
        let last = parse_day("9999-12-31").unwrap();
        assert_eq!(day_end(last), latest());
        assert!(latest().to_rfc3339().starts_with("9999-12-31T23:59:59"));
    }

    #[test]
    fn instants_are_within_years_0000_to_9999() {
        assert!(parse_instant("2026-11-01T09:00:00Z").is_some());
        assert!(parse_instant("9999-12-31T23:59:59.999999Z").is_some());
        assert_eq!(parse_instant("9999-12-31T23:00:00-05:00"), None, "past 9999 in UTC");
        assert_eq!(parse_instant("+10000-01-01T00:00:00Z"), None);
        assert_eq!(parse_instant("2026-11-01"), None);
        assert_eq!(saturating_add(latest(), Duration::days(1)), latest());
        assert_eq!(saturating_add(earliest(), -Duration::days(1)), earliest());
    }
}
