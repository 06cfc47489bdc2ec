//! [`NativeStream`]: one host's records of a segment of an epoch, read and queued as batches
//! with no Python step per block, per piece or per batch.
//!
//! The native twin of `jaxrec/_loader/stream.py`'s `EpochStream` for the Loader's common case:
//! pieces that are ranges of local files (counted, or read to their ends) or subsets of them
//! (an elastic resume's), reads on the parse queue, shuffled by windows or not, bad records
//! raised or skipped. It takes the same records in the same order (the interleave of
//! [`crate::pipeline::interleave`], each window in the permutation Python draws for it), reads
//! the same blocks (each open piece one block ahead on the queue's threads) and says where its
//! readers stood the same way (the hint), so a state saved from either resumes on either.
//!
//! ```text
//! take(n)        the next n records (fewer at the segment's end): reads waited for with the
//!                GIL released; records travel as handles (chunk id << 32 | row)
//! submit(n)      the held records as parse jobs of n rows, in one queue call
//! hint()         where the interleave and the open pieces' readers stood (before the last
//!                take; shuffled: before the last window read)
//! ```
//!
//! In Python, the stream's bookkeeping (a few calls a block per piece, a reader position a
//! piece a group, the handles' chunk registry) was about 4 us of the ~75 us of CPU a tokens
//! batch costs, on the thread that also takes the batches.

use std::collections::VecDeque;
use std::ops::Range;

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{PyTraverseError, PyVisit};

use super::errors::file_changed;
use super::queue::{ParseQueue, HOLE};
use super::records::{Chunk, RecordReader};
use crate::pipeline::block_size::AutoBlocks;
use crate::pipeline::handles;
use crate::pipeline::interleave::{Interleave, Step};

/// Seconds between a waiting read's checks for signals (Ctrl-C).
const POLL_SECONDS: f64 = 0.1;

/// Bits of a handle that hold the row (`jaxrec/_loader/chunks.py`).
const ROW_BITS: u32 = 32;

/// Wanted rows of chunk `id` that a piece has not handed out yet; with `id` [`HOLE`],
/// `rows.len()` records of a counted piece that its reader skipped as bad (each handed out as
/// a hole, which keeps the records after it at their counted positions).
struct Entry {
    id: u64,
    rows: Range<usize>,
}

/// The chunks that records point into, by id (handed out in order), each with how many
/// references it has: one from its piece while it holds rows of it, one a record taken and
/// not yet submitted. A chunk is dropped when the last goes; ids stay dense from the oldest
/// live chunk, so a lookup is an index.
#[derive(Default)]
struct Chunks {
    /// The id of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<(Py<Chunk>, u64)>>,
}

impl Chunks {
    /// Adds a chunk its piece refers to; returns its id.
    fn add(&mut self, chunk: Py<Chunk>) -> u64 {
        self.slots.push_back(Some((chunk, 1)));
        self.base + self.slots.len() as u64 - 1
    }

    fn index(&self, id: u64) -> Option<usize> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    fn get(&self, id: u64) -> PyResult<&Py<Chunk>> {
        self.index(id)
            .and_then(|i| self.slots[i].as_ref())
            .map(|(c, _)| c)
            .ok_or_else(|| lost(id))
    }

    /// `k` more references to chunk `id`.
    fn retain(&mut self, id: u64, k: u64) -> PyResult<()> {
        let i = self.index(id).ok_or_else(|| lost(id))?;
        let (_, refs) = self.slots[i].as_mut().ok_or_else(|| lost(id))?;
        *refs += k;
        Ok(())
    }

    /// `k` references to chunk `id` fewer: dropped at none.
    fn release(&mut self, id: u64, k: u64) -> PyResult<()> {
        let i = self.index(id).ok_or_else(|| lost(id))?;
        let (_, refs) = self.slots[i].as_mut().ok_or_else(|| lost(id))?;
        *refs = refs.checked_sub(k).ok_or_else(|| lost(id))?;
        if *refs == 0 {
            self.slots[i] = None;
            while matches!(self.slots.front(), Some(None)) {
                self.slots.pop_front();
                self.base += 1;
            }
        }
        Ok(())
    }

    /// Releases the references of records `handles`, a run of one chunk at a time.
    fn release_all(&mut self, handles: &[u64]) -> PyResult<()> {
        for run in handles.chunk_by(|a, b| a >> ROW_BITS == b >> ROW_BITS) {
            if run[0] != HOLE {
                self.release(run[0] >> ROW_BITS, run.len() as u64)?;
            }
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.base += self.slots.len() as u64;
        self.slots.clear();
    }
}

/// A piece taken from before it was opened: a bug, said as one (never a panic).
fn not_open(piece: usize) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!(
        "piece {piece} is not open (this is a bug in jaxrec; please report it)"
    ))
}

/// A reference count gone wrong: a bug, said as one (never a panic).
fn lost(id: u64) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!(
        "chunk {id} is not held (this is a bug in jaxrec; please report it)"
    ))
}

/// Counters for the Loader's stats, handed over by [`NativeStream::counters`].
#[derive(Default, Clone, Copy)]
struct Counters {
    records: u64,
    bytes: u64,
    read_seconds: f64,
}

