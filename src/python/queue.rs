//! [`ParseQueue`]: the Loader's batch parses on native threads, handed back in any order asked.
//!
//! A parse job on a Python thread pool costs the GIL several times per batch (the submit, the
//! worker's queue, the future's result and its condition variables), and with two cores every
//! such moment is one the other threads wait for. Here Python makes one call to submit a batch
//! (the records it picks from which chunks) and one to take its columns; the parse runs on the
//! queue's own threads and touches no Python object.
//!
//! ```text
//! submit(chunks, which, rows) -> ticket   (checks the picks, queues the job; GIL held briefly)
//! submit_handles(chunks, ids, handles, n)  (records named by handles, in batches of n rows:
//!   -> (first ticket, count)                the Loader's planner submits a group in one call)
//!   worker threads                         (parse with no GIL and copy the batch's byte
//!                                           strings side by side; the result waits by ticket)
//! result(ticket, timeout)                  (waits with the GIL released, then makes the
//!                                           numpy columns: the one step that needs Python)
//! finished(ticket, timeout)                (with a batch form: the same, but the columns
//!                                           were padded on the parse thread and come back
//!                                           as the Loader's finished batch; see finish.rs)
//! close()                                  (drops what is queued, joins the threads)
//!
//! submit_read(reader, skip, max_records, block_bytes) -> ticket
//! read_result(ticket, timeout)             (the chunk, or None at the stream's end)
//! forget_read(ticket)                      (a read nobody will take: dropped when done)
//! ```
//!
//! The same threads read the Loader's files: a read job frames the next block of a file into
//! a chunk, and is taken before any parse (the planner waits on reads; parses wait only on the
//! planner). So a Loader of `threads` threads reads and parses on `threads` threads, not on a
//! Python pool of as many threads beside them (`num_threads=1` used 1.7 cores).
//!
//! Which records form a batch, and in which order batches are taken, is the caller's: the
//! queue adds no ordering of its own, so nothing depends on which thread parsed what.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::finish::{BatchForm, FormArg};
use super::parser::{pick_location, picks, starts_run, ExampleParser, Parsed};
use super::records::{Chunk, RecordReader};
use crate::error::{Error, Result};
use crate::parse::ParsedBatch;

/// One batch to parse: row i is record `picks[i].1` of `chunks[picks[i].0]`.
struct Job {
    ticket: u64,
    /// Shared by the batches of one `submit_handles` call.
    chunks: Arc<Vec<Py<Chunk>>>,
    picks: Vec<(usize, usize)>,
}

/// A finished parse, waiting for its ticket to be asked for.
struct Done {
    /// Borrows from `_strings`, `chunks`' buffers and the parser's spec (see [`parse_job`]);
    /// declared first so that it is dropped before them.
    parsed: Result<ParsedBatch<'static>>,
    /// The batch's byte strings, copied out of the records (see [`gather_strings`]): only
    /// kept, for `parsed` to borrow.
    _strings: Box<[u8]>,
    chunks: Arc<Vec<Py<Chunk>>>,
    picks: Vec<(usize, usize)>,
    seconds: f64,
}

/// One block of a file to read: `skip` records framed past, then a chunk of up to
/// `max_records` records from a block of about `block_bytes` (see
/// [`RecordReader::skip_then_read`]).
struct ReadJob {
    ticket: u64,
    reader: Py<RecordReader>,
    skip: u64,
    max_records: usize,
    block_bytes: usize,
}

/// A finished read, waiting for its ticket to be asked for.
pub(super) struct ReadDone {
    pub(super) chunk: Result<Option<Chunk>>,
    pub(super) seconds: f64,
}

#[derive(Default)]
struct State {
    todo: VecDeque<Job>,
    done: HashMap<u64, Done>,
    /// Tickets handed out and not yet taken back by `result`.
    open: HashSet<u64>,
    /// Read jobs, taken before any parse.
    reads: VecDeque<ReadJob>,
    read_done: HashMap<u64, ReadDone>,
    /// Read tickets handed out and neither taken back by `read_result` nor forgotten.
    read_open: HashSet<u64>,
    next_ticket: u64,
    closed: bool,
    /// `(ticket, through)` of each thread asleep in [`ParseQueue::wait`]: it wants `ticket`,
    /// and is woken once every parse of `ticket..=through` is done (see [`WAKE_AFTER`]).
    sleepers: Vec<(u64, u64)>,
    /// Threads that have started (and so carry their names).
    started: usize,
}

