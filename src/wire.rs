//! Protocol-buffer wire-format primitives (varints, field skipping), and the one message both
//! the parser and the decoders open: `tf.train.Feature`.
//!
//! A field is a varint key `(field_number << 3) | wire_type` followed by its value: wire type 0
//! a varint, 1 eight bytes, 2 a varint length then that many bytes, 5 four bytes (3 and 4 are
//! the deprecated groups, which tf.train messages never use and we reject).
//! Every function bounds-checks against the slice and returns `None` on malformed input.
//!
//! ```text
//! Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//! ```

/// Wire type of varint fields.
pub const VARINT: u8 = 0;
/// Wire type of fixed 64-bit fields.
pub const FIXED64: u8 = 1;
/// Wire type of length-delimited fields (bytes, strings, sub-messages, packed lists).
pub const LEN: u8 = 2;
/// Wire type of fixed 32-bit fields (float).
pub const FIXED32: u8 = 5;

/// Reads a varint at `*pos`, advancing it. At most 10 bytes, as the format allows.
#[inline(always)]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut p = *pos;
    // Fast path for the one-byte varints that dominate tags, lengths and small ints.
    let b0 = *buf.get(p)?;
    if b0 < 0x80 {
        *pos = p + 1;
        return Some(u64::from(b0));
    }
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(p)?;
        p += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            *pos = p;
            return Some(value);
        }
        shift += 7;
        if shift >= 70 {
            return None;
        }
    }
}

/// The largest field number protobuf allows (2^29 - 1).
pub const MAX_FIELD: u64 = (1 << 29) - 1;

/// Reads a field key, returning `(field_number, wire_type)`. Field numbers run from 1 to
/// [`MAX_FIELD`]: a key outside that range is malformed, as protobuf's own parsers say
/// (TensorFlow's fast Example parser skips a field 0 at the top level of a record; jaxrec
/// refuses it everywhere, with protobuf).
#[inline(always)]
pub fn read_key(buf: &[u8], pos: &mut usize) -> Option<(u64, u8)> {
    // Fast path: the one-byte keys of fields 1 to 15 (every tf.train message's).
    let b0 = *buf.get(*pos)?;
    if (0x08..0x80).contains(&b0) {
        *pos += 1;
        return Some((u64::from(b0 >> 3), b0 & 7));
    }
    let mut p = *pos;
    let key = read_varint(buf, &mut p)?;
    let field = key >> 3;
    if field == 0 || field > MAX_FIELD {
        return None;
    }
    *pos = p;
    Some((field, (key & 7) as u8))
}

/// Reads a length-delimited value's length and returns the value's byte range, advancing past it.
#[inline(always)]
pub fn read_len_delimited<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len = read_varint(buf, pos)?;
    let start = *pos;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let value = buf.get(start..end)?;
    *pos = end;
    Some(value)
}

/// Skips the value of a field of `wire_type` at `*pos`.
#[inline]
pub fn skip_value(buf: &[u8], pos: &mut usize, wire_type: u8) -> Option<()> {
    match wire_type {
        VARINT => read_varint(buf, pos).map(|_| ()),
        FIXED64 => advance(buf, pos, 8),
        LEN => read_len_delimited(buf, pos).map(|_| ()),
        FIXED32 => advance(buf, pos, 4),
        _ => None,
    }
}

#[inline]
fn advance(buf: &[u8], pos: &mut usize, n: usize) -> Option<()> {
    let end = pos.checked_add(n)?;
    if end > buf.len() {
        return None;
    }
    *pos = end;
    Some(())
}

/// Number of varints in a packed block: one per byte without the continuation bit.
/// Correct for any well-formed block; a malformed last varint is caught when decoding.
#[inline]
pub fn count_varints(block: &[u8]) -> usize {
    block.iter().filter(|&&b| b < 0x80).count()
}

/// Appends `value` as a varint.
#[inline]
pub fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Which list of `tf.train.Feature`'s oneof holds the values (field numbers 1, 2, 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `bytes_list = 1`.
    Bytes,
    /// `float_list = 2`.
    Float,
    /// `int64_list = 3`.
    Int64,
}

impl Wire {
    /// The name of the list in tf.train.Feature.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Bytes => "bytes_list",
            Wire::Float => "float_list",
            Wire::Int64 => "int64_list",
        }
    }
}