/// One open piece: records `first..=last` of a file (`readers.py`'s `PieceReader`), or a subset
/// of them (`keep`); a piece of uncounted records (`last` and `need` None) ends where its
/// reader does.
struct Piece {
    reader: Option<Py<RecordReader>>,
    path: String,
    first: u64,
    last: Option<u64>,
    /// The records wanted, for a subset piece (an elastic resume's): ascending indices in the
    /// file, `first` and `last` among them.
    keep: Option<Vec<u64>>,
    need: Option<u64>,
    found: u64,
    /// Index in the file of the record after the last block read.
    next_index: u64,
    /// Skipping, the first record not yet handed out, good or bad (see `fill`).
    holes_from: u64,
    /// Records to frame past before the first block (from the span's start or a hint).
    skip: u64,
    block_bytes: usize,
    auto: Option<AutoBlocks>,
    queue: VecDeque<Entry>,
    /// The read ticket of the block read ahead.
    ahead: Option<u64>,
    /// Bad records are skipped (`on_error="skip"`): a counted piece may end short.
    skip_errors: bool,
}

impl Piece {
    fn queued(&self) -> u64 {
        self.queue.iter().map(|e| e.rows.len() as u64).sum()
    }

    /// Queues the next block's read, unless the piece has all it needs.
    fn read_ahead(&mut self, py: Python<'_>, queue: &ParseQueue) -> PyResult<()> {
        // Never past the last wanted record: the rest of the file is not this piece's.
        let limit = self
            .last
            .map_or(u64::MAX, |last| (last + 1).saturating_sub(self.next_index));
        let done = self.need.is_some_and(|n| self.found + self.queued() >= n);
        self.ahead = None;
        let Some(reader) = self.reader.as_ref() else {
            return Ok(());
        };
        if limit == 0 || done {
            return Ok(());
        }
        let skip = std::mem::take(&mut self.skip);
        let max_records = usize::try_from(limit).unwrap_or(usize::MAX);
        self.ahead =
            Some(queue.submit_read(reader.clone_ref(py), skip, max_records, self.block_bytes)?);
        Ok(())
    }

    /// Waits for the block read ahead and queues its wanted rows; false when there is none.
    fn fill(
        &mut self,
        py: Python<'_>,
        queue: &ParseQueue,
        chunks: &mut Chunks,
        n: &mut Counters,
    ) -> PyResult<bool> {
        let Some(ticket) = self.ahead else {
            return Ok(false);
        };
        let done = loop {
            if let Some(done) = queue.wait_read(py, ticket, Some(POLL_SECONDS))? {
                break done;
            }
            py.check_signals()?;
        };
        self.ahead = None;
        n.read_seconds += done.seconds;
        let Some(chunk) = done.chunk? else {
            return Ok(false);
        };
        let c = &chunk.inner;
        self.next_index = c.next_index;
        let nbytes = c.payload_bytes();
        // The records framed, wanted or not, say how large this piece's records are.
        if let Some(size) = self.auto.and_then(|a| a.after(nbytes, c.len())) {
            self.block_bytes = size;
        }
        n.bytes += nbytes as u64;
        // The chunk holds the file's records its reader kept, in file order; the piece wants
        // those from `first` to `last`, or those of them in `keep`.
        let end = self.last.map_or(u64::MAX, |last| last.saturating_add(1));
        let mut runs = if self.keep.is_none() && !self.skip_errors {
            // Every record of the range is held: one run.
            let lo = c.indices.partition_point(|&i| i < self.first);
            let hi = c.indices.partition_point(|&i| i < end).max(lo);
            vec![(true, lo, hi - lo)]
        } else {
            // Skipping, each record the reader skipped leaves a hole before the next good one
            // (`holes_from`: the first record not yet handed out, good or bad). Bad records
            // after the last good one wait for the next: a read from elsewhere (a resume's, its
            // blocks starting at other records) may frame them in another block, or in none at
            // all (a read that frames only bad records gives no block), and the positions must
            // not depend on where blocks begin. A counted piece's bad records at its end are
            // holes from `take`; an uncounted piece's are never handed out (a resume reads them
            // again, to skip them again).
            let from = self.holes_from;
            let chunk_end = c.next_index.min(end);
            let mut runs = match &self.keep {
                Some(keep) => {
                    let wanted = &keep[keep.partition_point(|&i| i < from)..];
                    let wanted = &wanted[..wanted.partition_point(|&i| i < chunk_end)];
                    handles::wanted_runs(&c.indices, wanted.iter().copied())
                }
                None => handles::wanted_runs(&c.indices, from..chunk_end),
            };
            while runs.last().is_some_and(|r| !r.0) {
                runs.pop();
            }
            if let Some(&(_, start, len)) = runs.last() {
                self.holes_from = c.indices[start + len - 1] + 1;
            }
            runs
        };
        runs.retain(|r| r.2 > 0);
        let held: usize = runs.iter().filter(|r| r.0).map(|r| r.2).sum();
        n.records += held as u64;
        if held > 0 {
            // One reference a run of its rows.
            let id = chunks.add(Py::new(py, chunk)?);
            let refs = runs.iter().filter(|r| r.0).count() as u64;
            chunks.retain(id, refs - 1)?;
            for (kept, start, len) in runs {
                let (id, rows) = if kept {
                    (id, start..start + len)
                } else {
                    (HOLE, 0..len)
                };
                self.queue.push_back(Entry { id, rows });
            }
        }
        self.read_ahead(py, queue)?;
        Ok(true)
    }

