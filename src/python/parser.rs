//! The parser from Python: [`ExampleParser`] compiles the `CompiledFeature`s of
//! `jaxrec/_spec.py` (see [`super::spec`]) and parses lists of records, chunks or rows of
//! chunks with the GIL released, handing each feature back as a [`Column`].

use numpy::ndarray::{ArrayD, ArrayViewD, IxDyn};
use numpy::{Element, PyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};

use super::errors::skip_dict;
use super::records::Chunk;
use super::spec::{compile, FeatureArg};
use crate::alloc::spares;
use crate::column::{self, ColumnData, RowSkip};
use crate::error::{Error, ErrorKind, Location, Result, Skip};
use crate::parse::spec::CompiledSpec;
use crate::parse::{self, ParsedBatch};

/// One parsed feature for the whole batch. Every field is named: adding one is one change
/// here and one where `jaxrec/_parse.py` reads it.
#[pyclass(module = "jaxrec._native", name = "Column", frozen, get_all)]
pub(super) struct Column {
    /// `[batch, ...]` values in the output dtype (float16/bfloat16 as uint16 bit patterns; see
    /// `view_dtype`).
    values: Py<PyAny>,
    /// "float16" or "bfloat16" when `values` holds bit patterns to view as that dtype.
    view_dtype: Option<&'static str>,
    /// Var/Sequence features: values (steps) kept per row; for Var feature lists of a
    /// SequenceExample, per step (`[batch, steps]`).
    lengths: Option<Py<PyArray1<i32>>>,
    /// Feature lists of a SequenceExample: steps per row.
    steps: Option<Py<PyArray1<i64>>>,
    /// Rows cut to `max_len` (only with `truncate`).
    truncated: u64,
    /// Decoded features with `on_error="skip"`: whether each row decoded.
    valid: Option<Py<PyArray1<bool>>>,
    /// Decoded features whose shape varies: each row's shape, `[batch, ndim]`.
    shapes: Option<Py<PyArray2<i32>>>,
    /// Rows skipped by `on_error="skip"`.
    skipped: u64,
    /// The first few of them, as dicts (see `python/errors.rs` `skip_dict`).
    skips: Py<PyList>,
}

/// A parsed batch: the columns of the Example features (or SequenceExample context), and of
/// the feature lists, in spec order.
#[pyclass(module = "jaxrec._native", name = "ParsedBatch", frozen, get_all)]
pub(super) struct Parsed {
    /// Columns of the Example features, or of the SequenceExample context.
    context: Py<PyList>,
    /// Columns of the SequenceExample feature lists (empty for Examples).
    sequence: Py<PyList>,
}

/// Byte strings as Python objects. Runs of one slice (padding, a default, a tensor's repeated
/// last string_val) share one object: a few bytes of record may fill a row with many elements.
pub(super) fn bytes_objects(py: Python<'_>, v: &[&[u8]]) -> Vec<Py<PyAny>> {
    let mut objs: Vec<Py<PyAny>> = Vec::with_capacity(v.len());
    for (i, b) in v.iter().enumerate() {
        // The values may sit in records parsed a while ago on other threads, one record apart
        // (the Loader's parse queue copies them side by side first, see `gather_strings`):
        // each copy into its object waited on memory, on the thread that holds the GIL. Asked
        // 8 rows ahead, the misses overlap.
        if let Some([first, ..]) = v.get(i + 8) {
            crate::prefetch::prefetch(first);
        }
        let obj = match objs.last() {
            Some(prev) if !starts_run(v, i) => prev.clone_ref(py),
            _ => PyBytes::new(py, b).into_any().unbind(),
        };
        objs.push(obj);
    }
    objs
}

/// Whether value `i` of a bytes column starts a run of one slice (not the same address and
/// length as the value before it): a run is one Python object, and one copy in the parse
/// queue (`queue::gather_strings`).
pub(super) fn starts_run(v: &[&[u8]], i: usize) -> bool {
    i == 0 || !std::ptr::eq(v[i - 1], v[i])
}

