//! Reading TFRecord files in [`Chunk`]s: one buffer holding the raw stream bytes read and the
//! `[start, end)` of each record's payload in it, so a chunk of thousands of records is one
//! allocation and no per-record copy. Bad records fail the read, or are skipped and counted.
//!
//! A reader covers a [`Range`] of its file: from a record boundary, or (plain files, `sync`)
//! from any byte, where it scans for the first true record; up to an end offset, past which no
//! record starts. That is how the loader splits a file into byte ranges read by different hosts.
//!
//! No size read from a file drives an allocation before it is checked: a record's length against
//! `max_record_bytes` and, for plain files, against what the file holds; memory for a record
//! whose stream length is unknown (compressed files) grows geometrically with the bytes that
//! actually arrive, and every allocation is fallible (`try_reserve`).

use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use super::blocks::{rounded_capacity, Block};
use super::compress::{self, Compression, Input, Source};
use super::crc::{masked_crc32c, masked_crc32c_lanes, masked_crc32c_length, LANES};
use super::{FOOTER, HEADER};
use crate::error::{Error, Location, Result, Skip};
use crate::prefetch::prefetch_all;

/// The default of [`ReaderOptions::max_record_bytes`]: 1 GiB. A `tf.train.Example` cannot
/// exceed protobuf's 2 GiB message limit and jaxrec caps a decoded tensor row at 1 GiB, so a
/// longer record is almost always a damaged or hostile length; a file that really holds larger
/// records can raise the limit.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 1 << 30;
/// How many skipped records the stats describe (they count them all).
const MAX_KEPT_SKIPS: usize = 100;
/// Blocks read while skipping records or scanning for a sync point.
const SCAN_BLOCK: usize = 1 << 20;
/// When a record of a compressed stream fails its CRC, this many more decompressed bytes are
/// read (and dropped) to see whether the stream itself is broken, which is then reported as
/// the cause (raise mode only: the reader stops there anyway).
const PROBE_BYTES: u64 = 64 << 20;
/// The masked CRC of a length field of 0: a run of zero bytes reads as empty-record headers,
/// and this constant rejects them without computing a CRC per byte while scanning.
const ZERO_LEN_CRC: u32 = 0x0798_0329;

/// Options of a [`RecordReader`].
#[derive(Debug, Clone, Copy)]
pub struct ReaderOptions {
    /// Check each record's data CRC (the length CRC is always checked: it guards allocation).
    pub verify: bool,
    /// Skip and count bad records instead of failing (`on_error="skip"`).
    pub skip_errors: bool,
    /// The largest record payload accepted; a longer declared length is corrupt (see
    /// [`DEFAULT_MAX_RECORD_BYTES`]).
    pub max_record_bytes: u64,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            verify: true,
            skip_errors: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }
}

/// The part of a file a reader covers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range {
    /// Where reading starts: a record boundary (an earlier chunk's `end_offset`, an index
    /// entry, 0), or with `sync` any byte.
    pub start_offset: u64,
    /// The index in the file of the first record read (with `sync`: of the record found).
    pub start_index: u64,
    /// Only records whose header starts before this offset are read (the last one may extend
    /// past it). None: to the end of the file.
    pub end_offset: Option<u64>,
    /// Scan from `start_offset` for the first position holding a true record: a header whose
    /// length CRC matches, whose payload fits in the file and whose data CRC matches (a false
    /// match has probability 2^-64). Plain files of known length only.
    ///
    /// A record whose payload itself holds TFRecord frames (a TFRecord file stored as a record)
    /// fools the scan when `start_offset` falls inside that payload, before an embedded frame:
    /// the embedded records are returned, and the chain breaks where the embedded file ends
    /// (a length CRC mismatch, or a landing point other than the next range's sync point —
    /// the loader checks that each range's chain lands on the next range's sync point). A scan
    /// starting at or before the outer record's header is never fooled: it meets the true
    /// header first.
    pub sync: bool,
}

/// Records read in one go: a buffer and the payload range of each record in it.
#[derive(Debug, Default)]
pub struct Chunk {
    /// A block of raw stream bytes (headers and footers included), shared by the chunks framed
    /// from it; payloads are sub-slices.
    pub data: Arc<Block>,
    /// `data[starts[i]..ends[i]]` is record i's payload.
    pub starts: Vec<usize>,
    /// See `starts`.
    pub ends: Vec<usize>,
    /// Stream offset of each record's header.
    pub file_offsets: Vec<u64>,
    /// Index in the file of each record (skipped records leave gaps).
    pub indices: Vec<u64>,
    /// Stream offset just past the chunk's last record: where a resumed reader starts. After
    /// the last chunk of a bounded reader, the header offset of the first record at or after
    /// the range's end (or the stream's length).
    pub end_offset: u64,
    /// Index of the record that follows this chunk.
    pub next_index: u64,
}

impl Chunk {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Payload bytes of all its records.
    pub fn payload_bytes(&self) -> usize {
        self.starts.iter().zip(&self.ends).map(|(s, e)| e - s).sum()
    }

    /// True when the chunk holds no record.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Payload of record `i`.
    pub fn record(&self, i: usize) -> &[u8] {
        &self.data[self.starts[i]..self.ends[i]]
    }
}

