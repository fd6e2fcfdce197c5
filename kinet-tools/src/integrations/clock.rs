//! Calendar dates and unix seconds at a fixed UTC offset, for APIs that
//! speak unix time to people who speak dates.

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

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
    let year: i64 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    if parts.next().is_some()
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
    {
        return None;
    }
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
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(local - i64::from(offset_minutes) * 60)
}

/// `YYYY-MM-DD HH:MM` of unix seconds at `offset_minutes` east of UTC.
pub(crate) fn format_time(unix: i64, offset_minutes: i32) -> String {
    let local = unix + i64::from(offset_minutes) * 60;
    let (year, month, day) = civil_from_days(local.div_euclid(86_400));
    let seconds = local.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60
    )
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
