//! [`CountedStream`]: one host's records of a segment of an epoch, read and queued as batches
//! with no Python step per block, per piece or per batch.
//!
//! The native twin of `jaxrec/_loader/stream.py`'s `EpochStream` for the Loader's common case:
//! pieces that are counted ranges of local files, no shuffle window, reads on the parse queue,
//! bad records raised. It takes the same records in the same order (the interleave of
//! [`crate::pipeline::interleave`]), reads the same blocks (each open piece one block ahead on
//! the queue's threads) and says where its readers stood the same way (the hint), so a state
//! saved from either resumes on either.
//!
//! ```text
//! take(n)        the next n records (fewer at the segment's end): reads waited for with the
//!                GIL released; the records are held as (chunk, row) picks, never handles
//! submit(queue)  the held records as parse jobs of batch_size rows, in one queue call
//! hint()         where the interleave and the open pieces' readers stood before the last take
//! ```
//!
//! In Python, the stream's bookkeeping (a few calls a block per piece, a reader position a
//! piece a group, the handles' chunk registry) was about 4 us of the ~75 us of CPU a tokens
//! batch costs, on the thread that also takes the batches.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{PyTraverseError, PyVisit};

use super::errors::file_changed;
use super::queue::ParseQueue;
use super::records::{Chunk, RecordReader};
use crate::pipeline::block_size::AutoBlocks;
use crate::pipeline::interleave::{Interleave, Step};

/// Seconds between a waiting read's checks for signals (Ctrl-C).
const POLL_SECONDS: f64 = 0.1;

/// Wanted rows of one chunk that a piece has not handed out yet.
struct Entry {
    chunk: Py<Chunk>,
    rows: Range<usize>,
    /// `(group, place)`: the chunk's place in the list of that group's chunks, once added.
    in_group: Option<(u64, usize)>,
}

/// The records taken since the last submit: row `picks[i].1` of `chunks[picks[i].0]`.
#[derive(Default)]
struct Group {
    number: u64,
    chunks: Vec<Py<Chunk>>,
    picks: Vec<(usize, usize)>,
}

/// Counters for the Loader's stats, handed over by [`CountedStream::counters`].
#[derive(Default, Clone, Copy)]
struct Counters {
    records: u64,
    bytes: u64,
    read_seconds: f64,
}

/// One open piece: records `first..=last` of a file (`readers.py`'s `PieceReader`).
struct Piece {
    reader: Option<Py<RecordReader>>,
    path: String,
    first: u64,
    last: u64,
    need: u64,
    found: u64,
    /// Index in the file of the record after the last block read.
    next_index: u64,
    /// Records to frame past before the first block (from the span's start or a hint).
    skip: u64,
    block_bytes: usize,
    auto: Option<AutoBlocks>,
    queue: VecDeque<Entry>,
    /// The read ticket of the block read ahead.
    ahead: Option<u64>,
}

impl Piece {
    fn queued(&self) -> u64 {
        self.queue.iter().map(|e| e.rows.len() as u64).sum()
    }

