//! TFRecord files from Python: [`RecordReader`] (over a path or a Python file object, with
//! the GIL released while framing) handing out [`Chunk`]s, and [`RecordWriter`].

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::errors::skip_dict;
use crate::error::{Error, Location};
use crate::pipeline::handles;
use crate::records::compress::{self, Compression};
use crate::records::crc;
use crate::records::reader::{self, Range, ReaderOptions};
use crate::records::writer;

/// Locks a reader's or writer's state. A poisoned lock (a panic while it was held) is a bug in
/// jaxrec, never something the caller did.
fn lock<'m, T>(m: &'m Mutex<T>, what: &str) -> Result<MutexGuard<'m, T>, Error> {
    m.lock()
        .map_err(|_| Error::internal(format!("{what} poisoned by an earlier panic")))
}

fn parse_compression(name: Option<&str>) -> Result<Option<Compression>, Error> {
    match name {
        Some(n) if n.eq_ignore_ascii_case("auto") => Ok(None),
        other => Compression::from_name(other).map(Some),
    }
}

/// Masked CRC32C of `data`, as stored in TFRecord headers and footers.
#[pyfunction]
pub(super) fn masked_crc32c(data: &[u8]) -> u32 {
    crc::masked_crc32c(data)
}

/// The distinct chunk ids record handles point into, ascending.
#[pyfunction]
pub(super) fn chunk_ids<'py>(
    py: Python<'py>,
    handles: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    Ok(PyArray1::from_vec(
        py,
        handles::chunk_ids(handles.as_slice()?),
    ))
}

/// Whole rounds of the interleave: round `r` holds block `r` (`k` handles) of each piece in
/// turn, `per[p]` holding piece `p`'s `rounds` blocks.
///
/// Raises:
///     ValueError: a piece holds other than `rounds * k` handles.
#[pyfunction]
pub(super) fn round_robin<'py>(
    py: Python<'py>,
    per: Vec<PyReadonlyArray1<'py, u64>>,
    rounds: usize,
    k: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let slices = per
        .iter()
        .map(|p| p.as_slice())
        .collect::<Result<Vec<_>, _>>()?;
    let out = handles::round_robin(&slices, rounds, k).ok_or_else(|| {
        PyValueError::new_err(format!(
            "round_robin: a piece holds other than {rounds} x {k} handles"
        ))
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// Records read in one go from one file: one buffer and the payload range of each record.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct Chunk {
    pub(super) inner: reader::Chunk,
    pub(super) path: Option<String>,
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

    /// `(file offset, index in the file)` of record `i`: where a reader resumes at it (what
    /// `file_offsets[i]` and `indices[i]` give, without making those arrays).
    ///
    /// Raises:
    ///     IndexError: no record `i`.
    fn position(&self, i: usize) -> PyResult<(u64, u64)> {
        match (self.inner.file_offsets.get(i), self.inner.indices.get(i)) {
            (Some(&offset), Some(&index)) => Ok((offset, index)),
            _ => Err(PyIndexError::new_err("chunk index out of range")),
        }
    }

    /// The handles (`cid << 32 | row`) of the rows whose record index lies in
    /// `first..=last` (`last` None: no end), in row order: the Loader's records of this chunk
    /// once it registered it as `cid`.
    #[pyo3(signature = (cid, first, last=None))]
    fn handles_between<'py>(
        &self,
        py: Python<'py>,
        cid: u32,
        first: u64,
        last: Option<u64>,
    ) -> Bound<'py, PyArray1<u64>> {
        let h = handles::rows_between(u64::from(cid), &self.inner.indices, first, last);
        PyArray1::from_vec(py, h)
    }

    /// Payload bytes in the chunk.
    #[getter]
    fn payload_bytes(&self) -> usize {
        self.inner.payload_bytes()
    }
}

impl Chunk {
    /// Where record `i` of the chunk is in its file.
    pub(super) fn location(&self, i: usize) -> Option<Location> {
        Some(Location {
            path: self.path.clone(),
            record_index: Some(*self.inner.indices.get(i)?),
            byte_offset: Some(*self.inner.file_offsets.get(i)?),
        })
    }