    /// The next `count` records' handles into `out`; returns how many, fewer only at the end of
    /// an uncounted piece.
    ///
    /// Raises FileChangedError when the file ends before a counted piece does.
    fn take(
        &mut self,
        py: Python<'_>,
        count: u64,
        queue: &ParseQueue,
        chunks: &mut Chunks,
        out: &mut Vec<u64>,
        n: &mut Counters,
    ) -> PyResult<u64> {
        let mut need = count;
        while need > 0 {
            let Some(e) = self.queue.front_mut() else {
                if !self.fill(py, queue, chunks, n)? {
                    if self.need.is_some() && !self.skip_errors {
                        return Err(self.short());
                    }
                    if self.need.is_some() {
                        // Skipping, the file ended short (the reader counted the records it
                        // skipped): holes keep the positions, as for any record skipped.
                        out.extend(std::iter::repeat_n(HOLE, need as usize));
                        self.found += need;
                        need = 0;
                    }
                    break; // (uncounted: the piece's end)
                }
                continue;
            };
            let got = need.min(e.rows.len() as u64);
            if e.id == HOLE {
                out.extend(std::iter::repeat_n(HOLE, got as usize));
                e.rows.start += got as usize;
                need -= got;
                self.found += got;
                if e.rows.is_empty() {
                    self.queue.pop_front();
                }
                continue;
            }
            let base = e.id << ROW_BITS;
            let rows = e.rows.start..e.rows.start + got as usize;
            out.extend(rows.map(|r| base | r as u64));
            e.rows.start += got as usize;
            chunks.retain(e.id, got)?;
            need -= got;
            self.found += got;
            if e.rows.is_empty() {
                chunks.release(e.id, 1)?;
                self.queue.pop_front();
            }
        }
        Ok(count - need)
    }

    /// Reads until `n` records wait (or the piece has no more); returns how many wait.
    fn ensure(
        &mut self,
        py: Python<'_>,
        n: u64,
        queue: &ParseQueue,
        chunks: &mut Chunks,
        counters: &mut Counters,
    ) -> PyResult<u64> {
        loop {
            let queued = self.queued();
            if queued >= n || !self.fill(py, queue, chunks, counters)? {
                return Ok(queued); // (a fill that found no block queued nothing)
            }
        }
    }

    fn short(&self) -> PyErr {
        file_changed(
            format!(
                "ended {} records short of records {}..{} that were counted when the epoch was \
                 planned; the file changed (rewritten, truncated?) since it was counted",
                self.need.unwrap_or(0).saturating_sub(self.found),
                self.first,
                self.last.unwrap_or(0)
            ),
            &self.path,
            self.next_index,
        )
    }

    /// `(byte offset, record index)` of the next record to hand out, if read.
    fn position(&self, chunks: &Chunks) -> Option<(u64, u64)> {
        let e = self.queue.front()?;
        let c = &chunks.get(e.id).ok()?.get().inner;
        Some((
            *c.file_offsets.get(e.rows.start)?,
            *c.indices.get(e.rows.start)?,
        ))
    }

    /// Stops reading: the read ahead is dropped when done, the chunks queued released.
    fn close(&mut self, queue: &ParseQueue, chunks: &mut Chunks) -> PyResult<()> {
        if let Some(ticket) = self.ahead.take() {
            queue.forget_read(ticket);
        }
        self.reader = None;
        for e in self.queue.drain(..) {
            if e.id != HOLE {
                chunks.release(e.id, 1)?;
            }
        }
        Ok(())
    }
}

/// The open pieces in the order they were opened (as Python's dict of readers keeps them: what
/// the readers skipped is reported in that order).
#[derive(Default)]
struct OpenPieces(Vec<(usize, Piece)>);

impl OpenPieces {
    fn contains_key(&self, piece: &usize) -> bool {
        self.0.iter().any(|(p, _)| p == piece)
    }

    fn get(&self, piece: &usize) -> Option<&Piece> {
        self.0.iter().find(|(p, _)| p == piece).map(|(_, r)| r)
    }

    fn get_mut(&mut self, piece: &usize) -> Option<&mut Piece> {
        self.0.iter_mut().find(|(p, _)| p == piece).map(|(_, r)| r)
    }

    fn insert(&mut self, piece: usize, reader: Piece) {
        self.0.push((piece, reader));
    }

    fn remove(&mut self, piece: &usize) -> Option<Piece> {
        let at = self.0.iter().position(|(p, _)| p == piece)?;
        Some(self.0.remove(at).1)
    }

    fn keys(&self) -> impl Iterator<Item = &usize> {
        self.0.iter().map(|(p, _)| p)
    }