    /// Queues the next block's read, unless the piece has all it needs.
    fn read_ahead(&mut self, py: Python<'_>, queue: &ParseQueue) -> PyResult<()> {
        // Never past the last wanted record: the rest of the file is not this piece's.
        let limit = (self.last + 1).saturating_sub(self.next_index);
        let done = self.found + self.queued() >= self.need;
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
    fn fill(&mut self, py: Python<'_>, queue: &ParseQueue, n: &mut Counters) -> PyResult<bool> {
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
        // A reader's chunk holds its records in file order: the wanted ones are one range.
        let lo = c.indices.partition_point(|&i| i < self.first);
        let hi = c.indices.partition_point(|&i| i <= self.last).max(lo);
        let nbytes: usize = c.starts.iter().zip(&c.ends).map(|(s, e)| e - s).sum();
        // The records framed, wanted or not, say how large this piece's records are.
        if let Some(size) = self.auto.and_then(|a| a.after(nbytes, c.len())) {
            self.block_bytes = size;
        }
        n.records += (hi - lo) as u64;
        n.bytes += nbytes as u64;
        if hi > lo {
            self.queue.push_back(Entry {
                chunk: Py::new(py, chunk)?,
                rows: lo..hi,
                in_group: None,
            });
        }
        self.read_ahead(py, queue)?;
        Ok(true)
    }

    /// The next `count` records into `out`, as picks into `group`'s chunks.
    ///
    /// Raises FileChangedError when the file ends first.
    fn take(
        &mut self,
        py: Python<'_>,
        count: u64,
        queue: &ParseQueue,
        group: &mut Group,
        out: &mut Vec<(usize, usize)>,
        n: &mut Counters,
    ) -> PyResult<()> {
        let mut need = count;
        while need > 0 {
            let Some(e) = self.queue.front_mut() else {
                if !self.fill(py, queue, n)? {
                    return Err(self.short());
                }
                continue;
            };
            let place = match e.in_group {
                Some((g, place)) if g == group.number => place,
                _ => {
                    group.chunks.push(e.chunk.clone_ref(py));
                    let place = group.chunks.len() - 1;
                    e.in_group = Some((group.number, place));
                    place
                }
            };
            let got = need.min(e.rows.len() as u64);
            let rows = e.rows.start..e.rows.start + got as usize;
            out.extend(rows.map(|r| (place, r)));
            e.rows.start += got as usize;
            need -= got;
            self.found += got;
            if e.rows.is_empty() {
                self.queue.pop_front();
            }
        }
        Ok(())
    }

    fn short(&self) -> PyErr {
        file_changed(
            format!(
                "ended {} records short of records {}..{} that were counted when the epoch was \
                 planned; the file changed (rewritten, truncated?) since it was counted",
                self.need - self.found,
                self.first,
                self.last
            ),
            &self.path,
            self.next_index,
        )
    }

    /// `(byte offset, record index)` of the next record to hand out, if read.
    fn position(&self, py: Python<'_>) -> Option<(u64, u64)> {
        let e = self.queue.front()?;
        let c = &e.chunk.bind(py).get().inner;
        Some((c.file_offsets[e.rows.start], c.indices[e.rows.start]))
    }

    /// Stops reading: the read ahead is dropped when done.
    fn close(&mut self, queue: &ParseQueue) {
        if let Some(ticket) = self.ahead.take() {
            queue.forget_read(ticket);
        }
        self.reader = None;
        self.queue.clear();
    }
}

/// Where the interleave and the open pieces' readers stood: `(position, interleave, files)`.
type Hint = (u64, Interleave, Vec<(usize, (u64, u64))>);

/// A host's records of one segment, read on a parse queue and queued there as batches.
///
/// `open_piece(i)` opens piece `i` where its next record is: `(reader, path, first, last,
/// need, skip)`, with `reader` a `RecordReader` (None when the piece needs no record).
#[pyclass(module = "jaxrec._native")]
pub(super) struct CountedStream {
    lengths: Vec<u64>,
    cycle_length: usize,
    block_length: u64,
    state: Interleave,
    position: u64,
    total: u64,
    finished: bool,
    /// None once cleared by the garbage collector (`__clear__`).
    open_piece: Option<Py<PyAny>>,
    queue: Py<ParseQueue>,
    block_bytes: Option<usize>,
    auto: AutoBlocks,
    pieces: HashMap<usize, Piece>,
    group: Group,
    /// Per piece of a step of whole rounds, its picks (kept: no fresh memory a group).
    per_piece: Vec<Vec<(usize, usize)>>,
    counters: Counters,
    /// Records and bytes read in all, for the mean record size.
    read_records: u64,
    read_bytes: u64,
    hint: Option<Hint>,
}

impl CountedStream {
    /// Opens piece `piece` unless open.
    fn open(&mut self, py: Python<'_>, piece: usize) -> PyResult<()> {
        if self.pieces.contains_key(&piece) {
            return Ok(());
        }
        let (reader, path, first, last, need, skip): (
            Option<Py<RecordReader>>,
            String,
            u64,
            u64,
            u64,
            u64,
        ) = self
            .open_piece
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the stream was cleared"))?
            .call1(py, (piece,))?
            .extract(py)?;
        let auto = self.block_bytes.is_none().then_some(self.auto);
        let mut p = Piece {
            reader,
            path,
            first,
            last,
            need,
            found: 0,
            next_index: first,
            skip,
            block_bytes: self.block_bytes.unwrap_or(self.auto.min),
            auto,
            queue: VecDeque::new(),
            ahead: None,
        };
        if need > 0 {
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
        out: &mut Vec<(usize, usize)>,
    ) -> PyResult<()> {
        let p = self
            .pieces
            .get_mut(&piece)
            .ok_or_else(|| PyValueError::new_err(format!("piece {piece} is not open")))?;
        p.take(
            py,
            count,
            self.queue.get(),
            &mut self.group,
            out,
            &mut self.counters,
        )
    }

    /// The next up to `records` records in interleave order, into the group.
    fn interleave(&mut self, py: Python<'_>, records: u64) -> PyResult<()> {
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
                    let each = rounds * k;
                    let mut per = std::mem::take(&mut self.per_piece);
                    per.resize_with(pieces.len(), Vec::new);
                    for (&p, out) in pieces.iter().zip(per.iter_mut()) {
                        out.clear();
                        self.take_from(py, p, each, out)?;
                    }
                    let k = k as usize;
                    for r in 0..rounds as usize {
                        for out in &per[..pieces.len()] {
                            self.group.picks.extend_from_slice(&out[r * k..(r + 1) * k]);
                        }
                    }
                    self.per_piece = per;
                    let got = each * pieces.len() as u64;
                    left -= got;
                    self.position += got;
                }
                Step::Run { piece, count, .. } => {
                    self.open(py, piece)?;
                    let mut picks = std::mem::take(&mut self.group.picks);
                    let got = self.take_from(py, piece, count, &mut picks);
                    self.group.picks = picks;
                    got?;
                    left -= count;
                    self.position += count;
                }
            }
            self.close_finished();
        }
        if self.state.done(self.lengths.len()) {
            self.finished = true;
        }
        Ok(())
    }

    /// Closes the pieces that left the interleave's slots.
    fn close_finished(&mut self) {
        let slots = &self.state.slots;
        let queue = self.queue.get();
        self.pieces.retain(|piece, p| {
            let open = slots.iter().any(|s| s.0 == *piece);
            if !open {
                p.close(queue);
            }
            open
        });
    }

    fn take_hint(&self, py: Python<'_>) -> Hint {
        let files = self
            .state
            .slots
            .iter()
            .filter_map(|&(piece, _)| Some((piece, self.pieces.get(&piece)?.position(py)?)))
            .collect();
        (self.position, self.state.clone(), files)
    }
}