/// Splits a `Feature` message into its list type and the list's bytes. An empty message (no
/// kind set) has no type. Like TensorFlow's fast parser, the first field decides.
#[inline]
pub fn split_feature(feature: &[u8]) -> std::result::Result<Option<(Wire, &[u8])>, &'static str> {
    if feature.is_empty() {
        return Ok(None);
    }
    let mut pos = 0;
    let wire = match read_key(feature, &mut pos) {
        Some((1, LEN)) => Wire::Bytes,
        Some((2, LEN)) => Wire::Float,
        Some((3, LEN)) => Wire::Int64,
        _ => return Err("Feature holds no bytes_list, float_list or int64_list"),
    };
    let list = read_len_delimited(feature, &mut pos).ok_or("Feature's list overruns the record")?;
    Ok(Some((wire, list)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(field: u64, wire_type: u8) -> Vec<u8> {
        let mut out = Vec::new();
        write_varint(&mut out, field << 3 | u64::from(wire_type));
        out
    }

    #[test]
    fn field_numbers_run_from_1_to_max_field() {
        // Literals, not MAX_FIELD: the test pins the number, whatever the constant says.
        for (field, ok) in [(1, true), (15, true), (16, true), (536_870_911, true)] {
            let buf = key(field, LEN);
            let mut pos = 0;
            assert_eq!(
                read_key(&buf, &mut pos),
                ok.then_some((field, LEN)),
                "{field}"
            );
            assert_eq!(pos, buf.len());
        }
        for field in [0, 536_870_912, 1 << 40] {
            let buf = key(field, VARINT);
            let mut pos = 0;
            assert_eq!(read_key(&buf, &mut pos), None, "{field}");
            assert_eq!(pos, 0, "a refused key does not move the position");
        }
    }

    #[test]
    fn skip_value_skips_each_wire_type_exactly() {
        let mut varint = Vec::new();
        write_varint(&mut varint, 300);
        let cases: [(u8, Vec<u8>); 4] = [
            (VARINT, varint),
            (FIXED64, vec![1; 8]),
            (LEN, vec![3, 9, 9, 9]),
            (FIXED32, vec![2; 4]),
        ];
        for (wire_type, value) in cases {
            let mut buf = value.clone();
            buf.push(0x55); // the next field
            let mut pos = 0;
            assert_eq!(
                skip_value(&buf, &mut pos, wire_type),
                Some(()),
                "{wire_type}"
            );
            assert_eq!(pos, value.len(), "{wire_type}");
            // One byte short: an error (the caller gives up on the message).
            let short = &value[..value.len() - 1];
            assert_eq!(skip_value(short, &mut 0, wire_type), None, "{wire_type}");
        }
        // Groups (3, 4) and the unused types 6, 7 are not values protobuf 3 writes.
        for wire_type in [3, 4, 6, 7] {
            assert_eq!(skip_value(&[0; 16], &mut 0, wire_type), None, "{wire_type}");
        }
    }

    #[test]
    fn varint_round_trip() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX,
            (-1i64) as u64,
        ] {
            let mut buf = Vec::new();
            write_varint(&mut buf, v);
            let mut pos = 0;
            assert_eq!(read_varint(&buf, &mut pos), Some(v));
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn malformed_varints() {
        let mut pos = 0;
        assert_eq!(read_varint(&[0x80, 0x80], &mut pos), None); // runs off the end
        let mut pos = 0;
        assert_eq!(read_varint(&[0xff; 11], &mut pos), None); // longer than 10 bytes
    }

    #[test]
    fn len_delimited_bounds() {
        let mut pos = 0;
        assert_eq!(read_len_delimited(&[3, 1, 2], &mut pos), None);
        let mut pos = 0;
        assert_eq!(
            read_len_delimited(&[2, 1, 2], &mut pos),
            Some(&[1u8, 2][..])
        );
        // A length near u64::MAX must not overflow the end computation.
        let mut buf = Vec::new();
        write_varint(&mut buf, u64::MAX);
        let mut pos = 0;
        assert_eq!(read_len_delimited(&buf, &mut pos), None);
    }

    #[test]
    fn keys_number_fields_from_one() {
        let mut pos = 0;
        assert_eq!(read_key(&[0x08], &mut pos), Some((1, VARINT)));
        assert_eq!(pos, 1);
        // Field 0, with each wire type: protobuf forbids it; the position stays put.
        for key in [0x00u8, 0x01, 0x02, 0x05] {
            let mut pos = 0;
            assert_eq!(read_key(&[key, 0x00], &mut pos), None, "{key:#x}");
            assert_eq!(pos, 0);
        }
        // Beyond 2^29 - 1.
        let mut big = Vec::new();
        write_varint(&mut big, (MAX_FIELD + 1) << 3);
        assert_eq!(read_key(&big, &mut 0), None);
        let mut max = Vec::new();
        write_varint(&mut max, (MAX_FIELD << 3) | 2);
        assert_eq!(read_key(&max, &mut 0), Some((MAX_FIELD, LEN)));
        // skip_value refuses the deprecated groups and the undefined wire types 6 and 7.
        for wt in [3, 4, 6, 7] {
            assert_eq!(skip_value(&[0x00; 8], &mut 0, wt), None);
        }
    }

    #[test]
    fn counts_packed_varints() {
        let mut buf = Vec::new();
        for v in [1u64, 300, 0, u64::MAX] {
            write_varint(&mut buf, v);
        }
        assert_eq!(count_varints(&buf), 4);
    }
}