    fn values(&self) -> impl Iterator<Item = &Piece> {
        self.0.iter().map(|(_, r)| r)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Piece> {
        self.0.iter_mut().map(|(_, r)| r)
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Whole rounds into `out`: in round `r`, block `r` (`k` handles) of each piece's handles in
/// turn. A piece that came up short (bad records skipped) gives what it has of each block, as
/// far as it goes: the round order kept.
fn round_robin(per: &[Vec<u64>], rounds: u64, k: u64, out: &mut Vec<u64>) {
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    for r in 0..usize::try_from(rounds).unwrap_or(usize::MAX) {
        for handles in per {
            let lo = r.saturating_mul(k).min(handles.len());
            let hi = lo.saturating_add(k).min(handles.len());
            out.extend_from_slice(&handles[lo..hi]);
        }
    }
}

/// What `open_piece` returns: `(reader, path, first, last, need, skip, keep)`.
type Opened<'py> = (
    Option<Py<RecordReader>>,
    String,
    u64,
    Option<u64>,
    Option<u64>,
    u64,
    Option<PyReadonlyArray1<'py, u64>>,
);

/// Where the interleave and the open pieces' readers stood: `(position, interleave, files)`.
type Hint = (u64, Interleave, Vec<(usize, (u64, u64))>);

/// A host's records of one segment, read on a parse queue and queued there as batches.
///
/// `open_piece(i)` opens piece `i` where its next record is: `(reader, path, first, last,
/// need, skip, keep)`, with `reader` a `RecordReader` (None when the piece needs no record), `last`
/// and `need` None for a piece of uncounted records, `keep` the uint64 indices in the file of
/// a subset piece's records (None for a range). Pieces are counted (`lengths` >= 0) or
/// uncounted (all -1): those end where their readers do, as Python's `_interleave_unknown`
/// has it. With `window` records a shuffle window, `window_order(w, size)` is the order window `w`
/// emits its records in (an int64 permutation of `size`).
#[pyclass(module = "jaxrec._native")]
pub(super) struct NativeStream {
    /// The pieces' lengths (0 when uncounted).
    lengths: Vec<u64>,
    known: bool,
    cycle_length: usize,
    block_length: u64,
    state: Interleave,
    /// Records the interleave has given.
    position: u64,
    /// Records in all (counted).
    total: u64,
    finished: bool,
    /// Records per shuffle window (0: none), and the next window to read.
    window: u64,
    next_window: u64,
    /// None once cleared by the garbage collector (`__clear__`).
    open_piece: Option<Py<PyAny>>,
    window_order: Option<Py<PyAny>>,
    queue: Py<ParseQueue>,
    block_bytes: Option<usize>,
    auto: AutoBlocks,
    pieces: OpenPieces,
    chunks: Chunks,
    /// Records read and not yet taken: a shuffled stream's permuted window, an uncounted
    /// stream's record read beyond its last take.
    pending: VecDeque<u64>,
    /// The records taken since the last submit.
    held: Vec<u64>,
    /// Per piece of a step of whole rounds, its handles; a window's records before their
    /// permutation (both kept: no fresh memory a group).
    per_piece: Vec<Vec<u64>>,
    read: Vec<u64>,
    counters: Counters,
    /// Records and bytes read in all, for the mean record size.
    read_records: u64,
    read_bytes: u64,
    hint: Option<Hint>,
    /// Bad records are skipped (`on_error="skip"`): each leaves a hole.
    skip_errors: bool,
    /// Skipping, the counters (`RecordReader.stats()`) of the readers closed since the last
    /// `counters()`: what they skipped.
    closed: Vec<Py<PyAny>>,
}

impl NativeStream {
    /// The held records as batches of `batch_size` positions: the chunks they use (each once)
    /// and each batch's picks, `(place in those chunks, row)`, holes left out.
    #[allow(clippy::type_complexity)]
    fn picks(
        &self,
        py: Python<'_>,
        batch_size: usize,
    ) -> PyResult<(Vec<Py<Chunk>>, Vec<Vec<(usize, usize)>>)> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        // Each chunk the batches use goes once into their list: its place there by its
        // index in the table (usize::MAX: not yet), looked up once a run of one chunk.
        let span = self.chunks.slots.len();
        let mut place = vec![usize::MAX; span];
        let mut used: Vec<Py<Chunk>> = Vec::new();
        let mut parts = Vec::with_capacity(self.held.len().div_ceil(batch_size));
        for part in self.held.chunks(batch_size) {
            let mut picks = Vec::with_capacity(part.len());
            for run in part.chunk_by(|a, b| a >> ROW_BITS == b >> ROW_BITS) {
                if run[0] == HOLE {
                    continue;
                }
                let id = run[0] >> ROW_BITS;
                let i = self.chunks.index(id).ok_or_else(|| lost(id))?;
                if place[i] == usize::MAX {
                    place[i] = used.len();
                    used.push(self.chunks.get(id)?.clone_ref(py));
                }
                let at = place[i];
                picks.extend(run.iter().map(|&h| (at, (h & 0xFFFF_FFFF) as usize)));
            }
            parts.push(picks);
        }
        Ok((used, parts))
    }

    /// Lets the held records go (their chunks' references with them).
    fn release_held(&mut self) -> PyResult<()> {
        let held = std::mem::take(&mut self.held);
        let released = self.chunks.release_all(&held);
        self.held = held;
        self.held.clear();
        released
    }

    /// Opens piece `piece` unless open.
    fn open(&mut self, py: Python<'_>, piece: usize) -> PyResult<()> {
        if self.pieces.contains_key(&piece) {
            return Ok(());
        }
        let opened = self
            .open_piece
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the stream was cleared"))?
            .bind(py)
            .call1((piece,))?;
        let (reader, path, first, last, need, skip, keep): Opened = opened.extract()?;
        let auto = self.block_bytes.is_none().then_some(self.auto);
        let mut p = Piece {
            reader,
            path,
            first,
            last,
            keep: keep
                .map(|k| k.as_slice().map(<[u64]>::to_vec))
                .transpose()?,
            need,
            found: 0,
            next_index: first,
            holes_from: first,
            skip,
            block_bytes: self.block_bytes.unwrap_or(self.auto.min),
            auto,
            queue: VecDeque::new(),
            ahead: None,
            skip_errors: self.skip_errors,
        };
        if need != Some(0) {
            p.read_ahead(py, self.queue.get())?;
        }
        self.pieces.insert(piece, p);
        Ok(())
    }

    /// `count` records of `piece` into `out`.
    fn take_from(
        &mut self,
        py: Python<'_>,
        piece: usize,
        count: u64,
        out: &mut Vec<u64>,
    ) -> PyResult<u64> {
        let p = self.pieces.get_mut(&piece).ok_or_else(|| not_open(piece))?;
        p.take(
            py,
            count,
            self.queue.get(),
            &mut self.chunks,
            out,
            &mut self.counters,
        )
    }

    /// `rounds` whole rounds of `pieces` (open) into `out`: each piece's records taken in one
    /// go, then interleaved a block at a time.
    fn take_rounds(
        &mut self,
        py: Python<'_>,
        pieces: &[usize],
        rounds: u64,
        out: &mut Vec<u64>,
    ) -> PyResult<()> {
        let each = rounds * self.block_length;
        let mut per = std::mem::take(&mut self.per_piece);
        per.resize_with(pieces.len(), Vec::new);
        let mut got = Ok(0);
        for (&p, handles) in pieces.iter().zip(per.iter_mut()) {
            handles.clear();
            got = self.take_from(py, p, each, handles);
            if got.is_err() {
                break;
            }
        }
        if got.is_ok() {
            round_robin(&per[..pieces.len()], rounds, self.block_length, out);
        }
        self.per_piece = per; // kept, errors or not: no fresh memory a group
        got.map(drop)
    }

    /// The next up to `records` records in interleave order, into `out`.
    fn interleave(&mut self, py: Python<'_>, records: u64, out: &mut Vec<u64>) -> PyResult<()> {
        let mut left = records;
        let k = self.block_length;
        while left > 0 {
            let Some(step) = self.state.step(&self.lengths, self.cycle_length, k, left) else {
                break;
            };
            match step {
                Step::Rounds { pieces, rounds, .. } => {
                    // Every piece opened (its first read queued) before any take waits on one.
                    for &p in &pieces {
                        self.open(py, p)?;
                    }
                    self.take_rounds(py, &pieces, rounds, out)?;
                    let got = rounds * k * pieces.len() as u64;
                    left -= got;
                    self.position += got;
                }
                Step::Run { piece, count, .. } => {
                    self.open(py, piece)?;
                    self.take_from(py, piece, count, out)?;
                    left -= count;
                    self.position += count;
                }
            }
            self.close_finished(py)?;
        }
        if self.state.done(self.lengths.len()) {
            self.finished = true;
        }
        Ok(())
    }

    /// The interleave over pieces whose ends are found by reading them: the next up to
    /// `records` records into `out` (Python's `EpochStream._interleave_unknown`, step for step).
    ///
    /// The same order as the counted interleave would give for their lengths, except that a
    /// piece is known to have ended only when a take comes up short, so its slot passes on one
    /// turn later. Whole rounds are taken at once while every open piece has the records
    /// queued (no piece can end within them).
    fn interleave_unknown(
        &mut self,
        py: Python<'_>,
        records: u64,
        out: &mut Vec<u64>,
    ) -> PyResult<()> {
        let k = self.block_length;
        let n = self.lengths.len();
        let mut got = 0;
        while got < records {
            if self.state.at == 0 {
                self.state.fill(n, self.cycle_length);
                if self.state.slots.is_empty() {
                    self.finished = true;
                    break;
                }
                let slots: Vec<usize> = self.state.slots.iter().map(|s| s.0).collect();
                let per_round = k * slots.len() as u64;
                let mut rounds = (records - got) / per_round;
                if rounds >= 2 && self.state.in_block == 0 {
                    for &p in &slots {
                        self.open(py, p)?;
                    }
                    for &p in &slots {
                        let queue = self.queue.get();
                        let piece = self.pieces.get_mut(&p).ok_or_else(|| not_open(p))?;
                        let queued = piece.ensure(
                            py,
                            rounds * k,
                            queue,
                            &mut self.chunks,
                            &mut self.counters,
                        )?;
                        rounds = rounds.min(queued / k);
                    }
                }
                if rounds >= 2 && self.state.in_block == 0 {
                    let each = rounds * k;
                    self.take_rounds(py, &slots, rounds, out)?;
                    for slot in &mut self.state.slots {
                        slot.1 += each;
                    }
                    got += each * slots.len() as u64;
                    self.position += each * slots.len() as u64;
                    continue;
                }
            }
            let (piece, taken) = self.state.slots[self.state.at];
            let want = (k - self.state.in_block).min(records - got);
            self.open(py, piece)?;
            let took = self.take_from(py, piece, want, out)?;
            got += took;
            self.position += took;
            self.state.slots[self.state.at].1 = taken + took;
            if took < want {
                // The piece ended.
                self.state.in_block = 0;
                self.state.finish_slot(n);
                self.close_finished(py)?;
            } else if want == k - self.state.in_block {
                self.state.in_block = 0;
                self.state.at = (self.state.at + 1) % self.state.slots.len();
            } else {
                self.state.in_block += took;
            }
        }
        Ok(())
    }

    /// The next up to `records` records into `out`, counted or not.
    fn next_records(&mut self, py: Python<'_>, records: u64, out: &mut Vec<u64>) -> PyResult<()> {
        if self.known {
            self.interleave(py, records, out)
        } else {
            self.interleave_unknown(py, records, out)
        }
    }

    /// Reads the next shuffle window and appends its records to `pending` in its order.
    fn read_window(&mut self, py: Python<'_>) -> PyResult<()> {
        let w = self.window;
        let size = if self.known {
            w.min(self.total.saturating_sub(self.next_window * w))
        } else {
            w
        };
        self.hint = Some(self.take_hint());
        let mut read = std::mem::take(&mut self.read);
        read.clear();
        let got = self.next_records(py, size, &mut read);
        let ordered = got.and_then(|()| {
            let order = self
                .window_order
                .as_ref()
                .ok_or_else(|| PyValueError::new_err("the stream was cleared"))?
                .call1(py, (self.next_window, read.len()))?;
            let order: PyReadonlyArray1<'_, i64> = order.extract(py)?;
            let order = order.as_slice()?;
            if order.len() != read.len() {
                return Err(PyValueError::new_err("window_order gave a wrong length"));
            }
            let start = self.pending.len();
            for &i in order {
                match usize::try_from(i).ok().and_then(|i| read.get(i)) {
                    Some(&h) => self.pending.push_back(h),
                    None => {
                        let wrong: Vec<u64> = self.pending.drain(start..).collect();
                        self.chunks.release_all(&wrong)?;
                        return Err(PyValueError::new_err("window_order gave no permutation"));
                    }
                }
            }
            Ok(())
        });
        if ordered.is_err() {
            self.chunks.release_all(&read)?; // (those read and not kept)
        }
        self.read = read;
        ordered?;
        self.next_window += 1;
        Ok(())
    }

    /// Closes the pieces that left the interleave's slots.
    fn close_finished(&mut self, py: Python<'_>) -> PyResult<()> {
        let slots = &self.state.slots;
        let done: Vec<usize> = self
            .pieces
            .keys()
            .copied()
            .filter(|piece| !slots.iter().any(|s| s.0 == *piece))
            .collect();
        for piece in done {
            if let Some(mut p) = self.pieces.remove(&piece) {
                self.note_skips(py, &p)?;
                p.close(self.queue.get(), &mut self.chunks)?;
            }
        }
        Ok(())
    }

    /// Skipping, keeps what a piece's reader skipped, for the Loader's stats.
    fn note_skips(&mut self, py: Python<'_>, p: &Piece) -> PyResult<()> {
        if let (true, Some(reader)) = (self.skip_errors, &p.reader) {
            self.closed
                .push(reader.bind(py).call_method0("stats")?.unbind());
        }
        Ok(())
    }

    fn take_hint(&self) -> Hint {
        let files = self
            .state
            .slots
            .iter()
            .filter_map(|&(piece, _)| {
                Some((piece, self.pieces.get(&piece)?.position(&self.chunks)?))
            })
            .collect();
        (self.position, self.state.clone(), files)
    }
}

#[pymethods]
impl NativeStream {
    /// The stream at interleave position `position` (state `(next_piece, slots, at,
    /// in_block)`) over pieces of `lengths` records. `block_bytes` None: chosen per piece,
    /// from `auto_blocks` `(min bytes, records, max bytes)`. `window` > 0: shuffled in
    /// windows of that many records, `window_order` giving each window's order.
    #[new]
    #[pyo3(signature = (
        lengths, cycle_length, block_length, state, position, open_piece, queue, block_bytes,
        auto_blocks, window=0, window_order=None, skip_errors=false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        lengths: Vec<i64>,
        cycle_length: usize,
        block_length: u64,
        state: (usize, Vec<(usize, u64)>, usize, u64),
        position: u64,
        open_piece: Py<PyAny>,
        queue: Py<ParseQueue>,
        block_bytes: Option<usize>,
        auto_blocks: (usize, usize, usize),
        window: u64,
        window_order: Option<Py<PyAny>>,
        skip_errors: bool,
    ) -> PyResult<Self> {
        if cycle_length == 0 || block_length == 0 {
            return Err(PyValueError::new_err(
                "cycle_length and block_length must be at least 1",
            ));
        }
        if window > 0 && window_order.is_none() {
            return Err(PyValueError::new_err("a shuffle window needs window_order"));
        }
        let known = lengths.iter().all(|&n| n >= 0);
        if !known && lengths.iter().any(|&n| n >= 0) {
            return Err(PyValueError::new_err(
                "pieces must be all counted or all uncounted (-1)",
            ));
        }
        let lengths: Vec<u64> = lengths.iter().map(|&n| n.max(0) as u64).collect();
        let (next_piece, slots, at, in_block) = state;
        if next_piece > lengths.len()
            || slots
                .iter()
                .any(|&(p, t)| p >= lengths.len() || (known && t > lengths[p]))
            || (at > 0 && at >= slots.len())
            || in_block >= block_length
            || (in_block > 0 && slots.is_empty())
        {
            return Err(PyValueError::new_err(
                "the interleave state does not fit the pieces",
            ));
        }
        let (min, records, max) = auto_blocks;
        Ok(NativeStream {
            total: lengths.iter().sum(),
            lengths,
            known,
            cycle_length,
            block_length,
            state: Interleave {
                next_piece,
                slots,
                at,
                in_block,
            },
            position,
            finished: false,
            window,
            next_window: 0,
            open_piece: Some(open_piece),
            window_order,
            queue,
            block_bytes,
            auto: AutoBlocks { min, records, max },
            pieces: OpenPieces::default(),
            chunks: Chunks::default(),
            pending: VecDeque::new(),
            held: Vec::new(),
            per_piece: Vec::new(),
            read: Vec::new(),
            counters: Counters::default(),
            read_records: 0,
            read_bytes: 0,
            hint: None,
            skip_errors,
            closed: Vec::new(),
        })
    }

