//! Avro's binary primitives: zig-zag varints, length-prefixed bytes, array and map blocks.

use super::FitError;

pub(super) fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], FitError> {
    if r.len() < n {
        return Err(FitError::new(format!(
            "the record ends early ({n} bytes needed, {} left)",
            r.len()
        )));
    }
    let (a, b) = r.split_at(n);
    *r = b;
    Ok(a)
}

pub(super) fn long(r: &mut &[u8]) -> Result<i64, FitError> {
    let mut v: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *r
            .first()
            .ok_or_else(|| FitError::new("the record ends inside a number"))?;
        *r = &r[1..];
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
        }
    }
    Err(FitError::new("a number longer than 10 bytes"))
}

pub(super) fn bytes<'a>(r: &mut &'a [u8]) -> Result<&'a [u8], FitError> {
    let n = long(r)?;
    let n = usize::try_from(n).map_err(|_| FitError::new(format!("negative length {n}")))?;
    take(r, n)
}

/// Array and map blocks: a count (negative: then a byte size), items, until a zero count.
pub(super) fn blocks(
    r: &mut &[u8],
    mut item: impl FnMut(&mut &[u8]) -> Result<(), FitError>,
) -> Result<(), FitError> {
    loop {
        let mut n = long(r)?;
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            n = n
                .checked_neg()
                .ok_or_else(|| FitError::new("bad block count"))?;
            long(r)?;
        }
        if n as u64 > r.len() as u64 * 8 + 8 {
            return Err(FitError::new(format!(
                "a block of {n} items in {} bytes",
                r.len()
            )));
        }
        for _ in 0..n {
            item(r)?;
        }
    }
}

pub(super) fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}
