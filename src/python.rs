//! The Python boundary (`jaxrec._native`): argument extraction, GIL release, conversion of
//! results to numpy, and mapping [`Error`] to `jaxrec.errors`. No parsing logic lives here.

use std::path::PathBuf;
use std::sync::Mutex;

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyIndexError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::compress::{self, Compression};
use crate::crc;
use crate::decode;
use crate::error::{Error, Location};
use crate::example::{self, Column, ColumnData, ParsedBatch};
use crate::framing::{self, ReaderOptions};
use crate::image::{self, Format as ImageFormat, ImageSpec, PixelType, Resize};
use crate::spec::{
    CompiledSpec, DecoderConfig, Defaults, Dim, FeatureConfig, Kind, OutDType, RawSpec, ShapeFrom,
    TensorSpec, Transform,
};

/// Raises `jaxrec.errors.<class>(detail, **location)`.
fn located(
    py: Python<'_>,
    class: &str,
    detail: String,
    loc: &Location,
    feature: Option<&str>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("jaxrec.errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("path", loc.path.as_deref())?;
        kwargs.set_item("record_index", loc.record_index)?;
        kwargs.set_item("byte_offset", loc.byte_offset)?;
        kwargs.set_item("feature", feature)?;
        Ok(PyErr::from_value(cls.call((detail,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

fn to_pyerr(py: Python<'_>, err: Error) -> PyErr {
    match err {
        Error::Corrupt { loc, detail } => located(py, "CorruptRecordError", detail, &loc, None),
        Error::Truncated { loc, detail } => located(py, "TruncatedRecordError", detail, &loc, None),
        Error::Parse {
            row,
            feature,
            detail,
        } => {
            let loc = Location {
                path: None,
                record_index: Some(row as u64),
                byte_offset: None,
            };
            located(py, "ExampleParseError", detail, &loc, feature.as_deref())
        }
        Error::Spec(detail) => {
            let build = || -> PyResult<PyErr> {
                let cls = py.import("jaxrec.errors")?.getattr("FeatureSpecError")?;
                Ok(PyErr::from_value(cls.call1((detail.clone(),))?))
            };
            build().unwrap_or_else(|e| e)
        }
        Error::Io { path, source } => {
            let errno = source.raw_os_error();
            let msg = source.to_string();
            match (errno, path) {
                (Some(code), Some(p)) => PyOSError::new_err((code, msg, p)),
                (_, Some(p)) => PyOSError::new_err(format!("{p}: {msg}")),
                _ => PyOSError::new_err(msg),
            }
        }
    }
}

fn parse_compression(name: Option<&str>) -> Result<Option<Compression>, Error> {
    match name {
        Some(n) if n.eq_ignore_ascii_case("auto") => Ok(None),
        other => Compression::from_name(other).map(Some),
    }
}

/// Masked CRC32C of `data`, as stored in TFRecord headers and footers.
#[pyfunction]
fn masked_crc32c(data: &[u8]) -> u32 {
    crc::masked_crc32c(data)
}

/// Records read in one go from one file: one buffer and the payload range of each record.
#[pyclass(module = "jaxrec._native", frozen)]
struct Chunk {
    inner: framing::Chunk,
    path: Option<String>,
}

#[pymethods]
impl Chunk {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, i: isize) -> PyResult<Bound<'py, PyBytes>> {
        let n = self.inner.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(PyIndexError::new_err("chunk index out of range"));
        }
        Ok(PyBytes::new(py, self.inner.record(j as usize)))
    }

    /// Every record as a list of bytes (one Python object per record: not for hot paths).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            (0..self.inner.len()).map(|i| PyBytes::new(py, self.inner.record(i))),
        )
    }

    /// The file the records came from.
    #[getter]
    fn path(&self) -> Option<String> {
        self.path.clone()
    }

    /// Offset just past the last record: where a resumed reader starts.
    #[getter]
    fn end_offset(&self) -> u64 {
        self.inner.end_offset
    }

    /// Index (in the file) of the record after this chunk.
    #[getter]
    fn next_index(&self) -> u64 {
        self.inner.next_index
    }

    /// Index in the file of each record.
    #[getter]
    fn indices<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        PyArray1::from_slice(py, &self.inner.indices)
    }

    /// Offset of each record's header in the (decompressed) file.
    #[getter]
    fn file_offsets<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        PyArray1::from_slice(py, &self.inner.file_offsets)
    }

    /// Payload bytes in the chunk.
    #[getter]
    fn payload_bytes(&self) -> usize {
        self.inner
            .starts
            .iter()
            .zip(&self.inner.ends)
            .map(|(s, e)| e - s)
            .sum()
    }
}

