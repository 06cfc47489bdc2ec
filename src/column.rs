//! A parsed column: one feature's values for a whole batch, in its output dtype, plus what
//! the parser and decoders report beside them. Both `parse` and `decode` build these.

/// The values of one output column, in the output dtype.
#[derive(Debug)]
pub enum ColumnData<'a> {
    /// int8
    I8(Vec<i8>),
    /// int16
    I16(Vec<i16>),
    /// int32
    I32(Vec<i32>),
    /// int64
    I64(Vec<i64>),
    /// uint8
    U8(Vec<u8>),
    /// uint16
    U16(Vec<u16>),
    /// uint32
    U32(Vec<u32>),
    /// uint64
    U64(Vec<u64>),
    /// bool
    Bool(Vec<bool>),
    /// float16 bit patterns
    F16(Vec<u16>),
    /// bfloat16 bit patterns
    BF16(Vec<u16>),
    /// float32
    F32(Vec<f32>),
    /// float64
    F64(Vec<f64>),
    /// byte strings, borrowed from the records or the spec's defaults
    Bytes(Vec<&'a [u8]>),
}

/// One parsed feature for the whole batch.
#[derive(Debug)]
pub struct Column<'a> {
    /// Values, row-major in `shape`.
    pub data: ColumnData<'a>,
    /// `[batch, ...]`.
    pub shape: Vec<usize>,
    /// Var/Sequence: values (steps) kept per row; for Var features of a SequenceExample, per
    /// step (`[batch, steps]`), with `steps` holding the steps per row.
    pub lengths: Option<Vec<i32>>,
    /// SequenceExample sequence features: steps per row.
    pub steps: Option<Vec<i64>>,
    /// Rows cut to `max_len` (only with `truncate`).
    pub truncated: u64,
    /// Decoded features with `skip_errors`: whether each row decoded (a skipped row is zeros).
    pub valid: Option<Vec<bool>>,
    /// Decoded tensors whose shape varies: each row's own shape, `[batch, ndim]` row-major.
    pub shapes: Option<Vec<i32>>,
    /// Rows skipped by `skip_errors`.
    pub skipped: u64,
    /// The first few of them ([`MAX_SKIPS`]): which row, and why.
    pub skips: Vec<RowSkip>,
    /// A batch of numbers (decoded images and tensors, parsed features): its values' memory may
    /// serve a later batch of the same size once Python frees it ([`crate::alloc::spares`]).
    pub reusable: bool,
}

/// How many skipped rows a column describes per batch (it counts them all).
pub const MAX_SKIPS: usize = 8;

/// A row a decoder skipped under `on_error="skip"` (its values are zeros and its valid flag
/// false): the row of the batch, and why it did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSkip {
    /// The row in the batch.
    pub row: usize,
    /// What was expected and what was found.
    pub reason: String,
}

impl ColumnData<'_> {
    /// Appends `extra` zeros (empty byte strings for bytes).
    fn extend_zeros(&mut self, extra: usize) {
        fn grow<T: Clone>(v: &mut Vec<T>, extra: usize, zero: T) {
            v.resize(v.len() + extra, zero);
        }
        match self {
            ColumnData::I8(v) => grow(v, extra, 0),
            ColumnData::I16(v) => grow(v, extra, 0),
            ColumnData::I32(v) => grow(v, extra, 0),
            ColumnData::I64(v) => grow(v, extra, 0),
            ColumnData::U8(v) => grow(v, extra, 0),
            ColumnData::U16(v) | ColumnData::F16(v) | ColumnData::BF16(v) => grow(v, extra, 0),
            ColumnData::U32(v) => grow(v, extra, 0),
            ColumnData::U64(v) => grow(v, extra, 0),
            ColumnData::Bool(v) => grow(v, extra, false),
            ColumnData::F32(v) => grow(v, extra, 0.0),
            ColumnData::F64(v) => grow(v, extra, 0.0),
            ColumnData::Bytes(v) => grow(v, extra, &[][..]),
        }
    }
}

impl<'a> Column<'a> {
    /// A column of `data` in `shape`, with no lengths, steps, shapes, valid flags, truncation
    /// or skips (the parts each producer sets as it needs).
    pub fn new(data: ColumnData<'a>, shape: Vec<usize>) -> Self {
        Column {
            data,
            shape,
            lengths: None,
            steps: None,
            truncated: 0,
            valid: None,
            shapes: None,
            skipped: 0,
            skips: Vec::new(),
            reusable: false,
        }
    }