impl State {
    /// Whether every parse of `from..=through` is done (tickets not open: taken already, a
    /// read's, or not handed out, count as done).
    fn all_done(&self, from: u64, through: u64) -> bool {
        (from..=through).all(|t| self.done.contains_key(&t) || !self.open.contains(&t))
    }

    /// Whether the sleeper waiting for `ticket` (and `..=through`) is to go on, as a parse
    /// of `seconds` ends (or it looks again): its batch is done, and so are the others, or no
    /// parse is queued (the threads are about to run dry, and the sleeper may be the planner
    /// that queues more), or the parse just ended took long enough that a wake-up a batch
    /// costs nothing (images: waiting for four 60 ms batches made the consumer's batches come
    /// in bursts). A done batch thus waits at most for a few fast parses or one slow one.
    fn may_go(&self, ticket: u64, through: u64, seconds: f64) -> bool {
        self.done.contains_key(&ticket)
            && (self.todo.is_empty()
                || seconds >= SLOW_BATCH_SECONDS
                || self.all_done(ticket, through))
    }

    /// Whether a sleeper is to be woken as a parse of `seconds` ends ([`Self::may_go`]).
    fn sleeper_ready(&self, seconds: f64) -> bool {
        self.sleepers
            .iter()
            .any(|&(ticket, through)| self.may_go(ticket, through, seconds))
    }
}

/// A handle that stands where a counted record was skipped as bad (`jaxrec/_loader/chunks.py`'s
/// `HOLE`): the batch that holds its position has one row fewer.
pub(super) const HOLE: u64 = u64::MAX;

/// Batches a consumer that has to wait for one waits for in all: asleep, it is woken once the one
/// it wants and the next `WAKE_AFTER - 1` queued are done (or sooner: see [`State::may_go`]), not
/// at each batch; at its deadline it takes its batch if done. When the parses are what it waits on,
/// it then takes the ready batches one after another, and the parse threads wake it (a futex
/// wake-up, and on these 2 vCPUs the preemption of a parse thread) a quarter as often: tokens
/// through the Loader +4-5 % rec/s. A batch already done is taken at once.
const WAKE_AFTER: u64 = 4;

/// A parse that took this long wakes a consumer whose batch is done (see [`State::may_go`]).
const SLOW_BATCH_SECONDS: f64 = 1e-3;

/// What a queue thread does next.
enum Task {
    Parse(Job),
    Read(ReadJob),
}

struct Shared {
    parser: Py<ExampleParser>,
    /// How parses become finished batches (`None`: they are handed back as columns).
    form: Option<BatchForm>,
    state: Mutex<State>,
    /// Signalled when a job is queued or the queue closes.
    work: Condvar,
    /// Signalled when a parse is done or the queue closes.
    finished: Condvar,
    /// Signalled when a read is done or the queue closes (apart: the consumer waiting for a
    /// batch and the planner waiting for a read need not wake each other).
    read: Condvar,
    /// Signalled as each thread starts (`State::started`).
    started: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker cannot panic while holding the lock (no code in those sections can), so a
        // poisoned lock still holds a consistent state.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the queue and wakes every waiter; returns what was queued and finished, for the
    /// caller to drop (with the GIL, where it has it: they hold chunk and reader references).
    fn shut(&self) -> Left {
        let mut st = self.lock();
        st.closed = true;
        st.open.clear();
        st.read_open.clear();
        let left = (
            std::mem::take(&mut st.todo),
            std::mem::take(&mut st.done),
            std::mem::take(&mut st.reads),
            std::mem::take(&mut st.read_done),
        );
        drop(st);
        self.work.notify_all();
        self.finished.notify_all();
        self.read.notify_all();
        left
    }
}

/// What a closed queue still held, dropped by whoever closed it.
type Left = (
    VecDeque<Job>,
    HashMap<u64, Done>,
    VecDeque<ReadJob>,
    HashMap<u64, ReadDone>,
);