/// The dicts of a column's skipped rows (see `errors.rs` `skip_dict`): `feature` names the
/// column, `locate(row)` a row's record (`None`: rows of an in-memory list, named by index).
pub(super) fn skip_list<'py>(
    py: Python<'py>,
    skips: &[RowSkip],
    feature: &str,
    locate: &dyn Fn(usize) -> Option<Location>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for s in skips {
        let skip = Skip {
            kind: ErrorKind::Parse,
            loc: locate(s.row).unwrap_or_else(|| Location::row(s.row)),
            feature: Some(feature.to_owned()),
            reason: s.reason.clone(),
        };
        out.append(skip_dict(py, &skip, Some(s.row))?)?;
    }
    Ok(out)
}

/// A numpy array of `dims` over `v` (one object, no reshape); `v` must fill it.
pub(super) fn array<'py, T: Element>(
    py: Python<'py>,
    v: Vec<T>,
    dims: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let a = ArrayD::from_shape_vec(IxDyn(dims), v)
        .map_err(|e| Error::internal(format!("array of shape {dims:?}: {e}")))?;
    Ok(PyArray::from_owned_array(py, a).into_any())
}

/// The memory of a decoded batch under a numpy array (its base object): when the array (and
/// every view of it) is gone, the memory goes to [`spares`] for the next batch of its size.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct BatchMemory {
    memory: Option<spares::Spare>,
}

impl Drop for BatchMemory {
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            spares::give(memory);
        }
    }
}

/// `(count, bytes)` of the spare batches kept for reuse ([`spares`]).
#[pyfunction]
pub(super) fn spare_batches() -> (usize, usize) {
    spares::held()
}

/// Frees the spare batches kept for reuse.
#[pyfunction]
pub(super) fn release_spare_batches() {
    spares::release();
}

/// A Loader starts: the spare batches and the pooled read blocks serve it as they are (see
/// `idle`).
#[pyfunction]
pub(super) fn loader_started() {
    crate::idle::loader_started();
}

/// A Loader ends: a moment after the last one (`idle::GRACE`), the kernel may reclaim the
/// pages of the spare batches and of the pooled read blocks (and of those given back later)
/// when it needs memory; a later Loader reuses what it has not taken (see `idle`).
#[pyfunction]
pub(super) fn loader_ended() {
    crate::idle::loader_ended();
}

/// Settles the memory Loaders keep for one another now, where none runs, as a moment after
/// the last Loader's end does (see `idle`): for tests that look at the pages.
#[pyfunction]
pub(super) fn settle_kept_memory() {
    crate::idle::settle_now();
}

/// [`array`] for a batch column's values: large ones lend their memory to numpy through a
/// [`BatchMemory`], so that the next batch reuses it instead of fresh pages.
fn reusable_array<'py, T: Element>(
    py: Python<'py>,
    v: Vec<T>,
    dims: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    if std::mem::size_of_val(v.as_slice()) < spares::MIN_BYTES
        || dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(v.len())
    {
        return array(py, v, dims);
    }
    let memory = spares::Spare::from_vec(v)
        .ok_or_else(|| Error::internal("a batch of spare size holds no allocation"))?;
    let ptr = memory.as_ptr().cast_const().cast::<T>();
    // Dropped on failure: its memory then goes to the spares like any other.
    let owner = Bound::new(
        py,
        BatchMemory {
            memory: Some(memory),
        },
    )?;
    // SAFETY: `ptr` points at the Vec's `len` initialised Ts, which the dims multiply to
    // (checked above); `owner` owns that memory, becomes the array's base object and so
    // outlives it, and nothing reallocates or frees the memory while it lives.
    let view = unsafe { ArrayViewD::from_shape_ptr(IxDyn(dims), ptr) };
    // SAFETY: as above: `owner` keeps the memory alive as long as the array needs it.
    Ok(unsafe { PyArray::borrow_from_array(&view, owner.into_any()) }.into_any())
}