impl Chunk {
    fn records(&self) -> Vec<&[u8]> {
        (0..self.inner.len())
            .map(|i| self.inner.record(i))
            .collect()
    }
}

/// A Python binary file object as a Rust byte stream. Each call takes the GIL for one large
/// `read` (the reader asks for whole blocks), so the cost of crossing is per block, not per
/// record; remote filesystems (fsspec's gcsfs, s3fs) do their own buffering below it.
struct PyFile(Py<PyAny>);

fn py_io_error(e: PyErr) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl std::io::Read for PyFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Python::attach(|py| {
            let data = self
                .0
                .bind(py)
                .call_method1("read", (buf.len(),))
                .map_err(py_io_error)?;
            let bytes = data
                .cast::<PyBytes>()
                .map_err(|e| py_io_error(e.into()))?
                .as_bytes();
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            Ok(n)
        })
    }
}

impl Drop for PyFile {
    /// Closes the file object as soon as the reader lets go of it (at the end of the stream or
    /// when dropped), instead of leaving it to the garbage collector.
    fn drop(&mut self) {
        // try_attach: nothing to do when the interpreter is already shutting down.
        let _ = Python::try_attach(|py| self.0.bind(py).call_method0("close").map(|_| ()));
    }
}

impl std::io::Seek for PyFile {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        let (offset, whence) = match pos {
            std::io::SeekFrom::Start(o) => (o as i64, 0),
            std::io::SeekFrom::Current(o) => (o, 1),
            std::io::SeekFrom::End(o) => (o, 2),
        };
        Python::attach(|py| {
            self.0
                .bind(py)
                .call_method1("seek", (offset, whence))
                .and_then(|r| r.extract::<u64>())
                .map_err(py_io_error)
        })
    }
}

/// Reads framed records from one TFRecord file, in chunks, with the GIL released.
#[pyclass(module = "jaxrec._native", frozen)]
struct RecordReader {
    inner: Mutex<framing::RecordReader>,
    path: String,
}

