//! Time as orch stores it: whole seconds since the Unix epoch (`Ts`), rendered as RFC 3339 UTC.
//! Pure: the clock is read once per command by the caller and passed in as `now`.

/// Seconds since the Unix epoch, UTC.
pub type Ts = i64;

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `2026-11-30T07:13:39Z`
pub fn rfc3339(ts: Ts) -> String {
    let days = ts.div_euclid(86_400);
    let secs = ts.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// A short human duration: `42s`, `5m`, `3h12m`, `2d4h`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of `civil_from_days`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A `--since` value: a window back from `now` (`30m`, `24h`, `7d`) or a UTC date
/// (`2026-01-31`, midnight).
pub fn parse_since(s: &str, now: Ts) -> Result<Ts, String> {
    let bad = || format!("`{s}` is not a window (`30m`, `24h`, `7d`) or a date (`2026-01-31`)");
    let t = s.trim();
    if let Some((num, unit)) = t
        .char_indices()
        .last()
        .map(|(i, c)| (&t[..i], c))
        .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        let n: i64 = num.parse().map_err(|_| bad())?;
        let per = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        return n.checked_mul(per).map(|w| now - w).ok_or_else(bad);
    }
    let parts: Vec<&str> = t.split('-').collect();
    if let [y, m, d] = parts[..]
        && y.len() == 4
        && m.len() == 2
        && d.len() == 2
    {
        let (y, m, d) = (
            y.parse::<i64>().map_err(|_| bad())?,
            m.parse::<u32>().map_err(|_| bad())?,
            d.parse::<u32>().map_err(|_| bad())?,
        );
        if (1..=12).contains(&m) && (1..=31).contains(&d) {
            return Ok(days_from_civil(y, m, d) * 86_400);
        }
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_window_or_a_date() {
        assert_eq!(parse_since("24h", 100_000), Ok(100_000 - 86_400));
        assert_eq!(parse_since("30m", 10_000), Ok(10_000 - 1800));
        assert_eq!(parse_since("7d", 0), Ok(-7 * 86_400));
        assert_eq!(parse_since("2000-02-29", 0), Ok(951_782_400));
        assert_eq!(parse_since("1970-01-01", 5), Ok(0));
        for bad in ["", "h", "24", "24x", "-1d", "2026-13-01", "yesterday"] {
            assert!(parse_since(bad, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_022_819), "2026-11-30T07:13:39Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(-5), "0s");
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(61), "1m");
        assert_eq!(human_duration(3 * 3600 + 720), "3h12m");
        assert_eq!(human_duration(2 * 86_400 + 4 * 3600), "2d4h");
    }
}