/// [`array`] for a column's values, in their dtype (float16/bfloat16 as uint16 bit patterns);
/// `reusable`: a column whose memory may serve the next batch ([`reusable_array`]).
pub(super) fn data_array<'py>(
    py: Python<'py>,
    data: ColumnData<'_>,
    dims: &[usize],
    reusable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! numbers {
        ($v:expr) => {
            if reusable {
                reusable_array(py, $v, dims)
            } else {
                array(py, $v, dims)
            }
        };
    }
    match data {
        ColumnData::I8(v) => numbers!(v),
        ColumnData::I16(v) => numbers!(v),
        ColumnData::I32(v) => numbers!(v),
        ColumnData::I64(v) => numbers!(v),
        ColumnData::U8(v) => numbers!(v),
        ColumnData::U16(v) | ColumnData::F16(v) | ColumnData::BF16(v) => numbers!(v),
        ColumnData::U32(v) => numbers!(v),
        ColumnData::U64(v) => numbers!(v),
        // bool batches are never reused (ZeroBits::ANY_BITS), so they lend nothing.
        ColumnData::Bool(v) => array(py, v, dims),
        ColumnData::F32(v) => numbers!(v),
        ColumnData::F64(v) => numbers!(v),
        ColumnData::Bytes(v) => array(py, bytes_objects(py, &v), dims),
    }
}

/// Converts a column to Python. `feature` names it in skip records; `locate(row)` says where
/// a row's record is (`None`: rows of an in-memory list, named by their index).
pub(super) fn column_to_py(
    py: Python<'_>,
    col: column::Column<'_>,
    feature: &str,
    locate: &dyn Fn(usize) -> Option<Location>,
) -> PyResult<Column> {
    // Bit patterns; Python views them as float16 / ml_dtypes.bfloat16.
    let view_dtype = match col.data {
        ColumnData::F16(_) => Some("float16"),
        ColumnData::BF16(_) => Some("bfloat16"),
        _ => None,
    };
    let values = data_array(py, col.data, &col.shape, col.reusable)?;
    let rows = col.shape.first().copied().unwrap_or(0);
    let shapes = match col.shapes {
        Some(s) => {
            // One dimension per axis of a row (the values are [rows, *row]), also for a batch
            // of no rows, so its shape is [0, ndim] like every other batch's.
            let ndim = col.shape.len().saturating_sub(1);
            Some(PyArray1::from_vec(py, s).reshape([rows, ndim])?.unbind())
        }
        None => None,
    };
    let skips = skip_list(py, &col.skips, feature, locate)?;
    Ok(Column {
        values: values.unbind(),
        view_dtype,
        lengths: col.lengths.map(|l| PyArray1::from_vec(py, l).unbind()),
        steps: col.steps.map(|s| PyArray1::from_vec(py, s).unbind()),
        truncated: col.truncated,
        valid: col.valid.map(|v| PyArray1::from_vec(py, v).unbind()),
        shapes,
        skipped: col.skipped,
        skips: skips.unbind(),
    })
}

/// A compiled spec: parses batches of serialized Examples (or SequenceExamples when
/// `sequence_features` is given) into numpy arrays, with the GIL released.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct ExampleParser {
    context: CompiledSpec,
    sequence: Option<CompiledSpec>,
}

impl ExampleParser {
    /// Parses `records` (no Python involved: callable from any thread).
    pub(super) fn parse_records<'a>(&'a self, records: &[&'a [u8]]) -> Result<ParsedBatch<'a>> {
        match &self.sequence {
            None => parse::parse_examples(records, &self.context),
            Some(seq) => parse::parse_sequence_examples(records, &self.context, seq),
        }
    }

    /// Columns a parse gives: the context's, then the feature lists' (a batch form numbers
    /// them so).
    pub(super) fn columns(&self) -> usize {
        self.context.len() + self.sequence.as_ref().map_or(0, CompiledSpec::len)
    }

    /// The name of column `i` of [`Self::columns`].
    pub(super) fn column_name(&self, i: usize) -> &str {
        match (i.checked_sub(self.context.len()), &self.sequence) {
            (Some(j), Some(seq)) => seq.name(j),
            _ => self.context.name(i),
        }
    }

    /// Parses `records` with the GIL released; `locate(row)` says where row `row` came from,
    /// so that errors and skip records name the record's file, index and offset rather than
    /// its row in the batch.
    fn run(
        &self,
        py: Python<'_>,
        records: &[&[u8]],
        locate: &dyn Fn(usize) -> Option<Location>,
    ) -> PyResult<Parsed> {
        let parsed = py.detach(|| self.parse_records(records));
        self.to_py(py, parsed, locate)
    }

    /// A parse's result as Python objects (its error relocated with `locate`).
    pub(super) fn to_py(
        &self,
        py: Python<'_>,
        parsed: Result<ParsedBatch<'_>>,
        locate: &dyn Fn(usize) -> Option<Location>,
    ) -> PyResult<Parsed> {
        let ParsedBatch { context, sequence } = parsed.map_err(|e| e.relocate(locate))?;
        let columns = |cols: Vec<column::Column<'_>>, spec: Option<&CompiledSpec>| {
            let out = PyList::empty(py);
            for (i, col) in cols.into_iter().enumerate() {
                let name = spec.map_or("", |s| s.name(i));
                out.append(column_to_py(py, col, name, locate)?)?;
            }
            PyResult::Ok(out.unbind())
        };
        Ok(Parsed {
            context: columns(context, Some(&self.context))?,
            sequence: columns(sequence, self.sequence.as_ref())?,
        })
    }
}