/// Counters of a reader, for the loader's stats.
#[derive(Debug, Default, Clone)]
pub struct ReadStats {
    /// Records returned.
    pub records: u64,
    /// Payload bytes returned.
    pub bytes: u64,
    /// Records skipped as corrupt (damage that ends the file — a broken header, a cut or
    /// broken compressed stream, an oversized record — counts 1).
    pub skipped_records: u64,
    /// Stream bytes skipped with them, as far as known.
    pub skipped_bytes: u64,
    /// The first records skipped (`MAX_KEPT_SKIPS`): where, and why.
    pub skips: Vec<Skip>,
}

/// What the header at a position says.
enum Head {
    /// A sound header: the payload's length.
    Record(usize),
    /// This many more bytes are needed to read it.
    Need(usize),
    /// Nothing more to read here: the range ends, or the header is broken (and was skipped).
    Stop,
}

/// How a decompressor failed, kept until framing reaches the point where it happened.
struct StreamFailure {
    error: io::Error,
    /// Decompressed bytes produced before the failure.
    at: u64,
    /// How far into the compressed file the decompressor had read.
    compressed: Option<u64>,
}

impl StreamFailure {
    /// Where it happened, in the compressed file and in the stream.
    fn describe(&self) -> String {
        let compressed = self
            .compressed
            .map_or(String::new(), |c| format!("compressed byte {c}, "));
        format!("{compressed}decompressed byte {}", self.at)
    }
}

/// Little-endian integers at `at` of `b` (callers check the length first).
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Reads framed records from one (possibly compressed) stream.
pub struct RecordReader {
    input: Input,
    path: Option<String>,
    known_len: Option<u64>,
    compression: Compression,
    opts: ReaderOptions,
    /// The block of stream bytes being framed; chunks share it (no copy per chunk).
    block: Arc<Block>,
    /// Stream offset of `block[0]`; the input's position is `block_offset + block.len()`.
    block_offset: u64,
    /// Next unframed byte in `block`.
    pos: usize,
    next_index: u64,
    /// No record starting at or after this offset is read.
    end_offset: u64,
    eof: bool,
    done: bool,
    /// Where the reader stands is known (false once framing was lost to an error, or when a
    /// synced range held no record).
    placed: bool,
    /// A decompressor's error, reported once framing reaches where it happened.
    stream_failure: Option<StreamFailure>,
    /// An error met after some records of a chunk were framed: those records are returned
    /// first and the error on the next call, so no good record before it is lost.
    pending: Option<Error>,
    stats: ReadStats,
}

impl RecordReader {
    /// Opens `path`; `compression = None` infers it. `range` says where to start and stop.
    pub fn open(
        path: &Path,
        compression: Option<Compression>,
        opts: ReaderOptions,
        range: Range,
    ) -> Result<Self> {
        let display = path.display().to_string();
        let source = compress::open(path, compression).map_err(|e| Error::Io {
            path: Some(display.clone()),
            source: e,
        })?;
        Self::from_source(source, display, opts, range)
    }

    /// Reads an opened [`Source`] (see [`compress::open_stream`]) named `display`, over
    /// `range` like [`RecordReader::open`].
    pub fn from_source(
        source: Source,
        display: String,
        opts: ReaderOptions,
        range: Range,
    ) -> Result<Self> {
        let Source {
            input,
            known_len,
            compression,
        } = source;
        let mut r = Self::from_input(input, Some(display), known_len, compression, opts);
        r.enter(range)?;
        Ok(r)
    }

    /// Wraps an already decompressed stream (tests, in-memory data).
    pub fn from_reader(
        src: Box<dyn Read + Send>,
        path: Option<String>,
        known_len: Option<u64>,
        compression: Compression,
        opts: ReaderOptions,
    ) -> Self {
        Self::from_input(Input::Stream(src), path, known_len, compression, opts)
    }

    fn from_input(
        input: Input,
        path: Option<String>,
        known_len: Option<u64>,
        compression: Compression,
        mut opts: ReaderOptions,
    ) -> Self {
        // Lengths are used as in-memory sizes: keep the limit well inside `usize`.
        opts.max_record_bytes = opts
            .max_record_bytes
            .min((isize::MAX as u64) / 2 - (HEADER + FOOTER) as u64);
        RecordReader {
            input,
            path,
            known_len,
            compression,
            opts,
            block: Arc::new(Block::default()),
            block_offset: 0,
            pos: 0,
            next_index: 0,
            end_offset: u64::MAX,
            eof: false,
            done: false,
            placed: true,
            stream_failure: None,
            pending: None,
            stats: ReadStats::default(),
        }
    }

    /// Moves to the start of `range` (a seek, a skip through the stream, or a sync scan).
    fn enter(&mut self, range: Range) -> Result<()> {
        self.next_index = range.start_index;
        self.end_offset = range.end_offset.unwrap_or(u64::MAX);
        if range.sync {
            if self.compression != Compression::None {
                return Err(Error::spec(
                    None,
                    format!(
                        "sync=True needs an uncompressed file: a {} stream cannot be entered in \
                         the middle",
                        self.compression.name()
                    ),
                ));
            }
            if self.known_len.is_none() {
                return Err(Error::spec(
                    None,
                    "sync=True needs the file's size (pass size= with a file object)",
                ));
            }
        }
        if range.start_offset > 0 {
            self.skip_to(range.start_offset)?;
        }
        if range.sync {
            self.sync()?;
        }
        if self.done {
            self.input = Input::empty();
        }
        Ok(())
    }

