//! Logical types: decimals (big-endian two's complement ↔ exact decimal text), dates, times
//! and timestamps (days and units since the epoch ↔ RFC 3339).

use super::binary::put_bytes;
use super::{FitError, Unit};
use crate::schema::json::Json;

/// A big-endian two's complement integer of up to 16 bytes.
pub(super) fn be_signed(b: &[u8]) -> Result<i128, FitError> {
    if b.len() > 16 {
        // Leading sign bytes are allowed (a fixed wider than the value needs).
        let (head, tail) = b.split_at(b.len() - 16);
        let sign = if b.first().is_some_and(|x| x & 0x80 != 0) {
            0xff
        } else {
            0
        };
        if head.iter().any(|&x| x != sign) {
            return Err(FitError::new("a decimal over 38 digits"));
        }
        return be_signed(tail);
    }
    if b.is_empty() {
        return Ok(0);
    }
    let mut full = if b[0] & 0x80 != 0 {
        [0xffu8; 16]
    } else {
        [0u8; 16]
    };
    full[16 - b.len()..].copy_from_slice(b);
    Ok(i128::from_be_bytes(full))
}

/// The shortest big-endian two's complement of `v` (what a `decimal` on `bytes` holds).
pub(super) fn put_minimal_be(out: &mut Vec<u8>, v: i128) {
    let b = v.to_be_bytes();
    let sign = if v < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 15 && b[start] == sign && (b[start + 1] & 0x80 != 0) == (v < 0) {
        start += 1;
    }
    put_bytes(out, &b[start..]);
}

pub(super) fn decimal_text(out: &mut Vec<u8>, unscaled: i128, scale: u32) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(unscaled.unsigned_abs());
    if unscaled < 0 {
        out.push(b'-');
    }
    let scale = scale as usize;
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
    } else if digits.len() > scale {
        let (i, f) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(i.as_bytes());
        out.push(b'.');
        out.extend_from_slice(f.as_bytes());
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
        out.extend_from_slice(digits.as_bytes());
    }
}

/// A decimal from text or a JSON number: the unscaled integer at `scale`. More fraction
/// digits than the scale is an error (never rounded).
pub(super) fn decimal_of(v: &Json<'_>, scale: u32) -> Result<i128, FitError> {
    let number;
    let text: &str = match v {
        Json::Str(s) => s,
        // A float's own digits where it has them (never the double, which may have rounded
        // them); an integer's, or (a tree too deep for the scanner) the double's shortest form.
        Json::Float(_, Some(text)) => text,
        Json::Int(_) | Json::Uint(_) | Json::Float(_, None) => {
            number = v.to_string();
            &number
        }
        _ => {
            return Err(FitError::new(format!(
                "expected a decimal, got {}",
                v.kind()
            )))
        }
    };
    decimal_from(text, scale)
}

/// [`decimal_of`] text: digits with an optional point and an optional exponent (`1.5e2`, as a
/// JSON number or Java's `BigDecimal` may write it), read exactly. Fraction digits beyond the
/// scale are taken only when they are zeros (`1.50` at scale 1): a value is never rounded.
pub(super) fn decimal_from(text: &str, scale: u32) -> Result<i128, FitError> {
    let bad = || {
        FitError::new(format!(
            "`{text}` is not a decimal with at most {scale} fraction digits"
        ))
    };
    let (neg, t) = match text.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        all => (false, all),
    };
    let (mantissa, exponent) = match t.iter().position(|&c| c == b'e' || c == b'E') {
        Some(at) => {
            let e = std::str::from_utf8(&t[at + 1..])
                .ok()
                .and_then(|e| e.parse::<i64>().ok())
                .ok_or_else(bad)?;
            (&t[..at], e)
        }
        None => (t, 0),
    };
    // The digits of the integer part and the fraction as one number (significant digits
    // only: leading zeros are not counted), and how many of them are after the point.
    let mut digits: Vec<u8> = Vec::with_capacity(mantissa.len());
    let mut fraction: Option<i64> = None;
    for &c in mantissa {
        match c {
            b'0'..=b'9' => {
                digits.push(c - b'0');
                if let Some(f) = &mut fraction {
                    *f += 1;
                }
            }
            b'.' if fraction.is_none() => fraction = Some(0),
            _ => return Err(bad()),
        }
    }
    if digits.is_empty() {
        return Err(bad());
    }
    // Places after the point once the exponent moves it; trailing zeros past the scale go.
    let mut places = fraction.unwrap_or(0).saturating_sub(exponent);
    while places > i64::from(scale) && digits.last() == Some(&0) {
        digits.pop();
        places -= 1;
    }
    if digits.is_empty() {
        return Ok(0);
    }
    if places > i64::from(scale) {
        return Err(bad());
    }
    let too_long = || FitError::new(format!("`{text}` has more than 38 digits"));
    let zeros = i64::from(scale) - places;
    let first = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
    if (digits.len() - first) as i64 + zeros > 38 {
        return Err(if digits[first..].is_empty() {
            bad()
        } else {
            too_long()
        });
    }
    let mut n = 0i128;
    for &d in &digits[first..] {
        n = n * 10 + i128::from(d);
    }
    for _ in 0..zeros {
        n *= 10;
    }
    if n >= 10i128.pow(38) {
        return Err(too_long());
    }
    Ok(if neg { -n } else { n })
}