    /// Rows held (the first dimension).
    pub fn rows(&self) -> usize {
        self.shape.first().copied().unwrap_or(0)
    }

    /// Pads the column to `rows` rows with rows of zeros: zero values (empty byte strings),
    /// lengths, steps and shapes, and `valid` false. These are the Loader's padding rows, which
    /// its mask marks False; a column of `rows` or more rows is left as it is.
    pub fn pad_rows(&mut self, rows: usize) {
        let have = self.rows();
        if have >= rows || self.shape.is_empty() {
            return;
        }
        let extra = rows - have;
        let per_row: usize = self.shape[1..].iter().product();
        self.data.extend_zeros(extra * per_row);
        // Lengths are per row, or per step of a row for the Var feature lists of a
        // SequenceExample (`[batch, steps]`, the steps being the values' second dimension).
        let lengths_per_row = if self.steps.is_some() {
            self.shape.get(1).copied().unwrap_or(0)
        } else {
            1
        };
        if let Some(l) = &mut self.lengths {
            l.resize(l.len() + extra * lengths_per_row, 0);
        }
        if let Some(s) = &mut self.steps {
            s.resize(s.len() + extra, 0);
        }
        if let Some(v) = &mut self.valid {
            v.resize(v.len() + extra, false);
        }
        if let Some(s) = &mut self.shapes {
            s.resize(s.len() + extra * (self.shape.len() - 1), 0);
        }
        self.shape[0] = rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(data: ColumnData<'static>, shape: Vec<usize>) -> Column<'static> {
        Column::new(data, shape)
    }

    fn values(col: &Column<'_>) -> usize {
        match &col.data {
            ColumnData::F32(v) => v.len(),
            ColumnData::Bytes(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
            other => panic!("not a test column: {other:?}"),
        }
    }

    #[test]
    fn pad_rows_appends_zero_rows_to_every_part() {
        let mut col = column(ColumnData::I32(vec![1, 2, 3, 4, 5, 6]), vec![2, 3]);
        col.lengths = Some(vec![3, 2]);
        col.valid = Some(vec![true, true]);
        col.shapes = Some(vec![3, 2]);
        col.pad_rows(4);
        assert_eq!(col.shape, vec![4, 3]);
        let ColumnData::I32(v) = &col.data else {
            panic!("dtype changed")
        };
        assert_eq!(v, &[1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0]);
        assert_eq!(col.lengths.as_deref(), Some(&[3, 2, 0, 0][..]));
        assert_eq!(col.valid.as_deref(), Some(&[true, true, false, false][..]));
        assert_eq!(col.shapes.as_deref(), Some(&[3, 2, 0, 0][..]));
    }

    #[test]
    fn pad_rows_of_feature_lists_pads_lengths_per_step() {
        // A Var feature list: [batch, steps, longest] values, lengths per step, steps per row.
        let mut col = column(ColumnData::F32(vec![1.0; 6]), vec![1, 2, 3]);
        col.lengths = Some(vec![3, 1]);
        col.steps = Some(vec![2]);
        col.pad_rows(3);
        assert_eq!(col.shape, vec![3, 2, 3]);
        assert_eq!(values(&col), 18);
        assert_eq!(col.lengths.as_deref(), Some(&[3, 1, 0, 0, 0, 0][..]));
        assert_eq!(col.steps.as_deref(), Some(&[2, 0, 0][..]));
    }

    #[test]
    fn pad_rows_pads_bytes_with_empty_strings_and_never_cuts() {
        let mut col = column(ColumnData::Bytes(vec![b"ab", b"c"]), vec![2]);
        col.pad_rows(3);
        let ColumnData::Bytes(v) = &col.data else {
            panic!("dtype changed")
        };
        assert_eq!(v, &[&b"ab"[..], b"c", b""]);
        col.pad_rows(1);
        assert_eq!(col.shape, vec![3]);
        assert_eq!(values(&col), 3);

        let mut empty = column(ColumnData::Bool(Vec::new()), vec![0, 2]);
        empty.pad_rows(2);
        assert_eq!(empty.shape, vec![2, 2]);
        assert_eq!(values(&empty), 4);
    }
}