    /// The compression in effect.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Counters so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// Index in the file of the next record to read.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Stream offset of the next record's header: where the next chunk starts; once a bounded
    /// reader is exhausted, the first record at or after the range's end (the stream's length
    /// at its end). None when unknown: a synced range that holds no record start (the next
    /// record starts at or after the range's end, where was not searched), or after framing
    /// was lost to an error.
    pub fn next_offset(&self) -> Option<u64> {
        self.placed.then(|| self.offset_of(self.pos))
    }

    fn offset_of(&self, p: usize) -> u64 {
        self.block_offset + p as u64
    }

    /// Moves to stream position `offset`: a seek in a plain file; a decompressed stream is
    /// read and discarded up to it.
    fn skip_to(&mut self, offset: u64) -> Result<()> {
        if let Some(len) = self.known_len {
            if offset > len {
                return Err(self.corrupt_at(
                    offset,
                    format!("resume offset {offset} is past the end of the file ({len} bytes)"),
                ));
            }
        }
        let seeked = self.input.seek_to(offset).map_err(|e| self.io_error(e))?;
        if !seeked {
            let (copied, failed) = drain(&mut self.input, offset);
            if let Some(e) = failed {
                return Err(self.skip_error(e, copied, offset));
            }
            if copied < offset {
                return Err(self.truncated_at(
                    copied,
                    format!(
                        "resume offset {offset} is past the end of the stream ({copied} bytes)"
                    ),
                ));
            }
        }
        self.block_offset = offset;
        Ok(())
    }

    fn loc(&self, offset: u64, index: u64) -> Location {
        Location {
            path: self.path.clone(),
            record_index: Some(index),
            byte_offset: Some(offset),
        }
    }

    fn corrupt_at(&self, offset: u64, detail: String) -> Error {
        Error::Corrupt {
            loc: self.loc(offset, self.next_index),
            detail,
        }
    }

    fn truncated_at(&self, offset: u64, detail: String) -> Error {
        Error::Truncated {
            loc: self.loc(offset, self.next_index),
            detail,
        }
    }