#[pymethods]
impl RecordReader {
    /// Opens `path`; with `file` (a binary file object, e.g. from `fsspec.open`) reads that
    /// instead, `path` then only naming it in errors and for compression inference, and `size`
    /// its length if known (so record lengths are checked before allocating).
    #[new]
    #[pyo3(signature = (path, compression="auto", verify=true, skip_errors=false, start_offset=0, start_index=0, file=None, size=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        compression: Option<&str>,
        verify: bool,
        skip_errors: bool,
        start_offset: u64,
        start_index: u64,
        file: Option<Py<PyAny>>,
        size: Option<u64>,
    ) -> PyResult<Self> {
        let comp = parse_compression(compression).map_err(|e| to_pyerr(py, e))?;
        let opts = ReaderOptions {
            verify,
            skip_errors,
        };
        let display = path.display().to_string();
        let reader = py
            .detach(|| match file {
                None => framing::RecordReader::open(&path, comp, opts, start_offset, start_index),
                Some(obj) => {
                    let source =
                        compress::open_stream(PyFile(obj), &path, comp, start_offset, size)
                            .map_err(|e| Error::Io {
                                path: Some(display.clone()),
                                source: e,
                            })?;
                    framing::RecordReader::from_source(
                        source,
                        display.clone(),
                        opts,
                        start_offset,
                        start_index,
                    )
                }
            })
            .map_err(|e| to_pyerr(py, e))?;
        Ok(RecordReader {
            inner: Mutex::new(reader),
            path: path.display().to_string(),
        })
    }

    /// Reads up to `max_records` records of the current block of about `block_bytes` of file
    /// (a larger record gets a block of its own). Returns None at the end of the file.
    #[pyo3(signature = (max_records=usize::MAX, block_bytes=4 << 20))]
    fn read_chunk(
        &self,
        py: Python<'_>,
        max_records: usize,
        block_bytes: usize,
    ) -> PyResult<Option<Chunk>> {
        let res = py.detach(|| {
            let mut r = self
                .inner
                .lock()
                .map_err(|_| Error::Spec("reader poisoned by an earlier panic".into()))?;
            r.next_chunk(max_records, block_bytes)
        });
        match res {
            Ok(Some(c)) => Ok(Some(Chunk {
                inner: c,
                path: Some(self.path.clone()),
            })),
            Ok(None) => Ok(None),
            Err(e) => Err(to_pyerr(py, e)),
        }
    }

    /// The compression in effect: "", "GZIP" or "ZLIB".
    #[getter]
    fn compression(&self) -> PyResult<&'static str> {
        let r = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("reader poisoned"))?;
        Ok(r.compression().name())
    }

    /// Counters: records, bytes, skipped_records, skipped_bytes, errors (first messages).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("reader poisoned"))?
            .stats()
            .clone();
        let d = PyDict::new(py);
        d.set_item("records", s.records)?;
        d.set_item("bytes", s.bytes)?;
        d.set_item("skipped_records", s.skipped_records)?;
        d.set_item("skipped_bytes", s.skipped_bytes)?;
        d.set_item("errors", s.errors)?;
        Ok(d)
    }
}

/// Writes framed records to a (possibly compressed) file.
#[pyclass(module = "jaxrec._native", frozen)]
struct RecordWriter {
    inner: Mutex<framing::RecordWriter>,
}

impl RecordWriter {
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut framing::RecordWriter) -> Result<R, Error> + Send,
    ) -> PyResult<R>
    where
        R: Send,
    {
        py.detach(|| {
            let mut w = self
                .inner
                .lock()
                .map_err(|_| Error::Spec("writer poisoned by an earlier panic".into()))?;
            f(&mut w)
        })
        .map_err(|e| to_pyerr(py, e))
    }
}

#[pymethods]
impl RecordWriter {
    #[new]
    #[pyo3(signature = (path, compression=None, level=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        compression: Option<&str>,
        level: Option<u32>,
    ) -> PyResult<Self> {
        let comp = Compression::from_name(compression).map_err(|e| to_pyerr(py, e))?;
        if level.is_some_and(|l| l > 9) {
            return Err(PyValueError::new_err("compression level must be 0..9"));
        }
        let w = framing::RecordWriter::create(&path, comp, level).map_err(|e| to_pyerr(py, e))?;
        Ok(RecordWriter {
            inner: Mutex::new(w),
        })
    }

    /// Appends one record.
    fn write(&self, py: Python<'_>, record: PyBackedBytes) -> PyResult<()> {
        self.with(py, |w| w.write(&record))
    }

    /// Appends every record of an iterable of bytes.
    fn write_many(&self, py: Python<'_>, records: Vec<PyBackedBytes>) -> PyResult<()> {
        self.with(py, |w| records.iter().try_for_each(|r| w.write(r)))
    }

    /// Flushes buffered bytes to the OS.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |w| w.flush())
    }

    /// Finishes the stream and closes the file (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |w| w.close())
    }

    /// Records written so far.
    #[getter]
    fn records(&self) -> PyResult<u64> {
        Ok(self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("writer poisoned"))?
            .records())
    }
}

