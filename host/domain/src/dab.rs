//! The DAB (Decision Anchor Budget) calendar: an agent's external spending is
//! capped per calendar month, in UTC.

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};

/// The budget period containing `now`: its start and the moment it resets.
pub fn period(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let start = Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0).single().unwrap_or(now);
    let end = start.checked_add_months(Months::new(1)).unwrap_or(start);
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_the_calendar_month_in_utc() {
        let (start, end) = period(Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap());
        assert_eq!(start, Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        assert_eq!(end, Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
        let (start, end) = period(Utc.with_ymd_and_hms(2028, 2, 1, 0, 0, 0).unwrap());
        assert_eq!((start.day(), end.month()), (1, 3));
    }
}