#[pymethods]
impl CountedStream {
    /// The stream at interleave position `position` (state `(next_piece, slots, at,
    /// in_block)`) over pieces of `lengths` records. `block_bytes` None: chosen per piece,
    /// from `auto_blocks` `(min bytes, records, max bytes)`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        lengths: Vec<u64>,
        cycle_length: usize,
        block_length: u64,
        state: (usize, Vec<(usize, u64)>, usize, u64),
        position: u64,
        open_piece: Py<PyAny>,
        queue: Py<ParseQueue>,
        block_bytes: Option<usize>,
        auto_blocks: (usize, usize, usize),
    ) -> PyResult<Self> {
        if cycle_length == 0 || block_length == 0 {
            return Err(PyValueError::new_err(
                "cycle_length and block_length must be at least 1",
            ));
        }
        let (next_piece, slots, at, in_block) = state;
        if next_piece > lengths.len()
            || slots
                .iter()
                .any(|&(p, t)| p >= lengths.len() || t > lengths[p])
            || (at > 0 && at >= slots.len())
        {
            return Err(PyValueError::new_err(
                "the interleave state does not fit the pieces",
            ));
        }
        let (min, records, max) = auto_blocks;
        Ok(CountedStream {
            total: lengths.iter().sum(),
            lengths,
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
            open_piece: Some(open_piece),
            queue,
            block_bytes,
            auto: AutoBlocks { min, records, max },
            pieces: HashMap::new(),
            group: Group::default(),
            per_piece: Vec::new(),
            counters: Counters::default(),
            read_records: 0,
            read_bytes: 0,
            hint: None,
        })
    }

    /// Takes the next up to `n` records (fewer at the segment's end) into the held group, first
    /// noting where the readers stood (:meth:`hint`); returns how many it took.
    ///
    /// Raises:
    ///     jaxrec.errors.FileChangedError: a file ends before its counted records.
    ///     jaxrec.errors.JaxrecError: a read failed.
    fn take(&mut self, py: Python<'_>, n: u64) -> PyResult<u64> {
        if !self.finished && n > 0 {
            self.hint = Some(self.take_hint(py));
        }
        let before = self.group.picks.len();
        while !self.finished && ((self.group.picks.len() - before) as u64) < n {
            if self.position >= self.total {
                self.finished = true;
                break;
            }
            let at = self.position;
            self.interleave(py, n - (self.group.picks.len() - before) as u64)?;
            if self.position == at {
                break; // (the interleave ended: finished is set)
            }
        }
        Ok((self.group.picks.len() - before) as u64)
    }

    /// Takes the next `n` records and drops them (a resume reads past them).
    fn skip(&mut self, py: Python<'_>, n: u64) -> PyResult<()> {
        self.interleave(py, n)?;
        self.group.chunks.clear();
        self.group.picks.clear();
        self.group.number += 1;
        Ok(())
    }

    /// Notes where the readers stand now, for :meth:`hint`.
    fn mark_hint(&mut self, py: Python<'_>) {
        self.hint = Some(self.take_hint(py));
    }

    /// Queues the held records as consecutive batches of `batch_size` rows (the last may be
    /// shorter) on the stream's queue; returns `(first ticket, batches)`.
    ///
    /// Raises:
    ///     ValueError: `batch_size` is 0.
    ///     RuntimeError: the queue is closed.
    fn submit(&mut self, batch_size: usize) -> PyResult<(u64, u64)> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        let chunks = std::mem::take(&mut self.group.chunks);
        let parts: Vec<Vec<(usize, usize)>> = self
            .group
            .picks
            .chunks(batch_size)
            .map(<[_]>::to_vec)
            .collect();
        self.group.picks.clear();
        self.group.number += 1;
        self.queue.get().enqueue_parses(chunks, parts)
    }

    /// Records held for :meth:`submit`.
    #[getter]
    fn held(&self) -> usize {
        self.group.picks.len()
    }

    /// True once every record of the segment was taken.
    #[getter]
    fn finished(&self) -> bool {
        self.finished
    }

    /// `(position, (next_piece, slots, at, in_block), {piece: (byte offset, record index)})`
    /// as noted before the last take (or by :meth:`mark_hint`); None before any.
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

    /// `(records, bytes, read seconds)` read since the last call, for the Loader's stats.
    fn counters(&mut self) -> (u64, u64, f64) {
        let c = std::mem::take(&mut self.counters);
        self.read_records += c.records;
        self.read_bytes += c.bytes;
        (c.records, c.bytes, c.read_seconds)
    }

    /// The mean payload of the records read so far (None before any).
    #[getter]
    fn record_bytes(&self) -> Option<f64> {
        let records = self.read_records + self.counters.records;
        let bytes = self.read_bytes + self.counters.bytes;
        (records > 0).then(|| bytes as f64 / records as f64)
    }

    /// The Python objects the stream holds, for the garbage collector: its `open_piece` may
    /// hold what holds the stream.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(f) = &self.open_piece {
            visit.call(f)?;
        }
        visit.call(&self.queue)?;
        for p in self.pieces.values() {
            if let Some(r) = &p.reader {
                visit.call(r)?;
            }
            for e in &p.queue {
                visit.call(&e.chunk)?;
            }
        }
        for c in &self.group.chunks {
            visit.call(c)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.close();
        self.open_piece = None;
    }

    /// Stops every read and drops every held record (idempotent).
    fn close(&mut self) {
        let queue = self.queue.get();
        for p in self.pieces.values_mut() {
            p.close(queue);
        }
        self.pieces.clear();
        self.group.chunks.clear();
        self.group.picks.clear();
    }
}