    /// Takes the next up to `n` records (fewer at the segment's end) into the held ones;
    /// returns how many it took. Unshuffled, it first notes where the readers stand
    /// (:meth:`hint`); shuffled, each window read does.
    ///
    /// Raises:
    ///     jaxrec.errors.FileChangedError: a file ends before its counted records.
    ///     jaxrec.errors.JaxrecError: a read failed.
    fn take(&mut self, py: Python<'_>, n: u64) -> PyResult<u64> {
        let before = self.held.len();
        if self.window > 0 || !self.known {
            // An uncounted share reads one record beyond, so that its end is known as soon
            // as its last records are taken (`exhausted`).
            let want = if self.known { n } else { n + 1 };
            if self.window == 0 && (self.pending.len() as u64) < want && !self.finished {
                self.hint = Some(self.take_hint());
            }
            while (self.pending.len() as u64) < want && !self.finished {
                if self.known && self.position >= self.total {
                    self.finished = true;
                    break;
                }
                if self.window > 0 {
                    self.read_window(py)?;
                } else {
                    let mut read = std::mem::take(&mut self.read);
                    read.clear();
                    let got =
                        self.interleave_unknown(py, want - self.pending.len() as u64, &mut read);
                    self.pending.extend(read.iter().copied());
                    self.read = read;
                    got?;
                }
            }
            let k = (n as usize).min(self.pending.len());
            self.held.extend(self.pending.drain(..k));
            return Ok(k as u64);
        }
        if !self.finished && n > 0 {
            self.hint = Some(self.take_hint());
        }
        let mut held = std::mem::take(&mut self.held);
        let mut got = Ok(());
        while got.is_ok() && !self.finished && ((held.len() - before) as u64) < n {
            if self.position >= self.total {
                self.finished = true;
                break;
            }
            let at = self.position;
            got = self.interleave(py, n - (held.len() - before) as u64, &mut held);
            if self.position == at {
                break; // (the interleave ended: finished is set)
            }
        }
        self.held = held;
        got?;
        Ok((self.held.len() - before) as u64)
    }