type FeatureTuple = (
    String,
    u8,
    u8,
    String,
    usize,
    Option<usize>,
    bool,
    Option<Vec<f64>>,
    Option<Vec<i64>>,
    Option<Vec<Vec<u8>>>,
    bool,
);

fn compile(features: Vec<FeatureTuple>) -> Result<CompiledSpec, Error> {
    let configs = features
        .into_iter()
        .map(
            |(
                name,
                kind,
                _wire,
                code,
                n,
                max_len,
                truncate,
                floats,
                ints,
                bytes,
                allow_missing,
            )| {
                let kind = match kind {
                    0 => Kind::Fixed,
                    1 => Kind::Var,
                    2 => Kind::Sequence,
                    k => return Err(Error::Spec(format!("unknown feature kind {k}"))),
                };
                let defaults = match (floats, ints, bytes) {
                    (Some(f), None, None) => Defaults::Float(f),
                    (None, Some(i), None) => Defaults::Int(i),
                    (None, None, Some(b)) => Defaults::Bytes(b),
                    (None, None, None) => Defaults::None,
                    _ => {
                        return Err(Error::Spec(format!(
                            "feature {name:?}: more than one kind of default"
                        )))
                    }
                };
                Ok(FeatureConfig {
                    name,
                    kind,
                    dtype: OutDType::from_code(&code)?,
                    n,
                    max_len,
                    truncate,
                    defaults,
                    allow_missing,
                })
            },
        )
        .collect::<Result<Vec<_>, Error>>()?;
    CompiledSpec::new(configs)
}

/// A compiled spec: parses batches of serialized Examples (or SequenceExamples when
/// `sequence_features` is given) into numpy arrays, with the GIL released.
#[pyclass(module = "jaxrec._native", frozen)]
struct ExampleParser {
    context: CompiledSpec,
    sequence: Option<CompiledSpec>,
}

fn column_to_py<'py>(py: Python<'py>, col: Column<'_>) -> PyResult<Bound<'py, PyTuple>> {
    macro_rules! arr {
        ($v:expr) => {
            PyArray1::from_vec(py, $v)
                .reshape(col.shape.clone())?
                .into_any()
        };
    }
    let (values, view) = match col.data {
        ColumnData::I8(v) => (arr!(v), None),
        ColumnData::I16(v) => (arr!(v), None),
        ColumnData::I32(v) => (arr!(v), None),
        ColumnData::I64(v) => (arr!(v), None),
        ColumnData::U8(v) => (arr!(v), None),
        ColumnData::U16(v) => (arr!(v), None),
        ColumnData::U32(v) => (arr!(v), None),
        ColumnData::U64(v) => (arr!(v), None),
        ColumnData::Bool(v) => (arr!(v), None),
        // Bit patterns; Python views them as float16 / ml_dtypes.bfloat16.
        ColumnData::F16(v) => (arr!(v), Some("float16")),
        ColumnData::BF16(v) => (arr!(v), Some("bfloat16")),
        ColumnData::F32(v) => (arr!(v), None),
        ColumnData::F64(v) => (arr!(v), None),
        ColumnData::Bytes(v) => {
            let objs: Vec<Py<PyAny>> = v
                .iter()
                .map(|b| PyBytes::new(py, b).into_any().unbind())
                .collect();
            (arr!(objs), None)
        }
    };
    let lengths = col.lengths.map(|l| PyArray1::from_vec(py, l));
    let steps = col.steps.map(|s| PyArray1::from_vec(py, s));
    // Decoded features: per-row valid flags (skip_errors) and per-row shapes [B, ndim].
    let valid = col.valid.map(|v| PyArray1::from_vec(py, v));
    let rows = col.shape.first().copied().unwrap_or(0);
    let shapes = match col.shapes {
        Some(s) => {
            let ndim = s.len().checked_div(rows).unwrap_or(0);
            Some(PyArray1::from_vec(py, s).reshape([rows, ndim])?)
        }
        None => None,
    };
    PyTuple::new(
        py,
        [
            values,
            view.into_pyobject(py)?.into_any(),
            lengths.into_pyobject(py)?.into_any(),
            steps.into_pyobject(py)?.into_any(),
            col.truncated.into_pyobject(py)?.into_any(),
            valid.into_pyobject(py)?.into_any(),
            shapes.into_pyobject(py)?.into_any(),
            col.skipped.into_pyobject(py)?.into_any(),
            PyList::new(py, col.errors)?.into_any(),
        ],
    )
}