    fn io_error(&self, e: io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source: e,
        }
    }

    /// An error of the stream while it is read past (`skip_to`, `skip`) at stream offset
    /// `at`, reported at the record at `offset`: plain files' errors are the OS's; a
    /// decompressor's are about the data.
    fn skip_error(&mut self, e: io::Error, at: u64, offset: u64) -> Error {
        if self.compression == Compression::None {
            return self.io_error(e);
        }
        let compressed = self.input.compressed_position();
        let failure = StreamFailure {
            error: e,
            at,
            compressed,
        };
        self.stream_error(failure, offset)
    }

    /// A decompressor's failure, located at the record header framing stopped at (`offset`).
    /// Bad compressed data is corruption, a stream cut short is truncation; anything else is
    /// the OS's error.
    fn stream_error(&self, f: StreamFailure, offset: u64) -> Error {
        let name = self.compression.name();
        let at = f.describe();
        match f.error.kind() {
            io::ErrorKind::UnexpectedEof => self.truncated_at(
                offset,
                format!(
                    "{name} stream ends early ({at}) without its end-of-stream marker and \
                     trailer: the file was cut short, or its writer never closed it: {}",
                    f.error
                ),
            ),
            io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => self.corrupt_at(
                offset,
                format!(
                    "{name} stream is corrupt (the decompressor failed at {at}): {}",
                    f.error
                ),
            ),
            _ => self.io_error(f.error),
        }
    }

    /// Either fails with `err` or, when skipping, records it and returns `Ok`.
    fn fail_or_skip(&mut self, err: Error, skipped_bytes: u64) -> Result<()> {
        if !self.opts.skip_errors {
            return Err(err);
        }
        self.stats.skipped_records += 1;
        self.stats.skipped_bytes += skipped_bytes;
        if self.stats.skips.len() < MAX_KEPT_SKIPS {
            self.stats.skips.push(err.to_skip());
        }
        Ok(())
    }

    /// Damage after which the rest of the stream cannot be framed: ends the reader, then
    /// fails with `err` or skips it, counting `skipped_bytes`.
    fn lose(&mut self, err: Error, skipped_bytes: u64) -> Result<Head> {
        self.pos = self.block.len();
        self.done = true;
        self.placed = false;
        self.fail_or_skip(err, skipped_bytes)?;
        Ok(Head::Stop)
    }

    /// The error for a record of a compressed stream whose CRC does not match: when the
    /// decompressor failed (already, or within [`PROBE_BYTES`] more when the reader stops
    /// here anyway: in raise mode, or when the framing is lost), that failure is the cause and
    /// is what is reported (true: the stream is broken). Else `crc`.
    fn crc_error(&mut self, offset: u64, crc: Error, ending: bool) -> (Error, bool) {
        if self.compression == Compression::None {
            return (crc, false);
        }
        if self.stream_failure.is_none() && !self.eof && (ending || !self.opts.skip_errors) {
            // Nothing after this point will be framed: it may be read and dropped.
            let at = self.offset_of(self.block.len());
            let (n, failed) = drain(&mut self.input, PROBE_BYTES);
            if let Some(error) = failed {
                let compressed = self.input.compressed_position();
                self.stream_failure = Some(StreamFailure {
                    error,
                    at: at + n,
                    compressed,
                });
            }
            self.eof = true;
        }
        let Some(f) = self.stream_failure.take() else {
            return (crc, false);
        };
        let name = self.compression.name();
        let at = f.describe();
        let detail = match f.error.kind() {
            io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => format!(
                "{name} stream is corrupt (the decompressor failed at {at}: {}); the first record \
                 it damaged is this one: {}",
                f.error,
                crc.detail()
            ),
            io::ErrorKind::UnexpectedEof => format!(
                "{name} stream is corrupt (the decompressor read on to {at}, where the stream \
                 ended without its end-of-stream marker: {}); the first record it damaged is \
                 this one: {}",
                f.error,
                crc.detail()
            ),
            _ => return (self.io_error(f.error), true),
        };
        (self.corrupt_at(offset, detail), true)
    }

    /// The payload length in the header at `p` of `buf` (the current block) when that header
    /// is whole, sound and starts in the range: the case of every record but the last, kept
    /// small for the framing loop. Anything else is [`RecordReader::odd_head`]'s.
    #[inline(always)]
    fn sound_len(&self, buf: &[u8], p: usize) -> Option<usize> {
        if buf.len() - p < HEADER || self.offset_of(p) >= self.end_offset {
            return None;
        }
        let len = le_u64(buf, p);
        let fits = match self.known_len {
            // `len` is the file's word, any u64: saturate (u64::MAX never fits a file).
            Some(n) => {
                len.saturating_add((HEADER + FOOTER) as u64) <= n.saturating_sub(self.offset_of(p))
            }
            None => true,
        };
        let sound = len <= self.opts.max_record_bytes
            && fits
            && masked_crc32c_length(len.to_le_bytes()) == le_u32(buf, p + 8);
        // `len` is at most `max_record_bytes`, itself kept well inside usize.
        sound.then_some(len as usize)
    }

    /// Reads the header at `p` of `buf` (the current block).
    fn head(&mut self, buf: &[u8], p: usize) -> Result<Head> {
        match self.sound_len(buf, p) {
            Some(len) => Ok(Head::Record(len)),
            None => self.odd_head(buf, p),
        }
    }

    /// A header that is not whole and sound: the range ends before it, it needs more bytes,
    /// or it is damaged (see [`RecordReader::head`]).
    #[cold]
    fn odd_head(&mut self, buf: &[u8], p: usize) -> Result<Head> {
        let offset = self.offset_of(p);
        if offset >= self.end_offset {
            self.pos = p;
            self.done = true;
            return Ok(Head::Stop);
        }
        let avail = buf.len() - p;
        if avail < HEADER {
            return Ok(Head::Need(HEADER - avail));
        }
        let len = le_u64(buf, p);
        let stored = le_u32(buf, p + 8);
        let actual = masked_crc32c_length(len.to_le_bytes());
        if actual != stored {
            // Without a trusted length the rest of the stream cannot be framed.
            let err = self.corrupt_at(
                offset,
                format!(
                    "length CRC mismatch: stored {stored:#010x}, computed {actual:#010x} \
                     (length field reads {len})"
                ),
            );
            let (err, _) = self.crc_error(offset, err, true);
            let rest = self
                .known_len
                .map_or(avail as u64, |n| n.saturating_sub(offset));
            return self.lose(err, rest);
        }
        let total = (HEADER as u64 + FOOTER as u64).saturating_add(len);
        if let Some(n) = self.known_len {
            let left = n.saturating_sub(offset);
            if total > left {
                let err = self.truncated_at(
                    offset,
                    format!(
                        "record of {len} bytes needs {total} bytes but the file has {left} left"
                    ),
                );
                return self.lose(err, left);
            }
        }
        self.too_large(avail, offset, len, total)
    }

    /// A header declaring more than `max_record_bytes`. A plain file holds it (checked before);
    /// a compressed stream is read on (dropping the bytes) until it is known to hold more
    /// than the limit, or ends first, which makes it a truncated record instead.
    fn too_large(&mut self, avail: usize, offset: u64, len: u64, total: u64) -> Result<Head> {
        let limit = self.opts.max_record_bytes;
        let mut present = avail as u64;
        let mut failure = None;
        if self.known_len.is_none() && !self.eof {
            // Enough to show the payload is longer than the limit: bounded by it, not by `len`.
            let want = (HEADER as u64 + limit + 1).saturating_sub(present);
            let (n, failed) = drain(&mut self.input, want);
            present += n;
            if let Some(error) = failed {
                let compressed = self.input.compressed_position();
                failure = Some(StreamFailure {
                    error,
                    at: offset + present,
                    compressed,
                });
            }
            self.eof = true;
        } else if let Some(n) = self.known_len {
            present = n.saturating_sub(offset);
        }
        let err = if let Some(f) = failure.or_else(|| self.stream_failure.take()) {
            self.stream_error(f, offset)
        } else if present > HEADER as u64 + limit || present >= total {
            self.corrupt_at(
                offset,
                format!(
                    "record declares {len} bytes, more than max_record_bytes ({limit}); if the \
                     file really holds records this large, raise max_record_bytes"
                ),
            )
        } else {
            self.truncated_at(
                offset,
                format!(
                    "record of {len} bytes needs {total} bytes but the stream ends after {present}"
                ),
            )
        };
        self.lose(err, present)
    }

    /// Reads up to `max_records` records from the stream, reading it in blocks of about
    /// `block_bytes`. A chunk never spans two blocks, so it may hold fewer records. Returns
    /// `None` at the end of the stream or of the range. After an error (in raise mode) the
    /// records framed before it are returned first and the error on the next call, so no good
    /// record is lost.
    pub fn next_chunk(&mut self, max_records: usize, block_bytes: usize) -> Result<Option<Chunk>> {
        if let Some(err) = self.pending.take() {
            return Err(err);
        }
        if self.done {
            return Ok(None);
        }
        let mut chunk = Chunk::default();
        let res = self.frame(&mut chunk, max_records.max(1), block_bytes.max(1));
        chunk.data = Arc::clone(&self.block);
        chunk.end_offset = self.offset_of(self.pos);
        chunk.next_index = self.next_index;
        let produced = !chunk.is_empty();
        self.settle(res, produced)?;
        if !produced && self.done {
            return Ok(None);
        }
        Ok(Some(chunk))
    }

    /// Frames past up to `n` records without returning them, and returns how many it passed:
    /// fewer at the end of the stream or of the range. Each header's length CRC is checked
    /// (it is what frames the next one), but payloads are not read where that can be avoided
    /// (a plain file seeks past them), so **data CRCs are not checked** and a record whose
    /// payload is damaged is passed like any other, uncounted: whoever returns that record
    /// checks it. A broken header fails like [`RecordReader::next_chunk`] (or, skipping bad
    /// records, ends the file, counted).
    pub fn skip(&mut self, n: u64) -> Result<u64> {
        if let Some(err) = self.pending.take() {
            return Err(err);
        }
        let mut passed = 0;
        if !self.done {
            let res = self.pass(n, &mut passed);
            self.settle(res, passed > 0)?;
        }
        Ok(passed)
    }

    /// After a call: closes the input once nothing more will be read from it, and turns an
    /// error into a pending one when the call produced something the caller gets first.
    fn settle(&mut self, res: Result<()>, produced: bool) -> Result<()> {
        if self.done || self.eof {
            // Nothing more will be read: close the file now, not when the reader is dropped.
            self.input = Input::empty();
        }
        if let Err(err) = res {
            self.done = true;
            self.placed = false;
            self.input = Input::empty();
            if !produced {
                return Err(err);
            }
            self.pending = Some(err);
        }
        Ok(())
    }

    /// Frames records of the current block into `chunk`; reads a new block when the current
    /// one holds no whole record and the chunk is still empty.
    fn frame(&mut self, chunk: &mut Chunk, max_records: usize, block_bytes: usize) -> Result<()> {
        loop {
            let block = Arc::clone(&self.block);
            let buf = block.as_slice();
            let mut p = self.pos;
            let mut fetched = p;
            let need = loop {
                fetched = prefetch_ahead(buf, p, fetched);
                if self.opts.verify && max_records.saturating_sub(chunk.len()) >= LANES {
                    // Up to LANES whole records with sound headers, taken here once framed; a
                    // full group's data CRCs are computed together.
                    let mut group = [(0usize, 0usize); LANES];
                    let mut q = p;
                    let mut whole = 0;
                    while whole < LANES {
                        match self.sound_len(buf, q) {
                            Some(len) if buf.len() - q >= HEADER + len + FOOTER => {
                                group[whole] = (q, len);
                                q += HEADER + len + FOOTER;
                                whole += 1;
                            }
                            _ => break,
                        }
                    }
                    let payload = |(q, len): (usize, usize)| &buf[q + HEADER..q + HEADER + len];
                    let mut computed = [0u32; LANES];
                    if whole == LANES {
                        computed = masked_crc32c_lanes(group.map(payload));
                    } else {
                        // The block's last few: one at a time.
                        for (crc, &at) in computed.iter_mut().zip(&group[..whole]) {
                            *crc = masked_crc32c(payload(at));
                        }
                    }
                    for ((q, len), crc) in group.into_iter().zip(computed).take(whole) {
                        if !self.take_record(chunk, buf, q, len, Some(crc))? {
                            return Ok(());
                        }
                    }
                    p = self.pos;
                    if chunk.len() >= max_records {
                        return Ok(());
                    }
                    if whole == LANES {
                        continue;
                    }
                    // The record at `p` is not whole or not sound: the general path below.
                }
                let len = match self.sound_len(buf, p) {
                    Some(len) => len,
                    None => match self.odd_head(buf, p)? {
                        Head::Record(len) => len,
                        Head::Need(n) => break n,
                        Head::Stop => return Ok(()),
                    },
                };
                let total = HEADER + len + FOOTER;
                let avail = buf.len() - p;
                if avail < total {
                    break total - avail;
                }
                let computed = self
                    .opts
                    .verify
                    .then(|| masked_crc32c(&buf[p + HEADER..p + HEADER + len]));
                if !self.take_record(chunk, buf, p, len, computed)? {
                    return Ok(());
                }
                p = self.pos;
                if chunk.len() >= max_records {
                    return Ok(());
                }
            };
            self.pos = p;
            if !chunk.is_empty() {
                return Ok(());
            }
            drop(block);
            if !self.more(need, block_bytes)? {
                return Ok(());
            }
        }
    }

    /// Takes the whole record at `p` of the current block (`len` payload bytes, its header
    /// sound) into `chunk` and moves past it; `computed` is its data's masked CRC when records
    /// are verified. False when a bad CRC ends the reader (see [`Self::bad_data`]).
    #[inline(always)]
    fn take_record(
        &mut self,
        chunk: &mut Chunk,
        buf: &[u8],
        p: usize,
        len: usize,
        computed: Option<u32>,
    ) -> Result<bool> {
        let offset = self.offset_of(p);
        let (start, end) = (p + HEADER, p + HEADER + len);
        let mut ok = true;
        if let Some(computed) = computed {
            let stored = le_u32(buf, end);
            if stored != computed {
                self.pos = p;
                if self.bad_data(offset, stored, computed, len, buf.len() - p)? {
                    return Ok(false);
                }
                ok = false;
            }
        }
        if ok {
            chunk.starts.push(start);
            chunk.ends.push(end);
            chunk.file_offsets.push(offset);
            chunk.indices.push(self.next_index);
            self.stats.records += 1;
            self.stats.bytes += len as u64;
        }
        self.next_index += 1;
        self.pos = end + FOOTER;
        Ok(true)
    }

    /// A record at `offset` whose data CRC does not match: skipped (false), or, when it is
    /// where a compressed stream broke, the end of the reader (true); an error in raise mode.
    #[cold]
    fn bad_data(
        &mut self,
        offset: u64,
        stored: u32,
        computed: u32,
        len: usize,
        avail: usize,
    ) -> Result<bool> {
        let total = HEADER + len + FOOTER;
        let err = self.corrupt_at(
            offset,
            format!(
                "data CRC mismatch: stored {stored:#010x}, computed {computed:#010x} over {len} \
                 bytes"
            ),
        );
        let (err, broken) = self.crc_error(offset, err, false);
        if broken {
            self.lose(err, (avail - total) as u64)?;
            return Ok(true);
        }
        self.fail_or_skip(err, total as u64)?;
        Ok(false)
    }

    /// Passes up to `n` records (see [`RecordReader::skip`]), counting them in `passed`.
    fn pass(&mut self, n: u64, passed: &mut u64) -> Result<()> {
        while *passed < n {
            let block = Arc::clone(&self.block);
            let p = self.pos;
            let len = match self.head(&block, p)? {
                Head::Record(len) => len,
                Head::Need(k) => {
                    drop(block);
                    if !self.more(k, SCAN_BLOCK)? {
                        return Ok(());
                    }
                    continue;
                }
                Head::Stop => return Ok(()),
            };
            let total = HEADER + len + FOOTER;
            let avail = block.len() - p;
            drop(block);
            if avail >= total {
                self.pos = p + total;
            } else if self.eof {
                self.end_of_stream(total - avail)?;
                return Ok(());
            } else {
                self.jump(self.offset_of(p), total as u64, (total - avail) as u64)?;
                if self.done {
                    return Ok(());
                }
            }
            self.next_index += 1;
            *passed += 1;
        }
        Ok(())
    }

    /// Moves past the record at `offset` (`total` bytes, of which `gap` are not in the block):
    /// a seek in a plain file, else its remaining bytes are read and dropped.
    fn jump(&mut self, offset: u64, total: u64, gap: u64) -> Result<()> {
        let target = offset + total;
        let seeked = self.input.seek_to(target).map_err(|e| self.io_error(e))?;
        if !seeked {
            let before = self.offset_of(self.block.len());
            let (copied, failed) = drain(&mut self.input, gap);
            if let Some(e) = failed {
                let err = self.skip_error(e, before + copied, offset);
                self.lose(err, total - gap + copied)?;
                return Ok(());
            }
            if copied < gap {
                let err = self.truncated_at(
                    offset,
                    format!("stream ends inside a record of {total} bytes"),
                );
                self.lose(err, total - gap + copied)?;
                return Ok(());
            }
        }
        self.block = Arc::new(Block::default());
        self.block_offset = target;
        self.pos = 0;
        self.eof = false;
        Ok(())
    }

    /// Makes `need` more bytes available after the current position, reading a block of about
    /// `block_bytes`. False when the stream has ended (at a clean end, or at damage that was
    /// skipped; damage in raise mode is an error).
    fn more(&mut self, need: usize, block_bytes: usize) -> Result<bool> {
        if self.eof {
            self.end_of_stream(need)?;
            return Ok(false);
        }
        let want = self.want(need, block_bytes);
        self.read_block(want)?;
        Ok(true)
    }

    /// How many bytes to read next when `need` more are needed to finish what is at `pos`.
    fn want(&self, need: usize, block_bytes: usize) -> usize {
        let tail = self.block.len() - self.pos;
        let mut want = match self.known_len {
            // A plain file's record length was checked against the file: read all of it.
            Some(_) => need.max(block_bytes),
            // A compressed stream's length is unknown: grow towards a long record at most
            // doubling what has arrived, so a false length costs memory in proportion to the
            // bytes that really exist (and the growth stays geometric, not quadratic).
            None => need.min(tail.max(block_bytes)).max(block_bytes),
        };
        // A bounded reader reads past its end only for the record that crosses it.
        let stream_end = self.offset_of(self.block.len());
        let to_end = self.end_offset.saturating_sub(stream_end);
        want = want.min(usize::try_from(to_end).unwrap_or(usize::MAX).max(need));
        if let Some(n) = self.known_len {
            let left = n.saturating_sub(stream_end);
            want = want.min(usize::try_from(left).unwrap_or(usize::MAX).max(need));
        }
        want
    }

    /// The end of the stream was reached with `need` more bytes wanted at `pos`: a clean end
    /// if nothing is left over, else a truncated record or the decompressor's failure.
    fn end_of_stream(&mut self, need: usize) -> Result<()> {
        let offset = self.offset_of(self.pos);
        let avail = self.block.len() - self.pos;
        if let Some(f) = self.stream_failure.take() {
            let err = self.stream_error(f, offset);
            self.lose(err, avail as u64)?;
            return Ok(());
        }
        if avail > 0 {
            let what = if avail < HEADER { "header" } else { "payload" };
            let err = self.truncated_at(
                offset,
                format!(
                    "file ends inside a record {what}: {avail} bytes left, {need} more expected"
                ),
            );
            self.lose(err, avail as u64)?;
            return Ok(());
        }
        self.done = true;
        Ok(())
    }

    /// Reads up to `want` more bytes of stream after the unframed tail of the block (at most
    /// one partial record). A block holding nothing but that partial record, and shared with
    /// no chunk, grows in place (a large allocation is then moved by the allocator, not
    /// copied); otherwise the tail starts a new block.
    fn read_block(&mut self, want: usize) -> Result<()> {
        let tail = self.block.len() - self.pos;
        let grown = if self.pos == 0 && tail > 0 {
            Arc::get_mut(&mut self.block)
        } else {
            None
        };
        let res = match grown {
            Some(buf) => buf.fill(&mut self.input, want),
            None => {
                let mut buf = Block::with_room(tail + want);
                // A pooled block fits already; a new one gets a rounded capacity, to fit later
                // reads from the pool too (see CAPACITY_STEP).
                let room = if buf.capacity() >= tail + want {
                    0
                } else {
                    rounded_capacity(tail + want)
                };
                let res = buf
                    .reserve(room)
                    .and_then(|()| buf.extend_from_slice(&self.block[self.pos..]))
                    .and_then(|()| buf.fill(&mut self.input, want));
                self.block_offset += self.pos as u64;
                self.pos = 0;
                self.block = Arc::new(buf);
                res
            }
        };
        let got = match res {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory => return Err(self.io_error(e)),
            Err(e) if self.compression == Compression::None => return Err(self.io_error(e)),
            Err(error) => {
                // Bytes read before the error stay in the block and are framed first.
                let compressed = self.input.compressed_position();
                self.stream_failure = Some(StreamFailure {
                    error,
                    at: self.offset_of(self.block.len()),
                    compressed,
                });
                self.eof = true;
                return Ok(());
            }
        };
        if got < want {
            self.eof = true;
        }
        Ok(())
    }

    /// Scans from the current position for the first true record starting before the range's
    /// end (see [`Range::sync`]) and stops there; with none, the reader is empty and its
    /// position unknown.
    fn sync(&mut self) -> Result<()> {
        let Some(file_len) = self.known_len else {
            return Err(Error::internal("sync without a known file length"));
        };
        let limit = self.end_offset.min(file_len);
        let max_len = self.opts.max_record_bytes;
        let mut from = self.pos;
        loop {
            let block = Arc::clone(&self.block);
            let buf = block.as_slice();
            // Positions whose whole header is in the block, and that start in the range.
            let complete = buf.len().saturating_sub(HEADER - 1);
            let in_range =
                usize::try_from(limit.saturating_sub(self.block_offset)).unwrap_or(usize::MAX);
            let to = complete.min(in_range);
            if let Some(p) = find_header(buf, from, to, self.block_offset, file_len, max_len) {
                let len = le_u64(buf, p) as usize; // checked against max_len by find_header
                let total = HEADER + len + FOOTER;
                if buf.len() - p >= total {
                    let stored = le_u32(buf, p + HEADER + len);
                    if masked_crc32c(&buf[p + HEADER..p + HEADER + len]) == stored {
                        self.pos = p;
                        return Ok(());
                    }
                    from = p + 1;
                    continue;
                }
                // The candidate's payload is not all here: read on, keeping it (no re-reading
                // whichever way its CRC turns out).
                self.pos = p;
                drop(block);
                let need = total - (self.block.len() - p);
                let before = self.offset_of(self.pos);
                self.read_block(need)?;
                let p = usize::try_from(before - self.block_offset).unwrap_or(0);
                // Short of the record: the file changed under us; not a record then.
                from = if self.block.len() - p < total {
                    p + 1
                } else {
                    p
                };
                continue;
            }
            if in_range <= complete || self.eof {
                return self.sync_found_nothing();
            }
            // Keep the last HEADER-1 bytes (a header may start there) and read on.
            self.pos = to;
            drop(block);
            let stream_end = self.offset_of(self.block.len());
            let to_end = (limit + HEADER as u64).saturating_sub(stream_end);
            let want = SCAN_BLOCK.min(usize::try_from(to_end).unwrap_or(usize::MAX).max(1));
            self.read_block(want)?;
            from = self.pos;
        }
    }

    fn sync_found_nothing(&mut self) -> Result<()> {
        self.done = true;
        self.placed = false;
        self.stream_failure = None;
        Ok(())
    }
}