    /// Takes the next `n` records in interleave order and drops them (a resume reads past
    /// them to its position).
    fn skip(&mut self, py: Python<'_>, n: u64) -> PyResult<()> {
        let mut read = std::mem::take(&mut self.read);
        read.clear();
        let got = self.next_records(py, n, &mut read);
        let released = self.chunks.release_all(&read);
        self.read = read;
        got.and(released)
    }

    /// Starts a shuffled stream at window `window`, `drop` records into it (read, permuted and
    /// the first `drop` dropped).
    fn start_window(&mut self, py: Python<'_>, window: u64, drop: u64) -> PyResult<()> {
        self.next_window = window;
        if drop > 0 {
            self.read_window(py)?;
            let k = (drop as usize).min(self.pending.len());
            let dropped: Vec<u64> = self.pending.drain(..k).collect();
            self.chunks.release_all(&dropped)?;
        }
        Ok(())
    }

    /// Notes where the readers stand now, for :meth:`hint`.
    fn mark_hint(&mut self) {
        self.hint = Some(self.take_hint());
    }

    /// Queues the held records as consecutive batches of `batch_size` positions (the last may
    /// be shorter) on the stream's queue; returns `(first ticket, batches, rows of each)`: a
    /// record skipped as bad (a hole) takes a position and gives no row.
    ///
    /// Raises:
    ///     ValueError: `batch_size` is 0.
    ///     RuntimeError: the queue is closed.
    fn submit(&mut self, py: Python<'_>, batch_size: usize) -> PyResult<(u64, u64, Vec<usize>)> {
        let (used, parts) = self.picks(py, batch_size)?;
        let reals = parts.iter().map(Vec::len).collect();
        let (first, count) = self.queue.get().enqueue_parses(used, parts)?;
        self.release_held()?;
        Ok((first, count, reals))
    }

