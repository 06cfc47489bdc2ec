//! Per-row bookkeeping of a decoded column: reading a row's bytes value (and the values of the
//! features its shape comes from), and failing the batch or skipping the row on an error.

use crate::column::{Column, ColumnData, RowSkip, MAX_SKIPS};
use crate::error::{Error, Result};
use crate::wire::{self, read_key, read_len_delimited, read_varint, split_feature, Wire};

/// One found `tf.train.Feature` message (borrowed from its record), or `None` when the record
/// lacks the feature.
pub type Found<'a> = Option<&'a [u8]>;

/// What the record scan found for a batch: the `Feature` of every scanned slot in every row,
/// slot-major (`found[slot * rows + row]`). A decoder reads its own slot, and a raw tensor the
/// slots of the features its shape comes from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'s, 'a> {
    found: &'s [Found<'a>],
    rows: usize,
}

impl<'s, 'a> Inputs<'s, 'a> {
    /// Wraps the scan's slot-major table of `rows` rows.
    pub fn new(found: &'s [Found<'a>], rows: usize) -> Self {
        Inputs { found, rows }
    }

    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Slot `slot` of every row.
    pub fn slot(&self, slot: usize) -> &'s [Found<'a>] {
        &self.found[slot * self.rows..(slot + 1) * self.rows]
    }

    /// Slot `slot` of row `row`.
    pub fn get(&self, slot: usize, row: usize) -> Found<'a> {
        self.found[slot * self.rows + row]
    }
}

/// Why a row did not decode: `Hard` fails the batch whatever `skip_errors` says (the record
/// does not match the spec's types); `Row` is skipped with `skip_errors`.
pub(super) enum RowError {
    Hard(String),
    Row(String),
}

pub(super) type RowResult<T> = std::result::Result<T, RowError>;

pub(super) fn row_err<T>(msg: impl Into<String>) -> RowResult<T> {
    Err(RowError::Row(msg.into()))
}

/// The single bytes value of a found `Feature`.
pub(super) fn single_bytes<'a>(found: Found<'a>) -> RowResult<&'a [u8]> {
    let Some(feature) = found else {
        return row_err("required feature is missing");
    };
    let list = match split_feature(feature) {
        Err(m) => return Err(RowError::Hard(format!("malformed Feature: {m}"))),
        Ok(None) => return row_err("required feature is missing (a Feature with no list set)"),
        Ok(Some((Wire::Bytes, list))) => list,
        Ok(Some((w, _))) => {
            return Err(RowError::Hard(format!(
                "data types don't match: the record has a {} but the spec reads a bytes_list",
                w.name()
            )))
        }
    };
    let mut pos = 0;
    let mut value = None;
    let mut count = 0usize;
    while pos < list.len() {
        match read_key(list, &mut pos) {
            Some((1, wire::LEN)) => {
                let v = read_len_delimited(list, &mut pos)
                    .ok_or_else(|| RowError::Hard("malformed bytes_list".into()))?;
                value.get_or_insert(v);
                count += 1;
            }
            _ => return Err(RowError::Hard("malformed bytes_list".into())),
        }
    }
    match (value, count) {
        (Some(v), 1) => Ok(v),
        _ => row_err(format!("expected 1 bytes value, found {count}")),
    }
}