impl ExampleParser {
    fn run<'py>(&self, py: Python<'py>, records: &[&[u8]]) -> Result<Bound<'py, PyTuple>, PyErr> {
        let parsed: Result<ParsedBatch<'_>, Error> = py.detach(|| match &self.sequence {
            None => example::parse_examples(records, &self.context),
            Some(seq) => example::parse_sequence_examples(records, &self.context, seq),
        });
        let parsed = parsed.map_err(|e| to_pyerr(py, e))?;
        let ctx = PyList::new(
            py,
            parsed
                .context
                .into_iter()
                .map(|c| column_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        let seq = PyList::new(
            py,
            parsed
                .sequence
                .into_iter()
                .map(|c| column_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        PyTuple::new(py, [ctx.into_any(), seq.into_any()])
    }
}

#[pymethods]
impl ExampleParser {
    #[new]
    #[pyo3(signature = (features, sequence_features=None, decoders=None))]
    fn new(
        py: Python<'_>,
        features: Vec<FeatureTuple>,
        sequence_features: Option<Vec<FeatureTuple>>,
        decoders: Option<Vec<(usize, String, Bound<'_, PyDict>)>>,
    ) -> PyResult<Self> {
        let decoders = decoders
            .unwrap_or_default()
            .into_iter()
            .map(|(i, kind, params)| Ok((i, decoder_config(&kind, &params)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let context = compile(features)
            .and_then(|spec| spec.with_decoders(decoders))
            .map_err(|e| to_pyerr(py, e))?;
        let sequence = sequence_features
            .map(compile)
            .transpose()
            .map_err(|e| to_pyerr(py, e))?;
        Ok(ExampleParser { context, sequence })
    }

    /// Parses a list of serialized records. Returns `(context_columns, sequence_columns)`,
    /// each a list (in spec order) of `(values, view_dtype, lengths, steps, truncated)`.
    fn parse<'py>(
        &self,
        py: Python<'py>,
        records: Vec<PyBackedBytes>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        self.run(py, &slices)
    }

    /// Parses every record of a chunk; errors name the chunk's file, record index and offset.
    fn parse_chunk<'py>(&self, py: Python<'py>, chunk: &Chunk) -> PyResult<Bound<'py, PyTuple>> {
        let slices = chunk.records();
        self.run(py, &slices).map_err(|e| relocate(py, e, chunk))
    }

    /// Parses a batch gathered from several chunks: row i is record `rows[i]` of chunk
    /// `chunks[which[i]]` (the loader's shuffled order). Errors name that record's file,
    /// index and offset.
    fn parse_rows<'py>(
        &self,
        py: Python<'py>,
        chunks: Vec<PyRef<'py, Chunk>>,
        which: PyReadonlyArray1<'py, i64>,
        rows: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (which, rows) = (which.as_slice()?, rows.as_slice()?);
        if which.len() != rows.len() {
            return Err(PyValueError::new_err(
                "which and rows must have the same length",
            ));
        }
        let mut slices = Vec::with_capacity(rows.len());
        for (&c, &r) in which.iter().zip(rows) {
            let chunk = usize::try_from(c).ok().and_then(|c| chunks.get(c));
            let row = usize::try_from(r).ok();
            match (chunk, row) {
                (Some(chunk), Some(row)) if row < chunk.inner.len() => {
                    slices.push(chunk.inner.record(row))
                }
                _ => return Err(PyIndexError::new_err(format!("no record {r} in chunk {c}"))),
            }
        }
        self.run(py, &slices).map_err(|e| {
            let row = e
                .value(py)
                .getattr("record_index")
                .ok()
                .and_then(|r| r.extract::<usize>().ok());
            match row.filter(|&r| r < which.len()) {
                Some(r) => relocate_row(py, e, &chunks[which[r] as usize], rows[r] as usize),
                None => e,
            }
        })
    }
}

/// Rewrites a parse error's batch row into the chunk's file, record index and byte offset.
fn relocate(py: Python<'_>, err: PyErr, chunk: &Chunk) -> PyErr {
    let row: Option<usize> = err
        .value(py)
        .getattr("record_index")
        .ok()
        .and_then(|r| r.extract().ok());
    match row.filter(|&r| r < chunk.inner.len()) {
        Some(row) => relocate_row(py, err, chunk, row),
        None => err,
    }
}

/// Rewrites a parse error to name record `row` of `chunk`.
fn relocate_row(py: Python<'_>, err: PyErr, chunk: &Chunk, row: usize) -> PyErr {
    let value = err.value(py);
    let kwargs = PyDict::new(py);
    let fill = || -> PyResult<PyErr> {
        kwargs.set_item("path", chunk.path.as_deref())?;
        kwargs.set_item("record_index", chunk.inner.indices[row])?;
        kwargs.set_item("byte_offset", chunk.inner.file_offsets[row])?;
        Ok(PyErr::from_value(value.call_method(
            "with_location",
            (),
            Some(&kwargs),
        )?))
    };
    fill().unwrap_or(err)
}

/// Reads `params[key]`, failing with a spec error when it is absent.
fn param<'py, T: FromPyObjectOwned<'py>>(params: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    match params.get_item(key)? {
        Some(v) => v.extract().map_err(Into::into),
        None => Err(PyValueError::new_err(format!(
            "decoder parameter {key:?} is missing"
        ))),
    }
}

fn dims(items: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<Dim>> {
    items
        .into_iter()
        .map(|d| {
            if d.is_none() {
                return Ok(Dim::Any);
            }
            if let Ok(name) = d.extract::<String>() {
                return Ok(Dim::Feature { name, slot: 0 });
            }
            match d.extract::<i64>()? {
                -1 => Ok(Dim::Infer),
                n => usize::try_from(n)
                    .map(Dim::Fixed)
                    .map_err(|_| PyValueError::new_err(format!("bad dimension {n}"))),
            }
        })
        .collect()
}

/// Builds a decoder from `jaxrec/_spec.py`'s `(kind, params)` (see `CompiledFeature.decoder`).
fn decoder_config(kind: &str, p: &Bound<'_, PyDict>) -> PyResult<DecoderConfig> {
    let code: String = param(p, "dtype")?;
    let dtype = OutDType::from_code(&code).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let transform = match kind {
        "image" => Transform::Image(ImageSpec {
            height: param(p, "height")?,
            width: param(p, "width")?,
            channels: param(p, "channels")?,
            format: match param::<String>(p, "format")?.as_str() {
                "jpeg" => ImageFormat::Jpeg,
                "png" => ImageFormat::Png,
                _ => ImageFormat::Auto,
            },
            resize: match param::<Option<String>>(p, "resize")?.as_deref() {
                None => Resize::None,
                Some("crop_or_pad") => Resize::CropOrPad,
                Some("bilinear") => Resize::Bilinear {
                    antialias: param(p, "antialias")?,
                },
                Some(other) => {
                    return Err(PyValueError::new_err(format!("unknown resize {other:?}")))
                }
            },
            pixel: if dtype == OutDType::F32 {
                PixelType::F32
            } else {
                PixelType::U8
            },
            max_pixels: param(p, "max_pixels")?,
        }),
        "raw" => Transform::Raw(RawSpec {
            dtype,
            shape: match param::<Option<String>>(p, "shape_feature")? {
                Some(name) => ShapeFrom::Feature {
                    name,
                    slot: 0,
                    ndim: param(p, "ndim")?,
                },
                None => ShapeFrom::Dims(dims(param(p, "dims")?)?),
            },
            max_shape: param(p, "max_shape")?,
            little_endian: param(p, "little_endian")?,
        }),
        "tensor" => Transform::Tensor(TensorSpec {
            dtype,
            shape: dims(param(p, "dims")?)?,
            max_shape: param(p, "max_shape")?,
        }),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown decoder kind {other:?}"
            )))
        }
    };
    Ok(DecoderConfig {
        transform,
        skip_errors: param::<String>(p, "on_error")? == "skip",
    })
}