    /// The held records as `(chunks, which, rows, ends)`, row `i` being record `rows[i]` of
    /// `chunks[which[i]]` (what `ExampleParser.parse_rows` takes), and the consecutive batches
    /// of `batch_size` positions ending at rows `ends` (a hole takes a position, no row). For
    /// batches parsed elsewhere (the Loader's pool, with transforms); the stream lets them go.
    ///
    /// Raises:
    ///     ValueError: `batch_size` is 0.
    #[allow(clippy::type_complexity)]
    fn resolve<'py>(
        &mut self,
        py: Python<'py>,
        batch_size: usize,
    ) -> PyResult<(
        Vec<Py<Chunk>>,
        Bound<'py, PyArray1<i64>>,
        Bound<'py, PyArray1<i64>>,
        Vec<usize>,
    )> {
        let (used, parts) = self.picks(py, batch_size)?;
        let n = parts.iter().map(Vec::len).sum();
        let (mut which, mut rows) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut ends = Vec::with_capacity(parts.len());
        for picks in &parts {
            for &(at, row) in picks {
                which.push(at as i64);
                rows.push(row as i64);
            }
            ends.push(which.len());
        }
        self.release_held()?;
        Ok((
            used,
            PyArray1::from_vec(py, which),
            PyArray1::from_vec(py, rows),
            ends,
        ))
    }

    /// Records held for :meth:`submit`.
    #[getter]
    fn held(&self) -> usize {
        self.held.len()
    }

    /// True once every record of the segment was read (a shuffled one may still have some
    /// pending).
    #[getter]
    fn finished(&self) -> bool {
        self.finished
    }

    /// Chunks held now: read and not yet wholly taken and submitted (memory stays within
    /// about a window's or a group's worth).
    #[getter]
    fn chunks_held(&self) -> usize {
        self.chunks.slots.iter().flatten().count()
    }

    /// Records read and permuted, not yet taken (shuffled).
    #[getter]
    fn pending(&self) -> usize {
        self.pending.len()
    }

    /// `(position, (next_piece, slots, at, in_block), {piece: (byte offset, record index)})`
    /// as noted last (see :meth:`take`); None before any.
    fn hint<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some((position, s, files)) = &self.hint else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        for &(piece, at) in files {
            d.set_item(piece, at)?;
        }
        let state = (s.next_piece, s.slots.clone(), s.at, s.in_block);
        Ok(Some((*position, state, d).into_pyobject(py)?.into_any()))
    }

    /// `(records, bytes, read seconds, skips)` since the last call, for the Loader's stats;
    /// `skips` holds the counters (`RecordReader.stats()`) of the readers closed meanwhile,
    /// when bad records are skipped.
    fn counters(&mut self) -> (u64, u64, f64, Vec<Py<PyAny>>) {
        let c = std::mem::take(&mut self.counters);
        self.read_records += c.records;
        self.read_bytes += c.bytes;
        (
            c.records,
            c.bytes,
            c.read_seconds,
            std::mem::take(&mut self.closed),
        )
    }

    /// The mean payload of the records read so far (None before any).
    #[getter]
    fn record_bytes(&self) -> Option<f64> {
        let records = self.read_records + self.counters.records;
        let bytes = self.read_bytes + self.counters.bytes;
        (records > 0).then(|| bytes as f64 / records as f64)
    }

    /// The Python objects the stream holds, for the garbage collector: its callbacks may
    /// hold what holds the stream.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for f in [&self.open_piece, &self.window_order].into_iter().flatten() {
            visit.call(f)?;
        }
        visit.call(&self.queue)?;
        for p in self.pieces.values() {
            if let Some(r) = &p.reader {
                visit.call(r)?;
            }
        }
        for (c, _) in self.chunks.slots.iter().flatten() {
            visit.call(c)?;
        }
        for d in &self.closed {
            visit.call(d)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.stop();
        self.open_piece = None;
        self.window_order = None;
    }

    /// Stops every read and drops every record held or pending (idempotent). Skipping, what
    /// the open pieces' readers skipped goes to :meth:`counters` first.
    ///
    /// Raises:
    ///     OSError: a reader's counters could not be read (the stream is closed all the same).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        let pieces = std::mem::take(&mut self.pieces);
        let noted: PyResult<Vec<()>> = pieces.values().map(|p| self.note_skips(py, p)).collect();
        self.pieces = pieces;
        self.stop();
        noted.map(drop)
    }
}

impl NativeStream {
    /// Stops every read and drops every record held or pending.
    fn stop(&mut self) {
        let queue = self.queue.get();
        for p in self.pieces.values_mut() {
            if let Some(ticket) = p.ahead.take() {
                queue.forget_read(ticket);
            }
            p.reader = None;
        }
        self.pieces.clear();
        self.held.clear();
        self.pending.clear();
        self.chunks.clear();
    }
}
