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