/// Parses the records `picks` names in `chunks` into their [`Done`], timed, on this thread. A
/// panic in the parser becomes the batch's error: it must not kill a parse thread silently
/// and hang the consumer, nor reach Python.
fn parse_done(
    parser: &ExampleParser,
    form: Option<&BatchForm>,
    chunks: Arc<Vec<Py<Chunk>>>,
    picks: Vec<(usize, usize)>,
) -> Done {
    let t0 = Instant::now();
    let (parsed, strings) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        parse_job(parser, form, &chunks, &picks)
    }))
    .unwrap_or_else(|_| {
        let err = Error::internal("the parser panicked on this batch");
        (Err(err), Box::default())
    });
    Done {
        parsed,
        _strings: strings,
        chunks,
        picks,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

/// Parses one batch. The result borrows the records from the chunks and the defaults from the
/// parser's spec; it is stored with the chunks' references (see [`Done`]). With a `form`, the
/// columns are padded to its batch size here, on the parsing thread.
fn parse_job(
    parser: &ExampleParser,
    form: Option<&BatchForm>,
    chunks: &[Py<Chunk>],
    picks: &[(usize, usize)],
) -> (Result<ParsedBatch<'static>>, Box<[u8]>) {
    let records: Vec<&[u8]> = picks
        .iter()
        .map(|&(c, r)| chunks[c].get().inner.record(r))
        .collect();
    let mut parsed = parser.parse_records(&records);
    if let (Some(form), Ok(batch)) = (form, &mut parsed) {
        for col in batch.context.iter_mut().chain(batch.sequence.iter_mut()) {
            col.pad_rows(form.batch_size);
        }
    }
    let strings = match &mut parsed {
        Ok(batch) => gather_strings(batch),
        Err(_) => Box::default(),
    };
    // SAFETY: the borrowed bytes live in heap buffers owned by the `Chunk` objects of
    // `chunks` (an `Arc<Block>` each, never mutated or moved while shared, and back in the
    // block pool only once the last reference is dropped), in the frozen `ExampleParser`
    // object that `Shared::parser` keeps alive, and in `strings` (a boxed slice: moving the
    // box moves no byte). `Done` keeps the chunks (its own `Arc` of their references) and
    // `strings` next to the result and drops the result first, and `Shared` outlives every
    // `Done`; so the bytes outlive every use of the result.
    let parsed = unsafe {
        std::mem::transmute::<Result<ParsedBatch<'_>>, Result<ParsedBatch<'static>>>(parsed)
    };
    (parsed, strings)
}

/// Copies the byte strings of `batch`'s columns into one buffer, in order, and points the
/// columns at the copies; a run of one slice (padding, a default) stays one copy, so the
/// consumer still makes one object of it. Returns the buffer, which must outlive the batch.
///
/// Why: the consumer makes a Python object of each string, holding the GIL, and each string
/// sat in a record parsed on another thread, a record apart: every copy waited on memory
/// (the `bytes` id of a tokens batch was 11 of the consumer's 17 us a batch, and 20-50 us over
/// shuffled records). Here the records were just parsed on this thread and are in its cache;
/// the consumer reads the strings side by side.
fn gather_strings<'a>(batch: &mut ParsedBatch<'a>) -> Box<[u8]> {
    let mut columns: Vec<&mut Vec<&'a [u8]>> = batch
        .context
        .iter_mut()
        .chain(batch.sequence.iter_mut())
        .filter_map(|c| match &mut c.data {
            crate::column::ColumnData::Bytes(v) => Some(v),
            _ => None,
        })
        .collect();
    // The first of each run of one slice is copied.
    fn run_starts<'v, 'a>(v: &'v [&'a [u8]]) -> impl Iterator<Item = &'a [u8]> + 'v {
        (0..v.len())
            .filter(move |&i| starts_run(v, i))
            .map(move |i| v[i])
    }
    let mut strings = Vec::new();
    let total: usize = columns
        .iter()
        .flat_map(|v| run_starts(v))
        .map(<[u8]>::len)
        .sum();
    if total == 0 || strings.try_reserve_exact(total).is_err() {
        return Box::default(); // (without the memory the strings stay where they are)
    }
    for v in &columns {
        for b in run_starts(v) {
            strings.extend_from_slice(b);
        }
    }
    let strings = strings.into_boxed_slice();
    // SAFETY: the slices borrow the boxed buffer, whose bytes never move or change; the caller
    // keeps it for as long as the batch (see `parse_job`).
    let copied: &'a [u8] = unsafe { std::mem::transmute::<&[u8], &'a [u8]>(&strings[..]) };
    let mut at = 0;
    for v in &mut columns {
        let mut prev: Option<(&'a [u8], &'a [u8])> = None; // (original, copy)
        for b in v.iter_mut() {
            let copy = match prev {
                Some((orig, copy)) if std::ptr::eq(orig, *b) => copy,
                _ => {
                    let copy = &copied[at..at + b.len()];
                    at += b.len();
                    copy
                }
            };
            prev = Some((*b, copy));
            *b = copy;
        }
    }
    strings
}