/// Checks `which`/`rows` against `chunks`: row i is record `rows[i]` of `chunks[which[i]]`.
pub(super) fn picks(
    chunks: &[&Chunk],
    which: &[i64],
    rows: &[i64],
) -> PyResult<Vec<(usize, usize)>> {
    if which.len() != rows.len() {
        return Err(PyValueError::new_err(
            "which and rows must have the same length",
        ));
    }
    which
        .iter()
        .zip(rows)
        .map(|(&c, &r)| {
            let chunk = usize::try_from(c).ok().filter(|&c| c < chunks.len());
            let row = usize::try_from(r).ok();
            match (chunk, row) {
                (Some(c), Some(row)) if row < chunks[c].inner.len() => Ok((c, row)),
                _ => Err(PyIndexError::new_err(format!("no record {r} in chunk {c}"))),
            }
        })
        .collect()
}

/// Where row `i` of a batch of `picks` from `chunks` came from (its file, index, offset).
pub(super) fn pick_location(
    chunks: &[&Chunk],
    picks: &[(usize, usize)],
    i: usize,
) -> Option<Location> {
    let &(c, r) = picks.get(i)?;
    chunks.get(c)?.location(r)
}

#[pymethods]
impl ExampleParser {
    /// Compiles `features` (and `sequence_features`, for SequenceExamples): lists of
    /// `jaxrec._spec.CompiledFeature`.
    #[new]
    #[pyo3(signature = (features, sequence_features=None))]
    fn new(
        features: Vec<FeatureArg<'_>>,
        sequence_features: Option<Vec<FeatureArg<'_>>>,
    ) -> PyResult<Self> {
        let context = compile(features)?;
        let sequence = sequence_features.map(compile).transpose()?;
        Ok(ExampleParser { context, sequence })
    }

    /// Parses a list of serialized records; errors and skips name each record's index in it.
    fn parse(&self, py: Python<'_>, records: Vec<PyBackedBytes>) -> PyResult<Parsed> {
        let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        self.run(py, &slices, &|_| None)
    }

    /// Parses every record of a chunk; errors and skips name the chunk's file, record index
    /// and offset.
    fn parse_chunk(&self, py: Python<'_>, chunk: &Chunk) -> PyResult<Parsed> {
        let slices = chunk.records();
        self.run(py, &slices, &|row| chunk.location(row))
    }

    /// Parses a batch gathered from several chunks: row i is record `rows[i]` of chunk
    /// `chunks[which[i]]` (the loader's shuffled order). Errors and skips name that record's
    /// file, index and offset.
    fn parse_rows<'py>(
        &self,
        py: Python<'py>,
        chunks: Vec<PyRef<'py, Chunk>>,
        which: PyReadonlyArray1<'py, i64>,
        rows: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Parsed> {
        let refs: Vec<&Chunk> = chunks.iter().map(|c| &**c).collect();
        let picks = picks(&refs, which.as_slice()?, rows.as_slice()?)?;
        let slices: Vec<&[u8]> = picks
            .iter()
            .map(|&(c, r)| refs[c].inner.record(r))
            .collect();
        self.run(py, &slices, &|i| pick_location(&refs, &picks, i))
    }
}