/// Whole seconds and the nanoseconds within them (floor division).
pub(super) fn split_units(v: i64, unit: Unit) -> (i64, i64) {
    let per = match unit {
        Unit::Millis => 1_000,
        Unit::Micros => 1_000_000,
        Unit::Nanos => 1_000_000_000,
    };
    let secs = v.div_euclid(per);
    let frac = v.rem_euclid(per) * (1_000_000_000 / per);
    (secs, frac)
}

/// Seconds and nanoseconds as the schema's unit; finer than the unit is refused (never
/// rounded), and so is a time the unit's 64 bits cannot hold.
pub(super) fn in_units(secs: i64, nanos: i64, unit: Unit, text: &str) -> Result<i64, FitError> {
    let (per_sec, per) = match unit {
        Unit::Millis => (1_000, 1_000_000),
        Unit::Micros => (1_000_000, 1_000),
        Unit::Nanos => (1_000_000_000, 1),
    };
    if nanos % per != 0 {
        return Err(FitError::new(format!(
            "`{text}` is finer than the schema's {}",
            match unit {
                Unit::Millis => "milliseconds",
                Unit::Micros => "microseconds",
                Unit::Nanos => "nanoseconds",
            }
        )));
    }
    secs.checked_mul(per_sec)
        .and_then(|v| v.checked_add(nanos / per))
        .ok_or_else(|| FitError::new(format!("`{text}` is out of the schema's range")))
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; H. Hinnant's algorithm).
pub(super) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of days since 1970-01-01.
pub(super) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DD`; false (nothing written) outside the years 0-9999.
pub(super) fn write_date(out: &mut Vec<u8>, days: i64) -> bool {
    if !(-719_528..=2_932_896).contains(&days) {
        return false;
    }
    let (y, m, d) = civil_from_days(days);
    let mut date = *b"0000-00-00";
    date[0..4].copy_from_slice(&digits::<4>(y));
    date[5..7].copy_from_slice(&digits::<2>(m));
    date[8..10].copy_from_slice(&digits::<2>(d));
    out.extend_from_slice(&date);
    true
}

/// `v` (non-negative, under 10^W) in exactly `W` decimal digits, two at a time.
pub(super) fn digits<const W: usize>(mut v: i64) -> [u8; W] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut text = [b'0'; W];
    let mut i = W;
    while i >= 2 {
        let pair = (v % 100) as usize * 2;
        text[i - 2..i].copy_from_slice(&PAIRS[pair..pair + 2]);
        v /= 100;
        i -= 2;
    }
    if i == 1 {
        text[0] = b'0' + (v % 10) as u8;
    }
    text
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]` with `Z` (or nothing, for a local timestamp), the form
/// the decoder writes, without a general parser: seconds since the epoch and nanoseconds.
/// Anything else (an offset, a leap second) is `None`, for the general parser.
pub(super) fn fast_timestamp(s: &str, local: bool) -> Option<(i64, i64)> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        b[r].iter().try_fold(0i64, |a, &c| {
            c.is_ascii_digit().then(|| a * 10 + i64::from(c - b'0'))
        })
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > month_days[mo as usize - 1]
        || h > 23
        || mi > 59
        || se > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n = i - start;
        if n == 0 || n > 9 {
            return None;
        }
        nanos = num(start..i)? * 10i64.pow(9 - n as u32);
    }
    match (&b[i..], local) {
        (b"Z", false) | (b"", true) => {}
        _ => return None,
    }
    Some((
        days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se,
        nanos,
    ))
}