fn work(shared: Arc<Shared>) {
    let parser = shared.parser.get();
    shared.lock().started += 1;
    shared.started.notify_all();
    loop {
        let task = {
            let mut st = shared.lock();
            loop {
                if st.closed {
                    return;
                }
                if let Some(read) = st.reads.pop_front() {
                    break Task::Read(read);
                }
                if let Some(job) = st.todo.pop_front() {
                    break Task::Parse(job);
                }
                st = shared
                    .work
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let job = match task {
            Task::Parse(job) => job,
            Task::Read(read) => {
                read_job(&shared, read);
                continue;
            }
        };
        let Job {
            ticket,
            chunks,
            picks,
        } = job;
        let done = parse_done(parser, shared.form.as_ref(), chunks, picks);
        let mut st = shared.lock();
        if st.closed {
            // Dropped here, without the GIL: pyo3 defers the chunks' decrefs until it is held.
            return;
        }
        let seconds = done.seconds;
        st.done.insert(ticket, done);
        let wake = st.sleeper_ready(seconds);
        drop(st);
        if wake {
            shared.finished.notify_all();
        }
    }
}

/// Runs one read job and leaves its chunk for its ticket (or drops it, if forgotten).
fn read_job(shared: &Shared, read: ReadJob) {
    let t0 = Instant::now();
    let chunk = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        read.reader
            .get()
            .skip_then_read(read.skip, read.max_records, read.block_bytes)
    }))
    .unwrap_or_else(|_| Err(Error::internal("the reader panicked on this block")));
    let done = ReadDone {
        chunk,
        seconds: t0.elapsed().as_secs_f64(),
    };
    let mut st = shared.lock();
    // Forgotten (or the queue closed): dropped here, without the GIL; pyo3 defers the
    // reader's decref until it is held.
    if st.closed || !st.read_open.contains(&read.ticket) {
        return;
    }
    st.read_done.insert(read.ticket, done);
    drop(st);
    shared.read.notify_all();
}

/// Takes `ticket`'s result out of `done` if it is there (closing the ticket in `open`).
///
/// Raises ValueError when the ticket is not open: never handed out, or taken already.
fn take_ticket<T>(
    open: &mut HashSet<u64>,
    done: &mut HashMap<u64, T>,
    ticket: u64,
    what: &str,
) -> PyResult<Option<T>> {
    if !open.contains(&ticket) {
        return Err(PyValueError::new_err(format!(
            "{what} {ticket} is not waiting for its result"
        )));
    }
    let found = done.remove(&ticket);
    if found.is_some() {
        open.remove(&ticket);
    }
    Ok(found)
}