/// Raises `jaxrec.errors.<class>(detail)` with no location.
fn plain_error(py: Python<'_>, class: &str, detail: String) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("jaxrec.errors")?.getattr(class)?;
        Ok(PyErr::from_value(cls.call1((detail,))?))
    };
    build().unwrap_or_else(|e| e)
}

/// Decodes JPEG or PNG bytes to a `(height, width, channels)` uint8 array, GIL released.
#[pyfunction]
#[pyo3(signature = (data, channels=3, format="auto", max_pixels=1 << 26))]
fn decode_image<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    channels: usize,
    format: &str,
    max_pixels: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let format = match format {
        "jpeg" => ImageFormat::Jpeg,
        "png" => ImageFormat::Png,
        "auto" => ImageFormat::Auto,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown image format {other:?}"
            )))
        }
    };
    let img = py
        .detach(|| image::decode(&data, format, channels, max_pixels))
        .map_err(|e| plain_error(py, "ExampleParseError", e))?;
    Ok(PyArray1::from_vec(py, img.pixels)
        .reshape([img.height, img.width, img.channels])?
        .into_any())
}

/// Encodes `height x width x channels` uint8 pixels as PNG (zlib `level` 0-9), GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, height, width, channels, level=None))]
fn encode_png<'py>(
    py: Python<'py>,
    pixels: PyBackedBytes,
    height: usize,
    width: usize,
    channels: usize,
    level: Option<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = py
        .detach(|| image::encode_png(&pixels, height, width, channels, level))
        .map_err(|e| plain_error(py, "EncodeError", e))?;
    Ok(PyBytes::new(py, &out))
}

