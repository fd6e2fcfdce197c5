//! Calendar dates and unix seconds at a fixed UTC offset, for APIs that
//! speak unix time to people who speak dates (the calendar is the `time`
//! crate's).

use time::{Date, Month, OffsetDateTime};

/// Unix seconds of `YYYY-MM-DD`, `YYYY-MM-DD HH:MM` or `YYYY-MM-DD
/// HH:MM:SS` (a `T` may separate date and time) at `offset_minutes` east of
/// UTC, or of a plain number of unix seconds.
pub(crate) fn parse_time(text: &str, offset_minutes: i32) -> Option<i64> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let (date, time) = match text.split_once([' ', 'T']) {
        Some((date, time)) => (date, Some(time.trim())),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u8 = parts.next()?.parse().ok()?;
    let day: u8 = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    let date = Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()?;
    let (mut hour, mut minute, mut second) = (0i64, 0i64, 0i64);
    if let Some(time) = time {
        let mut fields = time.split(':');
        hour = fields.next()?.parse().ok()?;
        minute = fields.next()?.parse().ok()?;
        second = match fields.next() {
            Some(s) => s.parse().ok()?,
            None => 0,
        };
        if fields.next().is_some() || hour > 23 || minute > 59 || second > 59 {
            return None;
        }
    }
    let local = date.midnight().assume_utc().unix_timestamp() + hour * 3600 + minute * 60 + second;
    Some(local - i64::from(offset_minutes) * 60)
}

/// `YYYY-MM-DD HH:MM` of unix seconds at `offset_minutes` east of UTC.
pub(crate) fn format_time(unix: i64, offset_minutes: i32) -> String {
    let local = unix + i64::from(offset_minutes) * 60;
    match OffsetDateTime::from_unix_timestamp(local) {
        Ok(at) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute()
        ),
        // Past the years a calendar date is kept for (±9999).
        Err(_) => format!("{unix} (unix seconds)"),
    }
}

/// `UTC+08:00`.
pub(crate) fn format_offset(offset_minutes: i32) -> String {
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let minutes = offset_minutes.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_at_an_offset() {
        // 2023-11-17 10:20 at UTC+8 is 02:20 UTC.
        let t = parse_time("2023-11-17 10:20", 480).unwrap();
        assert_eq!(t, 1_700_187_600);
        assert_eq!(format_time(t, 480), "2023-11-17 10:20");
        assert_eq!(parse_time("1700187600", 480), Some(1_700_187_600));
        assert_eq!(parse_time("2024-02-29", 0), Some(1_709_164_800));
        assert_eq!(parse_time("2023-02-29", 0), None);
        assert_eq!(parse_time("2023-13-01", 0), None);
        assert_eq!(parse_time("2023-01-01 24:00", 0), None);
        assert_eq!(parse_time("yesterday", 0), None);
        assert_eq!(format_time(0, 0), "1970-01-01 00:00");
        assert_eq!(format_time(-1, 0), "1969-12-31 23:59");
        assert_eq!(format_offset(480), "UTC+08:00");
        assert_eq!(format_offset(-210), "UTC-03:30");
    }
}