/// Parses batches of records picked from chunks on `threads` native threads.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct ParseQueue {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl ParseQueue {
    /// A parsed batch made into the queue's batch form (padded, with its mask):
    /// `(batch, seconds, notes)` as `finished` gives them; a failed parse names its record.
    #[allow(clippy::type_complexity)]
    fn finish<'py>(
        &self,
        py: Python<'py>,
        form: &BatchForm,
        done: Done,
    ) -> PyResult<(Bound<'py, PyDict>, f64, Bound<'py, PyList>)> {
        let refs: Vec<&Chunk> = done.chunks.iter().map(Py::get).collect();
        let locate = |i| pick_location(&refs, &done.picks, i);
        let parsed = done.parsed.map_err(|e| e.relocate(locate))?;
        let parser = self.shared.parser.get();
        let columns = parsed.context.into_iter().chain(parsed.sequence).collect();
        let name = |i| parser.column_name(i);
        let (batch, notes) = form.finish(py, columns, done.picks.len(), &name, &locate)?;
        Ok((batch, done.seconds, notes))
    }

    /// Hands out consecutive tickets to `jobs`, queues what `push` makes of each with its
    /// ticket, and wakes as many threads; returns the first ticket and how many were queued.
    fn enqueue<J>(
        &self,
        jobs: impl IntoIterator<Item = J>,
        mut push: impl FnMut(&mut State, u64, J),
    ) -> PyResult<(u64, u64)> {
        let mut st = self.shared.lock();
        if st.closed {
            return Err(PyRuntimeError::new_err("the ParseQueue is closed"));
        }
        let first = st.next_ticket;
        for job in jobs {
            let ticket = st.next_ticket;
            st.next_ticket += 1;
            push(&mut st, ticket, job);
        }
        let count = st.next_ticket - first;
        drop(st);
        match count {
            0 => {}
            1 => self.shared.work.notify_one(),
            _ => self.shared.work.notify_all(),
        }
        Ok((first, count))
    }

    /// Queues one parse job per list of picks into `chunks` (see [`Self::enqueue`]).
    pub(super) fn enqueue_parses(
        &self,
        chunks: Vec<Py<Chunk>>,
        batches: impl IntoIterator<Item = Vec<(usize, usize)>>,
    ) -> PyResult<(u64, u64)> {
        let chunks = Arc::new(chunks);
        self.enqueue(batches, |st, ticket, picks| {
            st.open.insert(ticket);
            st.todo.push_back(Job {
                ticket,
                chunks: Arc::clone(&chunks),
                picks,
            });
        })
    }

    /// Waits (GIL released) for the parse of `ticket`, at most `timeout` seconds: taken at
    /// once if it is done, else once it and the [`WAKE_AFTER`] - 1 parses queued after it are.
    fn wait(&self, py: Python<'_>, ticket: u64, timeout: Option<f64>) -> PyResult<Option<Done>> {
        let shared = &self.shared;
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        py.detach(|| -> PyResult<Option<Done>> {
            let mut st = shared.lock();
            if st.closed {
                return Err(PyRuntimeError::new_err("the ParseQueue is closed"));
            }
            let st_ref = &mut *st;
            if let Some(found) = take_ticket(&mut st_ref.open, &mut st_ref.done, ticket, "ticket")?
            {
                return Ok(Some(found));
            }
            let me = (ticket, ticket.saturating_add(WAKE_AFTER - 1));
            st.sleepers.push(me);
            let got = loop {
                if st.closed {
                    break Err(PyRuntimeError::new_err("the ParseQueue is closed"));
                }
                let mine = st.done.get(&ticket).map_or(0.0, |d| d.seconds);
                if st.may_go(me.0, me.1, mine) || !st.open.contains(&ticket) {
                    let st_ref = &mut *st;
                    break take_ticket(&mut st_ref.open, &mut st_ref.done, ticket, "ticket");
                }
                let past;
                (st, past) = sleep(&shared.finished, st, deadline);
                if past {
                    // Its batch if done by now, though the ones after it are not.
                    let st_ref = &mut *st;
                    break take_ticket(&mut st_ref.open, &mut st_ref.done, ticket, "ticket");
                }
            };
            if let Some(at) = st.sleepers.iter().position(|&s| s == me) {
                st.sleepers.swap_remove(at);
            }
            got
        })
    }

    /// Waits (GIL released) for the read of `ticket`, at most `timeout` seconds.
    pub(super) fn wait_read(
        &self,
        py: Python<'_>,
        ticket: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<ReadDone>> {
        self.wait_for(py, timeout, &self.shared.read, |st| {
            take_ticket(&mut st.read_open, &mut st.read_done, ticket, "read ticket")
        })
    }

    /// Waits (GIL released) until `take` finds what it looks for in the state, woken by
    /// `signal`, at most `timeout` seconds (`None` then).
    fn wait_for<T: Send>(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        signal: &Condvar,
        mut take: impl FnMut(&mut State) -> PyResult<Option<T>> + Send,
    ) -> PyResult<Option<T>> {
        let shared = &self.shared;
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        py.detach(|| -> PyResult<Option<T>> {
            let mut st = shared.lock();
            loop {
                if st.closed {
                    return Err(PyRuntimeError::new_err("the ParseQueue is closed"));
                }
                if let Some(found) = take(&mut st)? {
                    return Ok(Some(found));
                }
                let past;
                (st, past) = sleep(signal, st, deadline);
                if past {
                    return Ok(None);
                }
            }
        })
    }
}

/// Waits on `signal` (releasing `st` meanwhile) until it is signalled or `deadline` comes;
/// `true` with `st` as it was when the deadline has already passed (nothing waited).
fn sleep<'a>(
    signal: &Condvar,
    st: MutexGuard<'a, State>,
    deadline: Option<Instant>,
) -> (MutexGuard<'a, State>, bool) {
    let Some(d) = deadline else {
        let st = signal
            .wait(st)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        return (st, false);
    };
    let left = d.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return (st, true);
    }
    let (st, _) = signal
        .wait_timeout(st, left)
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (st, false)
}