/// Encodes `height x width x channels` uint8 pixels as baseline JPEG, GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, height, width, channels, quality=95, chroma_downsampling=true))]
fn encode_jpeg<'py>(
    py: Python<'py>,
    pixels: PyBackedBytes,
    height: usize,
    width: usize,
    channels: usize,
    quality: u8,
    chroma_downsampling: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = py
        .detach(|| {
            image::encode_jpeg(
                &pixels,
                height,
                width,
                channels,
                quality,
                chroma_downsampling,
            )
        })
        .map_err(|e| plain_error(py, "EncodeError", e))?;
    Ok(PyBytes::new(py, &out))
}

/// Decodes a serialized TensorProto holding `dtype` (a spec dtype code). Returns
/// `(values [1, *shape], view_dtype)` like a parsed column.
#[pyfunction]
fn parse_tensor<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    dtype: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let dtype = OutDType::from_code(dtype).map_err(|e| to_pyerr(py, e))?;
    let col = py
        .detach(|| decode::parse_tensor(&data, dtype))
        .map_err(|e| plain_error(py, "ExampleParseError", e))?;
    column_to_py(py, col)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_image, m)?)?;
    m.add_function(wrap_pyfunction!(encode_png, m)?)?;
    m.add_function(wrap_pyfunction!(encode_jpeg, m)?)?;
    m.add_function(wrap_pyfunction!(parse_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(masked_crc32c, m)?)?;
    m.add_class::<Chunk>()?;
    m.add_class::<RecordReader>()?;
    m.add_class::<RecordWriter>()?;
    m.add_class::<ExampleParser>()?;
    Ok(())
}
