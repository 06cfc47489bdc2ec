//! Reading TFRecord files in [`Chunk`]s: one buffer holding the raw stream bytes read and the
//! `[start, end)` of each record's payload in it, so a chunk of thousands of records is one
//! allocation and no per-record copy. Bad records fail the read, or are skipped and counted.

use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use super::compress::{self, Compression, Source};
use super::crc::masked_crc32c;
use super::{FOOTER, HEADER};
use crate::error::{Error, Location, Result, Skip};

/// When the stream length is unknown (compressed files) a record is read in steps of this size,
/// so a corrupt length of petabytes costs at most one step of memory before the stream ends.
const GROW_STEP: usize = 64 << 20;
/// How many skipped records the stats describe (they count them all).
const MAX_KEPT_SKIPS: usize = 100;

/// Options of a [`RecordReader`].
#[derive(Debug, Clone, Copy)]
pub struct ReaderOptions {
    /// Check each record's data CRC (the length CRC is always checked: it guards allocation).
    pub verify: bool,
    /// Skip and count bad records instead of failing (`on_error="skip"`).
    pub skip_errors: bool,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            verify: true,
            skip_errors: false,
        }
    }
}

/// Records read in one go: a buffer and the payload range of each record in it.
#[derive(Debug, Default)]
pub struct Chunk {
    /// A block of raw stream bytes (headers and footers included), shared by the chunks framed
    /// from it; payloads are sub-slices.
    pub data: Arc<Vec<u8>>,
    /// `data[starts[i]..ends[i]]` is record i's payload.
    pub starts: Vec<usize>,
    /// See `starts`.
    pub ends: Vec<usize>,
    /// Stream offset of each record's header.
    pub file_offsets: Vec<u64>,
    /// Index in the file of each record (skipped records leave gaps).
    pub indices: Vec<u64>,
    /// Stream offset just past the chunk's last record: where a resumed reader starts.
    pub end_offset: u64,
    /// Index of the record that follows this chunk.
    pub next_index: u64,
}

impl Chunk {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.starts.len()
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
    /// Records skipped as corrupt (a broken header skips the rest of the file and counts 1).
    pub skipped_records: u64,
    /// Stream bytes skipped with them, as far as known.
    pub skipped_bytes: u64,
    /// The first records skipped (`MAX_KEPT_SKIPS`): where, and why.
    pub skips: Vec<Skip>,
}

/// Reads framed records from one (possibly compressed) stream.
pub struct RecordReader {
    src: Box<dyn Read + Send>,
    path: Option<String>,
    known_len: Option<u64>,
    compression: Compression,
    opts: ReaderOptions,
    /// The block of stream bytes being framed; chunks share it (no copy per chunk).
    block: Arc<Vec<u8>>,
    /// Stream offset of `block[0]`.
    block_offset: u64,
    /// Next unframed byte in `block`.
    pos: usize,
    next_index: u64,
    eof: bool,
    done: bool,
    /// A read error of the underlying stream, reported once framing reaches where it happened.
    stream_failure: Option<io::Error>,
    /// An error met after some records of a chunk were framed: those records are returned
    /// first and the error on the next call, so no good record before it is lost.
    pending: Option<Error>,
    stats: ReadStats,
}

impl RecordReader {
    /// Opens `path`; `compression = None` infers it. `start_offset`/`start_index` resume at a
    /// record boundary reported by an earlier chunk's `end_offset`/`next_index`.
    pub fn open(
        path: &Path,
        compression: Option<Compression>,
        opts: ReaderOptions,
        start_offset: u64,
        start_index: u64,
    ) -> Result<Self> {
        let display = path.display().to_string();
        let source = compress::open(path, compression, start_offset).map_err(|e| Error::Io {
            path: Some(display.clone()),
            source: e,
        })?;
        Self::from_source(source, display, opts, start_offset, start_index)
    }