#[pymethods]
impl ParseQueue {
    /// `form` (`jaxrec._parse.BatchForm`) makes [`Self::finished`] hand back finished batches.
    #[new]
    #[pyo3(signature = (parser, threads, form=None))]
    fn new(
        py: Python<'_>,
        parser: Py<ExampleParser>,
        threads: usize,
        form: Option<FormArg>,
    ) -> PyResult<Self> {
        if threads == 0 {
            return Err(PyValueError::new_err(
                "a ParseQueue needs at least one thread",
            ));
        }
        let form = form
            .map(|f| BatchForm::new(f, parser.get().columns()))
            .transpose()?;
        let shared = Arc::new(Shared {
            parser,
            form,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            finished: Condvar::new(),
            read: Condvar::new(),
            started: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("jaxrec-parse-{i}"))
                .spawn(move || work(s));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    // The threads started so far end at once (the queue is closed), not left
                    // waiting for work forever.
                    drop(shared.shut());
                    return Err(PyRuntimeError::new_err(format!(
                        "cannot start a thread: {e}"
                    )));
                }
            }
        }
        // Returns once every thread runs: a thread takes its name (`top -H`, `perf`) only when
        // it first runs, which on a busy machine came after a Loader's first batches.
        py.detach(|| {
            let mut st = shared.lock();
            while st.started < threads {
                st = shared
                    .started
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        });
        Ok(ParseQueue {
            shared,
            workers: Mutex::new(workers),
        })
    }

    /// Queues the batch whose row i is record `rows[i]` of `chunks[which[i]]`; returns its
    /// ticket.
    ///
    /// Raises:
    ///     IndexError: a pick names no record of the chunks.
    ///     RuntimeError: the queue is closed.
    fn submit<'py>(
        &self,
        chunks: Vec<Bound<'py, Chunk>>,
        which: PyReadonlyArray1<'py, i64>,
        rows: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<u64> {
        let refs: Vec<&Chunk> = chunks.iter().map(Bound::get).collect();
        let picks = picks(&refs, which.as_slice()?, rows.as_slice()?)?;
        let chunks = chunks.into_iter().map(Bound::unbind).collect();
        Ok(self.enqueue_parses(chunks, [picks])?.0)
    }

    /// Queues records named by handles as consecutive batches of `batch_size` rows (the last
    /// may be shorter); returns `(first ticket, batches)`: the batches' tickets are
    /// consecutive. No handles: no batch, `(next ticket, 0)`.
    ///
    /// Handle `h` is record `h & 0xFFFF_FFFF` of the chunk whose id is `h >> 32`; `chunks` and
    /// `ids` are chunks and their ids (the Loader's chunk registry), of which the batches keep
    /// only those they use. A hole (`2**64 - 1`, a record skipped as bad) takes a position of
    /// its batch and gives no row.
    ///
    /// One call for a group of batches: a call per batch cost the planner the GIL, a
    /// conversion of its picks and a wake-up of a thread each time, and turning handles into
    /// picks in numpy cost it more than the rest of its work on a group.
    ///
    /// Raises:
    ///     IndexError: a handle names no record of the chunks.
    ///     ValueError: `batch_size` is 0, or `chunks` and `ids` differ in length.
    ///     RuntimeError: the queue is closed.
    fn submit_handles<'py>(
        &self,
        chunks: Vec<Bound<'py, Chunk>>,
        ids: Vec<u64>,
        handles: PyReadonlyArray1<'py, u64>,
        batch_size: usize,
    ) -> PyResult<(u64, u64)> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        if chunks.len() != ids.len() {
            return Err(PyValueError::new_err(
                "chunks and ids must have the same length",
            ));
        }
        // By id, sorted and searched (a hash map's lookups were most of the call); a run of
        // handles into one chunk looks it up once.
        let mut by_id: Vec<(u64, usize)> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        by_id.sort_unstable();
        let lens: Vec<usize> = chunks.iter().map(|c| c.get().inner.len()).collect();
        // Where each chunk the handles use goes in the batches' own list (usize::MAX: unused).
        let mut slot = vec![usize::MAX; chunks.len()];
        let mut used: Vec<Py<Chunk>> = Vec::new();
        let handles = handles.as_slice()?;
        // Each batch's picks built apart: one list of them all (16 bytes a record) was fresh
        // memory from the kernel on every call, faulted in page by page.
        let mut parts: Vec<Vec<(usize, usize)>> =
            Vec::with_capacity(handles.len().div_ceil(batch_size));
        for part in handles.chunks(batch_size) {
            let mut picks = Vec::with_capacity(part.len());
            // Handles come in runs into one chunk (a piece's block of the interleave, 16 or
            // more): each run's chunk is looked up once, and its rows checked in a tight loop
            // (a lookup test a handle was ~4.6 ns of the 16k-handle group's ~75 us).
            let mut rest = part;
            while let Some(&first) = rest.first() {
                let id = first >> 32;
                let run = rest
                    .iter()
                    .position(|&h| h >> 32 != id)
                    .unwrap_or(rest.len());
                let (this, after) = rest.split_at(run);
                if first == HOLE {
                    // Records skipped as bad (a run of holes: no chunk has that many rows).
                    rest = after;
                    continue;
                }
                let found = by_id
                    .binary_search_by_key(&id, |&(id, _)| id)
                    .ok()
                    .map(|k| by_id[k].1);
                let bad = |h: u64| {
                    PyIndexError::new_err(format!(
                        "no record {} in chunk {id} (handle {h})",
                        h & 0xFFFF_FFFF
                    ))
                };
                let Some(c) = found else {
                    return Err(bad(first));
                };
                if slot[c] == usize::MAX {
                    slot[c] = used.len();
                    used.push(chunks[c].clone().unbind());
                }
                let (at, len) = (slot[c], lens[c]);
                for &h in this {
                    let row = (h & 0xFFFF_FFFF) as usize;
                    if row >= len {
                        return Err(bad(h));
                    }
                    picks.push((at, row));
                }
                rest = after;
            }
            parts.push(picks);
        }
        // Every handle checked: queued all together or none.
        self.enqueue_parses(used, parts)
    }

    /// The parsed batch of `ticket` and the seconds its parse took, waiting for it at most
    /// `timeout` seconds (`None`: as long as it takes); `None` if it is not ready by then.
    ///
    /// Raises:
    ///     jaxrec.errors.JaxrecError: the batch's parse failed (naming the record's file,
    ///         index and offset).
    ///     ValueError: the ticket was never handed out, or its result was already taken.
    ///     RuntimeError: the queue is closed, or it has a batch form (use `finished`).
    #[pyo3(signature = (ticket, timeout=None))]
    fn result(
        &self,
        py: Python<'_>,
        ticket: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Parsed, f64)>> {
        if self.shared.form.is_some() {
            return Err(PyRuntimeError::new_err(
                "this ParseQueue pads its batches: take them with finished()",
            ));
        }
        let Some(done) = self.wait(py, ticket, timeout)? else {
            return Ok(None);
        };
        let refs: Vec<&Chunk> = done.chunks.iter().map(Py::get).collect();
        let out = self
            .shared
            .parser
            .get()
            .to_py(py, done.parsed, &|i| pick_location(&refs, &done.picks, i))?;
        Ok(Some((out, done.seconds)))
    }

    /// The finished batch of `ticket` (the queue's batch form: padded, with its mask), the
    /// seconds its parse took, and `(feature, truncated, skipped, skips)` for each column
    /// that truncated or skipped rows; `None` if not ready within `timeout` seconds.
    ///
    /// Raises:
    ///     jaxrec.errors.JaxrecError: the batch's parse failed (naming the record), or its
    ///         arrays do not have the form's shapes.
    ///     ValueError: the ticket was never handed out, or its result was already taken.
    ///     RuntimeError: the queue is closed, or has no batch form.
    #[pyo3(signature = (ticket, timeout=None))]
    #[allow(clippy::type_complexity)]
    fn finished<'py>(
        &self,
        py: Python<'py>,
        ticket: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, f64, Bound<'py, PyList>)>> {
        let Some(form) = &self.shared.form else {
            return Err(PyRuntimeError::new_err(
                "this ParseQueue has no batch form: take its batches with result()",
            ));
        };
        let Some(done) = self.wait(py, ticket, timeout)? else {
            return Ok(None);
        };
        self.finish(py, form, done).map(Some)
    }

    /// Parses and finishes the batch whose row i is record `rows[i]` of `chunks[which[i]]`
    /// here, on the calling thread (the GIL released while it parses), as [`Self::finished`]
    /// gives a queued one: `(batch, seconds, notes)`. For a batch worked on further where it
    /// was parsed, while it is in that core's cache (the Loader's transforms, on its pool).
    ///
    /// Raises:
    ///     jaxrec.errors.JaxrecError: a record failed to parse (named).
    ///     IndexError: a pick names no record of the chunks.
    ///     RuntimeError: the queue has no batch form.
    #[allow(clippy::type_complexity)]
    fn parse_now<'py>(
        &self,
        py: Python<'py>,
        chunks: Vec<Bound<'py, Chunk>>,
        which: PyReadonlyArray1<'py, i64>,
        rows: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<(Bound<'py, PyDict>, f64, Bound<'py, PyList>)> {
        let Some(form) = &self.shared.form else {
            return Err(PyRuntimeError::new_err(
                "this ParseQueue has no batch form: parse_now() finishes batches in its form",
            ));
        };
        let refs: Vec<&Chunk> = chunks.iter().map(Bound::get).collect();
        let picks = picks(&refs, which.as_slice()?, rows.as_slice()?)?;
        let chunks = Arc::new(chunks.into_iter().map(Bound::unbind).collect());
        let parser = self.shared.parser.get();
        let done = py.detach(|| parse_done(parser, Some(form), chunks, picks));
        self.finish(py, form, done)
    }

    /// Batches submitted and not yet taken.
    fn __len__(&self) -> usize {
        self.shared.lock().open.len()
    }

    /// Queues a read of `reader`'s next block (after framing past `skip` records), taken by
    /// the queue's threads before any parse; returns its ticket for [`Self::read_result`].
    ///
    /// Raises:
    ///     RuntimeError: the queue is closed.
    pub(super) fn submit_read(
        &self,
        reader: Py<RecordReader>,
        skip: u64,
        max_records: usize,
        block_bytes: usize,
    ) -> PyResult<u64> {
        let (ticket, _) = self.enqueue([reader], |st, ticket, reader| {
            st.read_open.insert(ticket);
            st.reads.push_back(ReadJob {
                ticket,
                reader,
                skip,
                max_records,
                block_bytes,
            });
        })?;
        Ok(ticket)
    }

    /// `(chunk, seconds)` of the read of `ticket`: the chunk read (`None`: the stream ended
    /// before it, or before `skip` records) and the seconds the read took; `None` if it is not
    /// done within `timeout` seconds (`None`: as long as it takes).
    ///
    /// Raises:
    ///     jaxrec.errors.JaxrecError: the read failed (as `RecordReader.read_chunk` raises).
    ///     ValueError: the ticket was never handed out, or taken or forgotten already.
    ///     RuntimeError: the queue is closed.
    #[pyo3(signature = (ticket, timeout=None))]
    fn read_result(
        &self,
        py: Python<'_>,
        ticket: u64,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Option<Chunk>, f64)>> {
        let Some(done) = self.wait_read(py, ticket, timeout)? else {
            return Ok(None);
        };
        Ok(Some((done.chunk?, done.seconds)))
    }

    /// Gives up on the read of `ticket`: dropped if queued or done, and when done if running.
    /// A ticket not open is ignored (idempotent).
    pub(super) fn forget_read(&self, ticket: u64) {
        let mut st = self.shared.lock();
        if !st.read_open.remove(&ticket) {
            return;
        }
        let queued = st
            .reads
            .iter()
            .position(|r| r.ticket == ticket)
            .and_then(|i| st.reads.remove(i));
        let done = st.read_done.remove(&ticket);
        drop(st);
        drop((queued, done)); // with the GIL: the chunk's and reader's references go at once
    }

    /// Drops every queued and finished batch and read and, with `wait`, joins the threads
    /// (each finishes the batch it is parsing or the block it is reading); without, they end
    /// on their own once they do (a read that never returns keeps its thread). Idempotent.
    #[pyo3(signature = (wait=true))]
    fn close(&self, py: Python<'_>, wait: bool) {
        let left = self.shared.shut();
        let workers = std::mem::take(
            &mut *self
                .workers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if wait {
            py.detach(|| {
                for w in workers {
                    // A worker's panic was caught per batch; a join error leaves nothing to undo.
                    let _ = w.join();
                }
            });
        }
        drop(left); // with the GIL: the chunks' references go at once
    }
}

impl Drop for ParseQueue {
    fn drop(&mut self) {
        // Collected without close(): stop the threads (they exit after their current batch;
        // not joined here, a collection must not block). A collection holds the GIL.
        drop(self.shared.shut());
    }
}