/// The first position `p` in `[from, to)` of `buf` (whose byte 0 is at stream offset `base`
/// of a file of `file_len` bytes) holding a plausible header: a length of at most `max_len`
/// whose record fits in the file, and a matching length CRC. `to + HEADER - 1 <= buf.len()`.
///
/// Most positions are rejected eight at a time: a length that fits in a file of less than
/// 2^56 bytes has a zero top byte (at `p + 7`), so only positions before a zero byte are
/// looked at; inside a run of zero bytes, where no header can start (the length CRC of a zero
/// length is not zero), the scan jumps to the run's end. The CRC runs on what is left.
fn find_header(
    buf: &[u8],
    from: usize,
    to: usize,
    base: u64,
    file_len: u64,
    max_len: u64,
) -> Option<usize> {
    if file_len >> 56 != 0 {
        return (from..to).find(|&p| plausible(buf, p, base, file_len, max_len));
    }
    let mut p = from;
    while p < to {
        p = next_zero(buf, p + 7, to + 7)? - 7;
        if le_u64(buf, p) == 0 && le_u32(buf, p + 8) == 0 {
            // Twelve zero bytes: go to 11 bytes before the next non-zero one.
            let q = next_nonzero(buf, p + HEADER, (to + HEADER - 1).min(buf.len()));
            p = (q - (HEADER - 1)).max(p + 1);
            continue;
        }
        if plausible(buf, p, base, file_len, max_len) {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// Whether the 12 bytes at `p` of `buf` are a header whose length is at most `max_len`, whose
/// record fits in the file, and whose length CRC matches.
#[inline]
fn plausible(buf: &[u8], p: usize, base: u64, file_len: u64, max_len: u64) -> bool {
    let len = le_u64(buf, p);
    let room = file_len.saturating_sub(base + p as u64);
    if len > max_len || len + (HEADER + FOOTER) as u64 > room {
        return false;
    }
    let stored = le_u32(buf, p + 8);
    if len == 0 {
        stored == ZERO_LEN_CRC
    } else {
        masked_crc32c_length(len.to_le_bytes()) == stored
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The index of the first zero byte of `buf[from..end]`, eight bytes at a time.
#[inline]
fn next_zero(buf: &[u8], from: usize, end: usize) -> Option<usize> {
    // The lowest set bit marks the first zero byte (borrows only corrupt higher bytes).
    let zeros = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut i = from;
    while i + 16 <= end {
        if zeros(le_u64(buf, i)) | zeros(le_u64(buf, i + 8)) != 0 {
            break;
        }
        i += 16;
    }
    while i + 8 <= end {
        let z = zeros(le_u64(buf, i));
        if z != 0 {
            return Some(i + (z.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    (i..end).find(|&j| buf[j] == 0)
}

/// The index of the first non-zero byte of `buf[from..end]`, or `end`.
#[inline]
fn next_nonzero(buf: &[u8], from: usize, end: usize) -> usize {
    let mut i = from;
    while i + 8 <= end {
        let w = le_u64(buf, i);
        if w != 0 {
            return i + (w.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    (i..end).find(|&j| buf[j] != 0).unwrap_or(end)
}

/// Bytes ahead of the framing position asked into the cache (see [`prefetch_ahead`]).
const PREFETCH_BYTES: usize = 3 << 10;

/// Asks the cache for `buf` from `fetched` up to [`PREFETCH_BYTES`] past `p`; returns how far
/// it asked.
///
/// Framing hops from header to header, and each header's address comes from the one before:
/// a block read by the kernel arrives out of the cache, so each hop waited on memory (the
/// header loads were ~80 % of the framing loop's time, the data CRCs missed too). Asked ahead
/// along the block, those loads overlap. Tokens Loader (`perf`): framing and CRC 10.3-10.7 ->
/// 8.0-8.1 % of the CPU with 3 to 64 KiB ahead (2 KiB: 8.5 %, 1 KiB: 9.4 %); into L2 only
/// (`T1`), or every 2nd or 4th line, saved less. One thread framing 1 KiB records from 4 MiB
/// blocks (`bench_framing.py`), which the hardware prefetcher serves well, keeps its speed up
/// to 3 KiB ahead (3.98 against 4.00 GB/s) and lost ~8 % from 4 KiB on (3.68 at 4 KiB).
#[inline(always)]
fn prefetch_ahead(buf: &[u8], p: usize, fetched: usize) -> usize {
    let to = buf.len().min(p.saturating_add(PREFETCH_BYTES));
    let from = fetched.max(p).min(to);
    prefetch_all(&buf[from..to]);
    // The next call goes on from the line after the last one asked for.
    from + (to - from).next_multiple_of(64)
}

/// Reads and drops up to `n` bytes of `input`: how many came, and the error that stopped it
/// early, if any (else fewer than `n` means the stream ended).
fn drain(input: &mut Input, n: u64) -> (u64, Option<io::Error>) {
    let mut scratch = vec![0u8; 64 << 10];
    let mut got = 0u64;
    while got < n {
        let want = scratch
            .len()
            .min(usize::try_from(n - got).unwrap_or(usize::MAX));
        match input.read(&mut scratch[..want]) {
            Ok(0) => break,
            Ok(k) => got += k as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e)),
        }
    }
    (got, None)
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