    /// Every record's payload.
    pub(super) fn records(&self) -> Vec<&[u8]> {
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
pub(super) struct RecordReader {
    inner: Mutex<reader::RecordReader>,
    path: String,
}

impl RecordReader {
    /// A read job of the Loader's (see `queue.rs`): frames past `skip` records, then reads the
    /// next chunk as [`Self::read_chunk`] does; `None` where the stream ends first. Runs on a
    /// native thread without the GIL (a file object's reads take it themselves).
    pub(super) fn skip_then_read(
        &self,
        skip: u64,
        max_records: usize,
        block_bytes: usize,
    ) -> Result<Option<Chunk>, Error> {
        let mut reader = lock(&self.inner, "reader")?;
        if skip > 0 && reader.skip(skip)? < skip {
            return Ok(None);
        }
        Ok(reader.next_chunk(max_records, block_bytes)?.map(|c| Chunk {
            inner: c,
            path: Some(self.path.clone()),
        }))
    }
}

#[pymethods]
impl RecordReader {
    /// Opens `path`; with `file` (a binary file object, e.g. from `fsspec.open`) reads that
    /// instead, `path` then only naming it in errors and for compression inference, and `size`
    /// its length if known (so record lengths are checked before allocating).
    ///
    /// The reader covers records whose header starts in `[start_offset, end_offset)`: from a
    /// record boundary, or with `sync=True` (plain files) from any byte, scanning for the first
    /// true record (`start_index` is then that record's index). `max_record_bytes` bounds a
    /// record's declared length (a longer one is corrupt); None is the default, 1 GiB.
    #[new]
    #[pyo3(signature = (
        path, compression="auto", verify=true, skip_errors=false, start_offset=0, start_index=0,
        file=None, size=None, *, end_offset=None, sync=false, max_record_bytes=None,
    ))]
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
        end_offset: Option<u64>,
        sync: bool,
        max_record_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let comp = parse_compression(compression)?;
        let opts = ReaderOptions {
            verify,
            skip_errors,
            max_record_bytes: max_record_bytes.unwrap_or(reader::DEFAULT_MAX_RECORD_BYTES),
        };
        let range = Range {
            start_offset,
            start_index,
            end_offset,
            sync,
        };
        let display = path.display().to_string();
        let reader = py.detach(|| match file {
            None => reader::RecordReader::open(&path, comp, opts, range),
            Some(obj) => {
                let source =
                    compress::open_stream(PyFile(obj), &path, comp, size).map_err(|e| {
                        Error::Io {
                            path: Some(display.clone()),
                            source: e,
                        }
                    })?;
                reader::RecordReader::from_source(source, display.clone(), opts, range)
            }
        })?;
        Ok(RecordReader {
            inner: Mutex::new(reader),
            path: path.display().to_string(),
        })
    }

    /// Reads up to `max_records` records of the current block of about `block_bytes` of file
    /// (a larger record gets a block of its own). Returns None at the end of the file or range.
    #[pyo3(signature = (max_records=usize::MAX, block_bytes=4 << 20))]
    fn read_chunk(
        &self,
        py: Python<'_>,
        max_records: usize,
        block_bytes: usize,
    ) -> PyResult<Option<Chunk>> {
        Ok(py.detach(|| self.skip_then_read(0, max_records, block_bytes))?)
    }

    /// Frames past up to `n` records without returning them; returns how many (fewer at the
    /// end of the file or range). Length CRCs are checked, data CRCs are not (payloads are
    /// seeked past in plain files, not read).
    fn skip(&self, py: Python<'_>, n: u64) -> PyResult<u64> {
        Ok(py.detach(|| lock(&self.inner, "reader")?.skip(n))?)
    }

    /// Offset of the next record's header: once the range is read, the first record at or
    /// after `end_offset` (the file's length at its end). None when unknown: a synced range
    /// that holds no record start, or after framing was lost to an error.
    #[getter]
    fn next_offset(&self) -> PyResult<Option<u64>> {
        Ok(lock(&self.inner, "reader")?.next_offset())
    }

    /// Index in the file of the next record.
    #[getter]
    fn next_index(&self) -> PyResult<u64> {
        Ok(lock(&self.inner, "reader")?.next_index())
    }

    /// The compression in effect: "", "GZIP" or "ZLIB".
    #[getter]
    fn compression(&self) -> PyResult<&'static str> {
        Ok(lock(&self.inner, "reader")?.compression().name())
    }

    /// Counters: `records`, `bytes`, `skipped_records`, `skipped_bytes`; and the first 100
    /// skipped records, as messages (`errors`) and as dicts (`skips`, see `skip_dict`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = lock(&self.inner, "reader")?.stats().clone();
        let d = PyDict::new(py);
        d.set_item("records", s.records)?;
        d.set_item("bytes", s.bytes)?;
        d.set_item("skipped_records", s.skipped_records)?;
        d.set_item("skipped_bytes", s.skipped_bytes)?;
        let errors: Vec<String> = s.skips.iter().map(ToString::to_string).collect();
        d.set_item("errors", errors)?;
        let skips = PyList::empty(py);
        for skip in &s.skips {
            skips.append(skip_dict(py, skip, None)?)?;
        }
        d.set_item("skips", skips)?;
        Ok(d)
    }
}

/// Writes framed records to a (possibly compressed) file.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct RecordWriter {
    inner: Mutex<writer::RecordWriter>,
}

impl RecordWriter {
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut writer::RecordWriter) -> Result<R, Error> + Send,
    ) -> PyResult<R>
    where
        R: Send,
    {
        Ok(py.detach(|| f(&mut *lock(&self.inner, "writer")?))?)
    }
}

#[pymethods]
impl RecordWriter {
    #[new]
    #[pyo3(signature = (path, compression=None, level=None))]
    fn new(path: PathBuf, compression: Option<&str>, level: Option<u32>) -> PyResult<Self> {
        let comp = Compression::from_name(compression)?;
        if level.is_some_and(|l| l > 9) {
            return Err(PyValueError::new_err("compression level must be 0..9"));
        }
        let w = writer::RecordWriter::create(&path, comp, level)?;
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
        Ok(lock(&self.inner, "writer")?.records())
    }
}