/// The values of a found `int64_list` (or of a bytes value of little-endian int32s).
pub(super) fn shape_values(found: Found<'_>, what: &str, ndim: usize) -> RowResult<Vec<i64>> {
    let Some(feature) = found else {
        return row_err(format!("shape feature {what:?} is missing"));
    };
    let mut out = Vec::new();
    match split_feature(feature) {
        Ok(Some((Wire::Int64, list))) => {
            let mut pos = 0;
            while pos < list.len() {
                match read_key(list, &mut pos) {
                    Some((1, wire::LEN)) => {
                        let block = read_len_delimited(list, &mut pos)
                            .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                        let mut p = 0;
                        while p < block.len() && out.len() <= ndim {
                            let v = read_varint(block, &mut p)
                                .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                            out.push(v as i64);
                        }
                    }
                    Some((1, wire::VARINT)) => {
                        let v = read_varint(list, &mut pos)
                            .ok_or_else(|| RowError::Hard("malformed int64_list".into()))?;
                        out.push(v as i64);
                    }
                    _ => return Err(RowError::Hard("malformed int64_list".into())),
                }
                if out.len() > ndim {
                    break;
                }
            }
        }
        Ok(Some((Wire::Bytes, _))) => {
            let v = single_bytes(found)?;
            if v.len() != ndim * 4 {
                return row_err(format!(
                    "shape feature {what:?} holds {} bytes, not {ndim} int32s",
                    v.len()
                ));
            }
            out.extend(
                v.chunks_exact(4)
                    .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            );
        }
        Ok(None) => return row_err(format!("shape feature {what:?} is empty")),
        Ok(Some((w, _))) => {
            return Err(RowError::Hard(format!(
                "shape feature {what:?} is a {}; expected an int64_list (or int32 bytes)",
                w.name()
            )))
        }
        Err(m) => return Err(RowError::Hard(format!("malformed Feature {what:?}: {m}"))),
    }
    if out.len() != ndim {
        return row_err(format!(
            "shape feature {what:?} holds {} values, expected {ndim}",
            out.len()
        ));
    }
    Ok(out)
}

pub(super) fn to_dim(v: i64, what: &str) -> RowResult<usize> {
    usize::try_from(v).map_err(|_| RowError::Row(format!("{what} is {v}, not a size >= 0")))
}

/// An output element that can be read from stored bytes.
pub(super) trait Elem: Copy + Default {
    const SIZE: usize;
    fn read(b: &[u8], little: bool) -> Self;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(b: &[u8], little: bool) -> Self {
                let a = b.try_into().unwrap_or_default();
                if little { <$t>::from_le_bytes(a) } else { <$t>::from_be_bytes(a) }
            }
        }
    )*};
}
elem!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

impl Elem for bool {
    const SIZE: usize = 1;
    #[inline(always)]
    fn read(b: &[u8], _little: bool) -> Self {
        b.first().is_some_and(|&v| v != 0)
    }
}

/// Rows of a decoded column: shared bookkeeping for skip_errors.
pub(super) struct Rows<'c> {
    name: &'c str,
    skip: bool,
    valid: Vec<bool>,
    skipped: u64,
    skips: Vec<RowSkip>,
}

impl<'c> Rows<'c> {
    pub(super) fn new(name: &'c str, skip: bool, b: usize) -> Self {
        Rows {
            name,
            skip,
            valid: vec![true; b],
            skipped: 0,
            skips: Vec::new(),
        }
    }

    /// Fails the batch, or marks `row` invalid and carries on.
    pub(super) fn fail(&mut self, row: usize, e: RowError) -> Result<()> {
        match e {
            RowError::Row(m) if self.skip => {
                self.valid[row] = false;
                self.skipped += 1;
                if self.skips.len() < MAX_SKIPS {
                    self.skips.push(RowSkip { row, reason: m });
                }
                Ok(())
            }
            RowError::Row(m) | RowError::Hard(m) => Err(Error::parse(row, self.name, m)),
        }
    }

    /// The column of these rows, with their valid flags and skip counts.
    pub(super) fn column<'a>(
        self,
        data: ColumnData<'a>,
        shape: Vec<usize>,
        shapes: Option<Vec<i32>>,
    ) -> Column<'a> {
        Column {
            valid: self.skip.then_some(self.valid),
            shapes,
            skipped: self.skipped,
            skips: self.skips,
            reusable: true,
            ..Column::new(data, shape)
        }
    }

    /// The feature's name, for errors about the whole column.
    pub(super) fn name(&self) -> &str {
        self.name
    }
}
