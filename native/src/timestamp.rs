//! Strict RFC 3339 timestamps with a zone: `YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|±HH:MM)`, as UTC
//! microseconds. The contract's range ([`EARLIEST`, `LATEST`)) is applied by `contract.rs`, from
//! the generated contract.
//!
//! Hand-written rather than chrono's parser because the mirror must accept only forms the
//! pydantic contract accepts with the same value: chrono also takes a space separator, lowercase
//! letters, leap seconds and nanoseconds, which pydantic treats differently. Anything else is
//! left to the contract.

fn digits(s: &[u8]) -> Option<i64> {
    let mut value = 0i64;
    for c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(c - b'0');
    }
    Some(value)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Microseconds since the Unix epoch (UTC), or None when `s` is not in the strict form.
pub fn parse_utc_micros(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    // Years kept well inside Python's datetime range, so the offset never leaves it.
    if !(1000..=9998).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    if day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut micros = 0i64;
    if rest.first() == Some(&b'.') {
        let count = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if count == 0 || count > 6 {
            return None;
        }
        micros = digits(&rest[1..=count])? * 10i64.pow(6 - count as u32);
        rest = &rest[1 + count..];
    }
    let offset_minutes = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 60 + minutes;
            if *sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second
        - offset_minutes * 60;
    Some(seconds * 1_000_000 + micros)
}

#[cfg(test)]
mod tests {
    use super::parse_utc_micros;

    #[test]
    fn utc_and_offsets_give_the_same_instant() {
        let utc = parse_utc_micros("2026-11-30T10:00:00Z").unwrap();
        assert_eq!(utc, 1_796_032_800_000_000);
        assert_eq!(parse_utc_micros("2026-11-30T15:30:00+05:30"), Some(utc));
        assert_eq!(parse_utc_micros("2026-11-30T09:00:00-01:00"), Some(utc));
        assert_eq!(parse_utc_micros("2026-11-30T10:00:00.25Z"), Some(utc + 250_000));
        assert_eq!(parse_utc_micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc_micros("0999-01-01T00:00:00Z"), None); // outside the kept years
        assert_eq!(parse_utc_micros("2024-02-29T00:00:00Z"), Some(1_709_164_800_000_000));
    }

    #[test]
    fn offsets_may_cross_the_epoch_and_the_end_of_a_year() {
        assert_eq!(parse_utc_micros("1970-01-01T00:30:00+01:00"), Some(-1_800_000_000));
        assert_eq!(parse_utc_micros("2199-12-31T23:30:00-01:00"), Some(7_258_120_200_000_000));
        assert_eq!(parse_utc_micros("9998-12-31T23:59:59Z"), Some(253_370_764_799_000_000));
    }

    #[test]
    fn anything_outside_the_strict_form_is_left_to_the_contract() {
        for s in [
            "2026-11-30T10:00:00",
            "2026-11-30 10:00:00Z",
            "2026-11-30T10:00:00z",
            "2026-11-30T10:00:00.1234567Z",
            "2026-11-30T10:00:60Z",
            "2026-02-29T10:00:00Z",
            "2026-11-30T10:00:00+24:00",
            "2026-11-30T10:00:00.Z",
            "2026-11-30T10:00:00+0530",
        ] {
            assert_eq!(parse_utc_micros(s), None, "{s}");
        }
    }
}