    /// Reads an opened [`Source`] (see [`compress::open_stream`]) named `display`, resuming
    /// like [`RecordReader::open`].
    pub fn from_source(
        source: Source,
        display: String,
        opts: ReaderOptions,
        start_offset: u64,
        start_index: u64,
    ) -> Result<Self> {
        let Source {
            reader,
            known_len,
            compression,
        } = source;
        let mut r = Self::from_reader(reader, Some(display.clone()), known_len, compression, opts);
        r.next_index = start_index;
        if start_offset > 0 {
            r.skip_to(start_offset)?;
        }
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
        RecordReader {
            src,
            path,
            known_len,
            compression,
            opts,
            block: Arc::new(Vec::new()),
            block_offset: 0,
            pos: 0,
            next_index: 0,
            eof: false,
            done: false,
            stream_failure: None,
            pending: None,
            stats: ReadStats::default(),
        }
    }

    /// The compression in effect.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Counters so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// Moves to stream position `offset`: plain files were opened there already (a seek);
    /// a decompressed stream is read and discarded up to it.
    fn skip_to(&mut self, offset: u64) -> Result<()> {
        if let Some(len) = self.known_len {
            if offset > len {
                return Err(self.corrupt_at(
                    offset,
                    format!("resume offset {offset} is past the end of the file ({len} bytes)"),
                ));
            }
        }
        if self.compression == Compression::None {
            self.block_offset = offset;
            return Ok(());
        }
        let mut sink = io::sink();
        let copied = io::copy(&mut (&mut self.src).take(offset), &mut sink)
            .map_err(|e| self.stream_error(e, offset))?;
        if copied < offset {
            return Err(self.truncated_at(
                copied,
                format!("resume offset {offset} is past the end of the stream ({copied} bytes)"),
            ));
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

    /// Maps a read error: bad compressed data is corruption, not an OS error.
    fn stream_error(&self, e: io::Error, offset: u64) -> Error {
        let name = self.compression.name();
        match (self.compression, e.kind()) {
            (Compression::None, _) => Error::Io {
                path: self.path.clone(),
                source: e,
            },
            (_, io::ErrorKind::UnexpectedEof) => {
                self.truncated_at(offset, format!("{name} stream ends early: {e}"))
            }
            (_, io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput) => {
                self.corrupt_at(offset, format!("{name} stream is corrupt: {e}"))
            }
            _ => Error::Io {
                path: self.path.clone(),
                source: e,
            },
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

    /// Reads up to `max_records` records from the stream, reading it in blocks of about
    /// `block_bytes`. A chunk never spans two blocks, so it may hold fewer records. Returns
    /// `None` at the end of the stream. After an error (in raise mode) the records framed before
    /// it are returned first and the error on the next call, so no good record is lost.
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
        chunk.end_offset = self.block_offset + self.pos as u64;
        chunk.next_index = self.next_index;
        if self.done || self.eof {
            // Nothing more will be read: close the file now, not when the reader is dropped.
            self.src = Box::new(io::empty());
        }
        if let Err(err) = res {
            self.done = true;
            self.src = Box::new(io::empty());
            if chunk.is_empty() {
                return Err(err);
            }
            self.pending = Some(err);
        }
        if chunk.is_empty() && self.done {
            return Ok(None);
        }
        Ok(Some(chunk))
    }

    /// Frames records of the current block into `chunk`; starts a new block when the current
    /// one holds no whole record and the chunk is still empty.
    fn frame(&mut self, chunk: &mut Chunk, max_records: usize, block_bytes: usize) -> Result<()> {
        loop {
            let buf = Arc::clone(&self.block);
            let p = self.pos;
            let avail = buf.len() - p;
            let offset = self.block_offset + p as u64;
            let needed;
            if avail >= HEADER {
                let len = u64::from_le_bytes(buf[p..p + 8].try_into().expect("8 bytes"));
                let len_crc = u32::from_le_bytes(buf[p + 8..p + 12].try_into().expect("4 bytes"));
                let actual = masked_crc32c(&buf[p..p + 8]);
                if actual != len_crc {
                    // Without a trusted length the rest of the stream cannot be framed.
                    let err = self.corrupt_at(
                        offset,
                        format!("length CRC mismatch: stored {len_crc:#010x}, computed {actual:#010x} (length field reads {len})"),
                    );
                    let rest = self
                        .known_len
                        .map_or(avail as u64, |n| n.saturating_sub(offset));
                    self.pos = buf.len();
                    self.done = true;
                    return self.fail_or_skip(err, rest);
                }
                let total = (HEADER as u64 + FOOTER as u64).saturating_add(len);
                if let Some(n) = self.known_len {
                    let left = n.saturating_sub(offset);
                    if total > left {
                        let err = self.truncated_at(
                            offset,
                            format!("record of {len} bytes needs {total} bytes but the file has {left} left"),
                        );
                        self.pos = buf.len();
                        self.done = true;
                        return self.fail_or_skip(err, left);
                    }
                }
                if (avail as u64) >= total {
                    let total = total as usize;
                    let (start, end) = (p + HEADER, p + HEADER + len as usize);
                    let mut ok = true;
                    if self.opts.verify {
                        let stored =
                            u32::from_le_bytes(buf[end..end + 4].try_into().expect("4 bytes"));
                        let computed = masked_crc32c(&buf[start..end]);
                        if stored != computed {
                            let err = self.corrupt_at(
                                offset,
                                format!("data CRC mismatch: stored {stored:#010x}, computed {computed:#010x} over {len} bytes"),
                            );
                            self.fail_or_skip(err, total as u64)?;
                            ok = false;
                        }
                    }
                    if ok {
                        chunk.starts.push(start);
                        chunk.ends.push(end);
                        chunk.file_offsets.push(offset);
                        chunk.indices.push(self.next_index);
                        self.stats.records += 1;
                        self.stats.bytes += len;
                    }
                    self.next_index += 1;
                    self.pos = p + total;
                    if chunk.len() >= max_records {
                        return Ok(());
                    }
                    continue;
                }
                needed = (total - avail as u64) as usize;
            } else {
                needed = HEADER - avail;
            }
            // No whole record left in this block.
            if !chunk.is_empty() {
                return Ok(());
            }
            if self.eof {
                self.pos = buf.len();
                self.done = true;
                if let Some(e) = self.stream_failure.take() {
                    let err = self.stream_error(e, offset);
                    return self.fail_or_skip(err, avail as u64);
                }
                if avail > 0 {
                    let what = if avail < HEADER { "header" } else { "payload" };
                    let err = self.truncated_at(
                        offset,
                        format!("file ends inside a record {what}: {avail} bytes left, {needed} more expected"),
                    );
                    return self.fail_or_skip(err, avail as u64);
                }
                return Ok(());
            }
            // A length from a compressed stream cannot be checked against a file size: grow
            // towards it in steps, so a corrupt length costs at most one step of memory.
            let want = if self.known_len.is_some() {
                needed.max(block_bytes)
            } else {
                needed.min(GROW_STEP).max(block_bytes)
            };
            self.next_block(want)?;
        }
    }

    /// Starts a new block: the unframed tail of the current one (at most one partial record)
    /// followed by up to `want` more bytes of stream.
    fn next_block(&mut self, want: usize) -> Result<()> {
        let tail = &self.block[self.pos..];
        let mut buf = Vec::with_capacity(tail.len() + want);
        buf.extend_from_slice(tail);
        self.block_offset += self.pos as u64;
        self.pos = 0;
        self.fill(&mut buf, want)?;
        self.block = Arc::new(buf);
        Ok(())
    }

    /// Appends up to `want` bytes of stream to `buf`, setting `eof` when the stream ends. A
    /// decompression error ends the stream too; it is reported where framing stops.
    fn fill(&mut self, buf: &mut Vec<u8>, want: usize) -> Result<()> {
        let before = buf.len();
        // `read_to_end` reads into the spare capacity without zeroing it first.
        buf.reserve(want);
        let res = (&mut self.src).take(want as u64).read_to_end(buf);
        match res {
            Ok(_) if buf.len() - before < want => self.eof = true,
            Ok(_) => {}
            Err(e) if self.compression == Compression::None => {
                return Err(Error::Io {
                    path: self.path.clone(),
                    source: e,
                });
            }
            Err(e) => {
                // Bytes read before the error stay in `buf` and are framed first.
                self.stream_failure = Some(e);
                self.eof = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::records::writer::write_record;

    fn framed(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            write_record(&mut out, r).unwrap();
        }
        out
    }

    fn reader(bytes: Vec<u8>, opts: ReaderOptions) -> RecordReader {
        let len = bytes.len() as u64;
        RecordReader::from_reader(
            Box::new(io::Cursor::new(bytes)),
            Some("mem".into()),
            Some(len),
            Compression::None,
            opts,
        )
    }

    fn read_all(r: &mut RecordReader, max: usize, target: usize) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while let Some(c) = r.next_chunk(max, target)? {
            for i in 0..c.len() {
                out.push(c.record(i).to_vec());
            }
        }
        Ok(out)
    }

    #[test]
    fn round_trip_any_chunking() {
        let recs: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; i * 7]).collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let bytes = framed(&refs);
        for (max, target) in [(1, 1), (3, 10), (1000, 64), (1000, 1 << 20)] {
            let got = read_all(
                &mut reader(bytes.clone(), ReaderOptions::default()),
                max,
                target,
            )
            .unwrap();
            assert_eq!(got, recs, "max={max} target={target}");
        }
    }

    #[test]
    fn data_crc_mismatch_is_located() {
        let mut bytes = framed(&[b"abc", b"defg"]);
        let second = HEADER + 3 + FOOTER;
        bytes[second + HEADER] ^= 1;
        let err = read_all(
            &mut reader(bytes.clone(), ReaderOptions::default()),
            10,
            1 << 20,
        )
        .unwrap_err();
        match err {
            Error::Corrupt { loc, .. } => {
                assert_eq!(loc.record_index, Some(1));
                assert_eq!(loc.byte_offset, Some(second as u64));
            }
            other => panic!("{other:?}"),
        }
        let mut r = reader(
            bytes,
            ReaderOptions {
                verify: true,
                skip_errors: true,
            },
        );
        assert_eq!(
            read_all(&mut r, 10, 1 << 20).unwrap(),
            vec![b"abc".to_vec()]
        );
        assert_eq!(r.stats().skipped_records, 1);
        let skip = &r.stats().skips[0];
        assert_eq!(skip.kind, ErrorKind::Corrupt);
        assert_eq!(skip.loc.record_index, Some(1));
        assert_eq!(skip.loc.byte_offset, Some(second as u64));
        assert!(skip.reason.starts_with("data CRC mismatch"), "{skip}");
        assert_eq!(
            skip.to_string(),
            format!("mem, record 1, byte offset {second}: {}", skip.reason)
        );
    }

    #[test]
    fn absurd_length_fails_before_allocating() {
        let len = (u64::MAX / 2).to_le_bytes();
        let mut bytes = len.to_vec();
        bytes.extend(masked_crc32c(&len).to_le_bytes());
        bytes.extend([0u8; 20]);
        let err = read_all(&mut reader(bytes, ReaderOptions::default()), 10, 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    }

    #[test]
    fn truncated_tail() {
        let mut bytes = framed(&[b"abc", b"defg"]);
        bytes.truncate(bytes.len() - 2);
        let err = read_all(
            &mut reader(bytes.clone(), ReaderOptions::default()),
            10,
            1 << 20,
        )
        .unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
        let mut r = reader(
            bytes,
            ReaderOptions {
                verify: true,
                skip_errors: true,
            },
        );
        assert_eq!(read_all(&mut r, 10, 1 << 20).unwrap().len(), 1);
        assert_eq!(r.stats().skipped_records, 1);
    }

    #[test]
    fn resume_from_chunk_end() {
        let recs: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 10]).collect();
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let dir = std::env::temp_dir().join(format!("jaxrec-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.tfrecord");
        std::fs::write(&path, framed(&refs)).unwrap();
        let mut r = RecordReader::open(&path, None, ReaderOptions::default(), 0, 0).unwrap();
        let first = r.next_chunk(7, 1 << 20).unwrap().unwrap();
        let mut r2 = RecordReader::open(
            &path,
            None,
            ReaderOptions::default(),
            first.end_offset,
            first.next_index,
        )
        .unwrap();
        let rest = read_all(&mut r2, 100, 1 << 20).unwrap();
        assert_eq!(rest, recs[7..].to_vec());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
