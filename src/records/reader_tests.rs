//! Unit tests of the reader: framing, damage, limits, ranges, sync and skip.
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
            skip_errors: true,
            ..ReaderOptions::default()
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
fn data_crcs_checked_four_at_a_time_fail_at_the_first_bad_record() {
    // Records of many lengths, so groups of four (whose CRCs are computed together) start
    // everywhere; each bad record in turn, read in chunks of every size around a group's.
    let recs: Vec<Vec<u8>> = (0..23)
        .map(|i| vec![(i * 37) as u8; (i * 13) % 50])
        .collect();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let clean = framed(&refs);
    let at: Vec<usize> = (0..recs.len())
        .map(|i| refs[..i].iter().map(|r| HEADER + r.len() + FOOTER).sum())
        .collect();
    for bad in 0..recs.len() {
        let mut bytes = clean.clone();
        // The payload's first byte, or its CRC for an empty record.
        bytes[at[bad] + HEADER] ^= 0x40;
        for max in [1, 3, 4, 5, 8, 1000] {
            let err = read_all(
                &mut reader(bytes.clone(), ReaderOptions::default()),
                max,
                1 << 20,
            )
            .unwrap_err();
            match err {
                Error::Corrupt { loc, .. } => {
                    assert_eq!(loc.record_index, Some(bad as u64), "bad={bad} max={max}");
                    assert_eq!(loc.byte_offset, Some(at[bad] as u64), "bad={bad} max={max}");
                }
                other => panic!("bad={bad} max={max}: {other:?}"),
            }
            let skip = ReaderOptions {
                skip_errors: true,
                ..ReaderOptions::default()
            };
            let mut r = reader(bytes.clone(), skip);
            let mut want = recs.clone();
            want.remove(bad);
            assert_eq!(
                read_all(&mut r, max, 1 << 20).unwrap(),
                want,
                "bad={bad} max={max}"
            );
            assert_eq!(r.stats().skipped_records, 1);
            assert_eq!(r.stats().skips[0].loc.record_index, Some(bad as u64));
            // The records before the bad one come first, in chunks of at most `max`.
            let mut r = reader(bytes.clone(), ReaderOptions::default());
            let mut before = Vec::new();
            while let Ok(Some(c)) = r.next_chunk(max, 1 << 20) {
                assert!(c.len() <= max);
                before.extend((0..c.len()).map(|i| c.record(i).to_vec()));
            }
            assert_eq!(before, recs[..bad], "bad={bad} max={max}");
        }
    }
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
fn a_length_near_u64_max_is_an_error_not_an_overflow() {
    // The fit check adds the header and footer to the declared length: it must not wrap (a
    // panic in a build with overflow checks, a wrong answer without).
    for len in [u64::MAX, u64::MAX - 15, u64::MAX - 16] {
        let mut bytes = header(len);
        bytes.extend([0u8; 20]);
        let err = read_all(
            &mut reader(bytes.clone(), ReaderOptions::default()),
            10,
            1 << 20,
        );
        assert!(err.is_err(), "{len}: {err:?}");
        let mut r = plain(&bytes, ReaderOptions::default(), Range::default()).unwrap();
        assert!(drain(&mut r).is_err(), "{len}");
        let mut r = plain(&bytes, skipping(), Range::default()).unwrap();
        assert_eq!(drain(&mut r).unwrap().len(), 0, "{len}");
        assert_eq!(r.stats().skipped_bytes, bytes.len() as u64, "{len}");
    }
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
            skip_errors: true,
            ..ReaderOptions::default()
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
    let mut r =
        RecordReader::open(&path, None, ReaderOptions::default(), Range::default()).unwrap();
    let first = r.next_chunk(7, 1 << 20).unwrap().unwrap();
    let mut r2 = RecordReader::open(
        &path,
        None,
        ReaderOptions::default(),
        Range {
            start_offset: first.end_offset,
            start_index: first.next_index,
            ..Range::default()
        },
    )
    .unwrap();
    let rest = read_all(&mut r2, 100, 1 << 20).unwrap();
    assert_eq!(rest, recs[7..].to_vec());
    std::fs::remove_dir_all(dir).unwrap();
}

// --- helpers for the tests below ----------------------------------------------------------

fn skipping() -> ReaderOptions {
    ReaderOptions {
        skip_errors: true,
        ..ReaderOptions::default()
    }
}

/// A plain, seekable in-memory file read over `range`.
fn plain(bytes: &[u8], opts: ReaderOptions, range: Range) -> Result<RecordReader> {
    let source = Source {
        input: Input::Plain(Box::new(io::Cursor::new(bytes.to_vec()))),
        known_len: Some(bytes.len() as u64),
        compression: Compression::None,
    };
    RecordReader::from_source(source, "mem".into(), opts, range)
}

/// A stream that cannot seek, of unknown length (like a decompressed file).
fn stream(src: impl Read + Send + 'static, opts: ReaderOptions) -> RecordReader {
    RecordReader::from_reader(
        Box::new(src),
        Some("mem".into()),
        None,
        Compression::Gzip,
        opts,
    )
}

/// Every record left, with its index and offset.
fn drain(r: &mut RecordReader) -> Result<Vec<(u64, u64, Vec<u8>)>> {
    let mut out = Vec::new();
    while let Some(c) = r.next_chunk(3, 64)? {
        for i in 0..c.len() {
            out.push((c.indices[i], c.file_offsets[i], c.record(i).to_vec()));
        }
    }
    Ok(out)
}

fn offsets(records: &[Vec<u8>]) -> Vec<u64> {
    let mut at = 0u64;
    records
        .iter()
        .map(|r| {
            let o = at;
            at += (HEADER + r.len() + FOOTER) as u64;
            o
        })
        .collect()
}

/// A header declaring `len` bytes, with its valid length CRC.
fn header(len: u64) -> Vec<u8> {
    let mut h = len.to_le_bytes().to_vec();
    h.extend(masked_crc32c(&len.to_le_bytes()).to_le_bytes());
    h
}

/// Zeros, `n` of them, counting how many were handed out.
struct Zeros {
    left: u64,
    served: Arc<std::sync::atomic::AtomicU64>,
}

impl Read for Zeros {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        buf[..n].fill(0);
        self.left -= n as u64;
        self.served
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

// --- limits ---------------------------------------------------------------------------------

#[test]
fn zero_length_crc_constant() {
    assert_eq!(masked_crc32c(&[0u8; 8]), ZERO_LEN_CRC);
}

#[test]
fn a_record_over_max_record_bytes_is_corrupt_in_a_plain_file() {
    let bytes = framed(&[b"ok", &[7u8; 100], b"after"]);
    let opts = ReaderOptions {
        max_record_bytes: 99,
        ..ReaderOptions::default()
    };
    let mut r = plain(&bytes, opts, Range::default()).unwrap();
    let first = r.next_chunk(10, 1 << 20).unwrap().unwrap();
    assert_eq!(first.len(), 1);
    match r.next_chunk(10, 1 << 20).unwrap_err() {
        Error::Corrupt { loc, detail } => {
            assert_eq!(loc.record_index, Some(1));
            assert_eq!(loc.byte_offset, Some(18));
            assert!(
                detail.contains("more than max_record_bytes (99)"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Skipping ends the file there (its framing is not trusted), counting the rest.
    let mut r = plain(
        &bytes,
        ReaderOptions {
            skip_errors: true,
            ..opts
        },
        Range::default(),
    )
    .unwrap();
    assert_eq!(drain(&mut r).unwrap().len(), 1);
    let s = r.stats();
    assert_eq!(
        (s.skipped_records, s.skipped_bytes),
        (1, bytes.len() as u64 - 18)
    );
    assert_eq!(s.skips[0].kind, ErrorKind::Corrupt);
    assert_eq!(r.next_offset(), None);
}

#[test]
fn a_giant_declared_record_in_a_stream_reads_at_most_the_limit() {
    // 2^40 bytes declared, then 64 MiB of zeros: refused after reading about the limit.
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let zeros = Zeros {
        left: 64 << 20,
        served: Arc::clone(&served),
    };
    let src = io::Cursor::new(header(1 << 40)).chain(zeros);
    let opts = ReaderOptions {
        max_record_bytes: 1 << 20,
        ..ReaderOptions::default()
    };
    let err = stream(src, opts).next_chunk(10, 4096).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.detail().contains("max_record_bytes"), "{err}");
    let read = served.load(std::sync::atomic::Ordering::Relaxed);
    assert!(read <= (1 << 20) + 8192, "read {read} bytes");
    // A stream that ends before the limit: the record is cut short, not too large.
    let zeros = Zeros {
        left: 1000,
        served: Arc::new(Default::default()),
    };
    let src = io::Cursor::new(header(1 << 40)).chain(zeros);
    let err = stream(src, opts).next_chunk(10, 4096).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
}

#[test]
fn a_long_record_in_a_stream_grows_its_buffer_geometrically() {
    // 24 MiB record, read 4 KiB at a time: doubling takes ~13 growths, not 6000 steps.
    let payload = vec![3u8; 24 << 20];
    let bytes = framed(&[&payload, b"tail"]);
    let mut r = stream(io::Cursor::new(bytes), ReaderOptions::default());
    let c = r.next_chunk(10, 4096).unwrap().unwrap();
    assert_eq!(c.record(0).len(), payload.len());
    // The block is one copy of the record (plus at most the last doubling step).
    assert!(
        c.data.capacity() <= 2 * payload.len() + 8192,
        "{}",
        c.data.capacity()
    );
    let rest = drain(&mut r).unwrap();
    assert_eq!(rest[0].2, b"tail");
}

// --- ranges ---------------------------------------------------------------------------------

fn sample() -> Vec<Vec<u8>> {
    (0..12u8).map(|i| vec![i; (i as usize * 37) % 90]).collect()
}

#[test]
fn end_offset_bounds_record_starts() {
    let recs = sample();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let bytes = framed(&refs);
    let offs = offsets(&recs);
    for (k, &o) in offs.iter().enumerate() {
        for end in [o, o + 1] {
            let range = Range {
                end_offset: Some(end),
                ..Range::default()
            };
            let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
            let got = drain(&mut r).unwrap();
            // A record starting exactly at end is not read; one starting before is (whole).
            let n = if end == o { k } else { k + 1 };
            assert_eq!(got.len(), n, "end={end}");
            let next = offs.get(n).copied().unwrap_or(bytes.len() as u64);
            assert_eq!(r.next_offset(), Some(next));
            assert_eq!(r.next_index(), n as u64);
        }
    }
}

#[test]
fn sync_from_every_byte_finds_the_next_true_record() {
    let recs = sample();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let bytes = framed(&refs);
    let offs = offsets(&recs);
    for start in 0..=bytes.len() as u64 {
        let first = offs.iter().position(|&o| o >= start);
        let range = Range {
            start_offset: start,
            start_index: 100,
            sync: true,
            ..Range::default()
        };
        let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
        match first {
            Some(k) => {
                assert_eq!(r.next_offset(), Some(offs[k]), "start={start}");
                let got = drain(&mut r).unwrap();
                assert_eq!(got.len(), recs.len() - k);
                assert_eq!(got[0], (100, offs[k], recs[k].clone()));
            }
            None => {
                assert_eq!(r.next_offset(), None);
                assert!(drain(&mut r).unwrap().is_empty());
            }
        }
    }
}

#[test]
fn synced_ranges_cover_every_record_once() {
    let recs = sample();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let bytes = framed(&refs);
    let offs = offsets(&recs);
    for step in [1usize, 7, 50, 97, 400, 5000] {
        let mut seen = Vec::new();
        let mut start = 0;
        while start < bytes.len() {
            let end = (start + step) as u64;
            let range = Range {
                start_offset: start as u64,
                end_offset: Some(end),
                sync: true,
                ..Range::default()
            };
            let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
            let got = drain(&mut r).unwrap();
            if let Some(next) = r.next_offset() {
                // The chain lands on the first record at or after the end.
                let want = offs.iter().copied().find(|&o| o >= end);
                assert_eq!(Some(next), want.or(Some(bytes.len() as u64)));
            }
            seen.extend(got.into_iter().map(|(_, o, _)| o));
            start += step;
        }
        assert_eq!(seen, offs, "step={step}");
    }
}

#[test]
fn a_nested_tfrecord_file_does_not_fool_a_sync_that_starts_before_it() {
    // Record 1 is itself a TFRecord file of 3 records: valid frames inside a payload.
    let inner_recs: Vec<Vec<u8>> = vec![b"in-a".to_vec(), vec![9; 40], b"in-c".to_vec()];
    let inner_refs: Vec<&[u8]> = inner_recs.iter().map(|r| r.as_slice()).collect();
    let inner = framed(&inner_refs);
    let outer = framed(&[b"first", &inner, b"last"]);
    let outer_offs = [0u64, 21, (21 + HEADER + inner.len() + FOOTER) as u64];
    // From any byte up to the outer header of record 1, sync finds that header.
    for start in 1..=outer_offs[1] {
        let range = Range {
            start_offset: start,
            sync: true,
            ..Range::default()
        };
        let mut r = plain(&outer, ReaderOptions::default(), range).unwrap();
        let got = drain(&mut r).unwrap();
        assert_eq!(got[0].1, outer_offs[1], "start={start}");
        assert_eq!(got[0].2, inner);
        assert_eq!(got.len(), 2);
    }
    // Starting inside the payload, before an embedded frame, sync lands on that frame (it is
    // indistinguishable from a true record); the chain then breaks where the embedded file
    // ends: a length CRC mismatch over the outer footer and next header.
    let range = Range {
        start_offset: outer_offs[1] + HEADER as u64,
        sync: true,
        ..Range::default()
    };
    let mut r = plain(&outer, ReaderOptions::default(), range).unwrap();
    assert_eq!(r.next_offset(), Some(outer_offs[1] + HEADER as u64));
    let mut got = Vec::new();
    let err = loop {
        match r.next_chunk(100, 1 << 20) {
            Ok(Some(c)) => got.extend((0..c.len()).map(|i| c.record(i).to_vec())),
            Ok(None) => panic!("the broken chain went unnoticed"),
            Err(e) => break e,
        }
    };
    assert_eq!(got, inner_recs);
    assert!(err.detail().starts_with("length CRC mismatch"), "{err}");
}

#[test]
fn sync_ignores_a_header_whose_record_is_not_there() {
    // A valid-looking header (length CRC right) whose payload CRC is wrong, then a true record.
    let mut bytes = header(5);
    bytes.extend(b"xxxxx\0\0\0\0");
    let true_at = bytes.len() as u64;
    bytes.extend(framed(&[b"real"]));
    // And one declaring more than the file holds.
    let mut tail = header(1 << 20);
    tail.extend([1u8; 4]);
    bytes.extend(&tail);
    let range = Range {
        sync: true,
        ..Range::default()
    };
    let mut r = plain(&bytes, skipping(), range).unwrap();
    assert_eq!(r.next_offset(), Some(true_at));
    let got = drain(&mut r).unwrap();
    assert_eq!(got[0].2, b"real");
}

#[test]
fn sync_crosses_a_large_record_and_respects_the_end() {
    let big = vec![0u8; 5 << 20]; // zeros: every position's length field reads 0
    let bytes = framed(&[b"a", &big, b"b"]);
    let b_at = (HEADER + 1 + FOOTER + HEADER + big.len() + FOOTER) as u64;
    let range = Range {
        start_offset: 30,
        sync: true,
        ..Range::default()
    };
    let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
    assert_eq!(r.next_offset(), Some(b_at));
    assert_eq!(drain(&mut r).unwrap()[0].2, b"b");
    // A range inside the big record holds no record start: the reader is empty.
    let range = Range {
        start_offset: 30,
        end_offset: Some(b_at),
        sync: true,
        ..Range::default()
    };
    let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
    assert_eq!(r.next_offset(), None);
    assert!(r.next_chunk(10, 1 << 20).unwrap().is_none());
    assert_eq!(r.skip(5).unwrap(), 0);
}

#[test]
fn sync_is_refused_on_compressed_streams() {
    let range = Range {
        sync: true,
        ..Range::default()
    };
    let source = Source {
        input: Input::empty(),
        known_len: None,
        compression: Compression::Gzip,
    };
    let err = RecordReader::from_source(source, "x.gz".into(), ReaderOptions::default(), range)
        .err()
        .unwrap();
    assert!(err.to_string().contains("uncompressed"), "{err}");
}

// --- skip -----------------------------------------------------------------------------------

#[test]
fn skip_passes_records_in_plain_files_and_streams() {
    let mut recs = sample();
    recs.insert(4, vec![5u8; 3 << 20]); // larger than a scan block: seeked past / dropped
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let bytes = framed(&refs);
    let offs = offsets(&recs);
    for n in [0usize, 1, 4, 5, 9, recs.len(), recs.len() + 3] {
        let readers: Vec<RecordReader> = vec![
            plain(&bytes, ReaderOptions::default(), Range::default()).unwrap(),
            stream(io::Cursor::new(bytes.clone()), ReaderOptions::default()),
        ];
        for mut r in readers {
            let passed = r.skip(n as u64).unwrap();
            assert_eq!(passed, n.min(recs.len()) as u64);
            let k = passed as usize;
            assert_eq!(r.next_index(), passed);
            assert_eq!(
                r.next_offset(),
                Some(offs.get(k).copied().unwrap_or(bytes.len() as u64))
            );
            let rest = drain(&mut r).unwrap();
            assert_eq!(rest.len(), recs.len() - k);
            if let Some(first) = rest.first() {
                assert_eq!(*first, (k as u64, offs[k], recs[k].clone()));
            }
        }
    }
}

#[test]
fn skip_stops_at_the_end_offset_and_does_not_check_data_crcs() {
    let recs = sample();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let mut bytes = framed(&refs);
    let offs = offsets(&recs);
    bytes[offs[2] as usize + HEADER] ^= 1; // record 2's payload: data CRC now wrong
    let range = Range {
        end_offset: Some(offs[6]),
        ..Range::default()
    };
    let mut r = plain(&bytes, ReaderOptions::default(), range).unwrap();
    assert_eq!(r.skip(4).unwrap(), 4);
    assert_eq!(r.stats().skipped_records, 0);
    assert_eq!(r.skip(100).unwrap(), 2);
    assert_eq!(r.next_offset(), Some(offs[6]));
    assert!(r.next_chunk(10, 1 << 20).unwrap().is_none());
}

#[test]
fn skip_fails_on_a_broken_header_after_passing_what_it_could() {
    let recs = sample();
    let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
    let mut bytes = framed(&refs);
    let offs = offsets(&recs);
    bytes[offs[3] as usize] ^= 1; // record 3's length field
    let mut r = plain(&bytes, ReaderOptions::default(), Range::default()).unwrap();
    assert_eq!(r.skip(10).unwrap(), 3);
    let err = r.skip(1).unwrap_err();
    assert!(err.detail().starts_with("length CRC mismatch"), "{err}");
    let mut r = plain(&bytes, skipping(), Range::default()).unwrap();
    assert_eq!(r.skip(10).unwrap(), 3);
    assert_eq!(r.stats().skipped_records, 1);
}

// --- stricter than TensorFlow, and what skipping reads ---------------------------------------

#[test]
fn stray_bytes_after_the_last_record_are_truncation_or_a_counted_skip() {
    let mut bytes = framed(&[b"a", b"b"]);
    bytes.extend([1u8, 2, 3]);
    let err =
        drain(&mut plain(&bytes, ReaderOptions::default(), Range::default()).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    assert!(err.detail().contains("inside a record header"), "{err}");
    let mut r = plain(&bytes, skipping(), Range::default()).unwrap();
    assert_eq!(drain(&mut r).unwrap().len(), 2);
    assert_eq!((r.stats().skipped_records, r.stats().skipped_bytes), (1, 3));
}

#[test]
fn a_broken_compressed_stream_is_named_as_the_cause() {
    // A decoder that fails after some good records and a few garbage bytes.
    struct Failing(io::Cursor<Vec<u8>>);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "corrupt deflate stream",
                )),
                n => Ok(n),
            }
        }
    }
    let mut bytes = framed(&[b"good", b"also good"]);
    let cut = bytes.len();
    bytes.extend(framed(&[b"damaged"]));
    bytes[cut + HEADER] ^= 0xff;
    for opts in [ReaderOptions::default(), skipping()] {
        let mut r = stream(Failing(io::Cursor::new(bytes.clone())), opts);
        let first = r.next_chunk(10, 1 << 20).unwrap().unwrap();
        assert_eq!(first.len(), 2);
        if opts.skip_errors {
            assert!(r.next_chunk(10, 1 << 20).unwrap().is_none());
            let skip = &r.stats().skips[0];
            assert!(skip.reason.starts_with("GZIP stream is corrupt"), "{skip}");
        } else {
            let err = r.next_chunk(10, 1 << 20).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }));
            assert!(err.detail().starts_with("GZIP stream is corrupt"), "{err}");
            assert!(err.detail().contains("data CRC mismatch"), "{err}");
        }
    }
}

// --- files that are not regular files --------------------------------------------------------

#[cfg(unix)]
#[test]
fn special_files_are_refused_without_blocking() {
    let dir = std::env::temp_dir().join(format!("jaxrec-special-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("f.tfrecord");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only reads it.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, what, errno) in [
        (&fifo, "a FIFO", libc::EINVAL),
        (&dir, "a directory", libc::EISDIR),
    ] {
        let err = RecordReader::open(path, None, ReaderOptions::default(), Range::default())
            .err()
            .unwrap();
        let Error::Io { source, .. } = &err else {
            panic!("{err:?}")
        };
        let refused = source
            .get_ref()
            .and_then(|e| e.downcast_ref::<compress::NotRegularFile>())
            .unwrap();
        assert_eq!(refused.errno(), errno);
        let kind = if errno == libc::EISDIR {
            std::io::ErrorKind::IsADirectory
        } else {
            std::io::ErrorKind::InvalidInput
        };
        assert_eq!(source.kind(), kind);
        assert!(err.to_string().contains(what), "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_fast_header_scan_agrees_with_the_naive_one() {
    // Random bytes, runs of zeros, and true headers sprinkled in, scanned from every start.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..40 {
        let n = 64 + (rand() % 700) as usize;
        let mut buf: Vec<u8> = (0..n).map(|_| rand() as u8).collect();
        for _ in 0..(rand() % 4) {
            let at = (rand() as usize) % n;
            let run = (rand() % 40) as usize;
            for b in buf.iter_mut().skip(at).take(run) {
                *b = 0;
            }
        }
        for _ in 0..(rand() % 4) {
            let at = (rand() as usize) % n.saturating_sub(12).max(1);
            let len = rand() % 64 * (round % 2);
            let h = header(len);
            let end = (at + 12).min(n);
            buf[at..end].copy_from_slice(&h[..end - at]);
        }
        let to = n - (HEADER - 1);
        let file_len = n as u64 + rand() % 64;
        for from in 0..to {
            let naive = (from..to).find(|&p| plausible(&buf, p, 5, file_len, 100));
            assert_eq!(
                find_header(&buf, from, to, 5, file_len, 100),
                naive,
                "round {round}"
            );
        }
    }
}

// --- the reader's errors, in detail ----------------------------------------------------------

/// A decompressor that hands out `good` and then fails with `kind` (after `garbage` zeros).
struct FailsAfter {
    good: io::Cursor<Vec<u8>>,
    garbage: u64,
    kind: io::ErrorKind,
}

impl Read for FailsAfter {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.good.read(buf)? {
            0 if self.garbage > 0 => {
                let n = (buf.len() as u64).min(self.garbage) as usize;
                buf[..n].fill(0);
                self.garbage -= n as u64;
                Ok(n)
            }
            0 => Err(io::Error::new(self.kind, "decoder says no")),
            n => Ok(n),
        }
    }
}

fn fails_after(good: Vec<u8>, garbage: u64, kind: io::ErrorKind) -> FailsAfter {
    FailsAfter {
        good: io::Cursor::new(good),
        garbage,
        kind,
    }
}

#[test]
fn a_crc_failure_probes_the_stream_for_its_cause_beyond_the_block() {
    // The decoder fails 5000 bytes after the damaged record, past the 64-byte block the reader
    // holds: only the probe finds it, and names it.
    let mut bytes = framed(&[b"good"]);
    let cut = bytes.len();
    bytes.extend(framed(&[b"damaged"]));
    bytes[cut + HEADER] ^= 0xff;
    let end = bytes.len() as u64;
    for (kind, what) in [
        (io::ErrorKind::InvalidData, "the decompressor failed at"),
        (
            io::ErrorKind::UnexpectedEof,
            "ended without its end-of-stream marker",
        ),
    ] {
        let mut r = stream(
            fails_after(bytes.clone(), 5000, kind),
            ReaderOptions::default(),
        );
        assert_eq!(r.next_chunk(1, 64).unwrap().unwrap().len(), 1);
        let err = r.next_chunk(1, 64).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        assert!(err.detail().contains(what), "{err}");
        assert!(
            err.detail()
                .contains(&format!("decompressed byte {}", end + 5000)),
            "{err}"
        );
    }
    // Another kind of failure is the OS's, reported as it is.
    let mut r = stream(
        fails_after(bytes, 10, io::ErrorKind::PermissionDenied),
        ReaderOptions::default(),
    );
    r.next_chunk(1, 64).unwrap();
    let err = r.next_chunk(1, 64).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
}

#[test]
fn a_resume_offset_past_the_data_is_an_error_of_its_kind() {
    let bytes = framed(&[b"abc", b"defg"]);
    let n = bytes.len() as u64;
    let past = |start_offset| Range {
        start_offset,
        ..Range::default()
    };
    let err = plain(&bytes, ReaderOptions::default(), past(n + 1))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.detail().contains("past the end of the file"), "{err}");
    // At the very end: nothing left, no error.
    let mut at_end = plain(&bytes, ReaderOptions::default(), past(n)).unwrap();
    assert!(drain(&mut at_end).unwrap().is_empty());
    // A stream read up to the offset: short is truncation; a failing decoder is its cause.
    let short = RecordReader::from_reader(
        Box::new(io::Cursor::new(bytes.clone())),
        None,
        None,
        Compression::Gzip,
        ReaderOptions::default(),
    );
    let mut short = short;
    let err = short.enter(past(n + 5)).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    assert!(err.detail().contains("past the end of the stream"), "{err}");
    for (kind, want) in [
        (io::ErrorKind::UnexpectedEof, "ends early"),
        (io::ErrorKind::InvalidData, "stream is corrupt"),
        (io::ErrorKind::InvalidInput, "stream is corrupt"),
    ] {
        let mut r = stream(
            fails_after(bytes.clone(), 0, kind),
            ReaderOptions::default(),
        );
        let err = r.enter(past(n + 5)).unwrap_err();
        assert!(err.detail().contains(want), "{kind:?}: {err}");
    }
    let mut r = stream(
        fails_after(bytes, 0, io::ErrorKind::PermissionDenied),
        ReaderOptions::default(),
    );
    assert!(matches!(
        r.enter(past(n + 5)).unwrap_err(),
        Error::Io { .. }
    ));
}

#[test]
fn a_broken_header_skips_the_rest_of_the_file_counted() {
    // A length CRC that does not match: the rest of the file cannot be framed.
    let mut bytes = framed(&[b"one", b"two", b"three"]);
    let second = HEADER + 3 + FOOTER;
    bytes[second + 8] ^= 1;
    let mut r = plain(&bytes, skipping(), Range::default()).unwrap();
    assert_eq!(drain(&mut r).unwrap().len(), 1);
    let left = (bytes.len() - second) as u64;
    assert_eq!(
        (r.stats().skipped_records, r.stats().skipped_bytes),
        (1, left)
    );
    // A length longer than what is left: truncation, the bytes left counted.
    let mut cut = framed(&[b"one"]);
    cut.extend(header(500));
    cut.extend([1u8; 40]);
    let mut r = plain(&cut, skipping(), Range::default()).unwrap();
    assert_eq!(drain(&mut r).unwrap().len(), 1);
    assert_eq!(r.stats().skipped_bytes, 52);
    let err =
        drain(&mut plain(&cut, ReaderOptions::default(), Range::default()).unwrap()).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    assert!(
        err.detail()
            .contains("record of 500 bytes needs 516 bytes but the file has 52 left"),
        "{err}"
    );
}

#[test]
fn a_long_record_in_a_stream_is_too_large_or_cut_short_with_its_bytes_counted() {
    let opts = ReaderOptions {
        max_record_bytes: 100,
        skip_errors: true,
        ..ReaderOptions::default()
    };
    // Declares 1000, 50 bytes follow: the stream ends before the limit: cut short.
    let mut bytes = header(1000);
    bytes.extend([7u8; 50]);
    let mut r = stream(io::Cursor::new(bytes), opts);
    assert!(drain(&mut r).unwrap().is_empty());
    let s = r.stats();
    assert_eq!((s.skipped_records, s.skipped_bytes), (1, 62));
    assert_eq!(s.skips[0].kind, ErrorKind::Truncated);
    // Declares 150, all of it there: over the limit, though whole.
    let bytes = framed(&[&[1u8; 150]]);
    let mut r = stream(io::Cursor::new(bytes.clone()), opts);
    assert!(drain(&mut r).unwrap().is_empty());
    assert_eq!(r.stats().skips[0].kind, ErrorKind::Corrupt);
    // Read only far enough to know it is over the limit (header + limit + 1), not all of it.
    assert_eq!(r.stats().skipped_bytes, (HEADER + 101) as u64);
}

#[test]
fn skips_are_counted_all_and_described_up_to_a_hundred() {
    let recs: Vec<Vec<u8>> = (0..150).map(|i| vec![i as u8; 5]).collect();
    let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
    let mut bytes = framed(&refs);
    let each = HEADER + 5 + FOOTER;
    for i in 0..150 {
        bytes[i * each + HEADER] ^= 0xff; // every data CRC fails
    }
    let mut r = plain(&bytes, skipping(), Range::default()).unwrap();
    assert!(drain(&mut r).unwrap().is_empty());
    assert_eq!(r.stats().skipped_records, 150);
    assert_eq!(r.stats().skips.len(), MAX_KEPT_SKIPS);
}

#[test]
fn limits_of_memory_and_record_size() {
    let mut b = Block::default();
    let err = b.reserve(usize::MAX).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
    assert!(b.reserve(16).is_ok() && b.capacity() >= 16);
    let opts = ReaderOptions {
        max_record_bytes: u64::MAX,
        ..ReaderOptions::default()
    };
    let r = reader(Vec::new(), opts);
    assert_eq!(
        r.opts.max_record_bytes,
        (isize::MAX as u64) / 2 - (HEADER + FOOTER) as u64
    );
    let failure = StreamFailure {
        error: io::Error::other("x"),
        at: 7,
        compressed: Some(3),
    };
    assert_eq!(failure.describe(), "compressed byte 3, decompressed byte 7");
}

#[test]
fn skip_jumps_over_records_larger_than_a_block() {
    // Records of 1.5 MiB, larger than the scan block: passed by a seek in a plain file, by
    // reading them through in a stream.
    let big: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 3 << 19]).collect();
    let refs: Vec<&[u8]> = big.iter().map(Vec::as_slice).collect();
    let bytes = framed(&refs);
    let each = (HEADER + (3 << 19) + FOOTER) as u64;
    let mut p = plain(&bytes, ReaderOptions::default(), Range::default()).unwrap();
    let mut s = stream(io::Cursor::new(bytes.clone()), ReaderOptions::default());
    for r in [&mut p, &mut s] {
        assert_eq!(r.skip(2).unwrap(), 2);
        let c = r.next_chunk(10, 4096).unwrap().unwrap();
        assert_eq!((c.indices[0], c.file_offsets[0]), (2, 2 * each));
        assert_eq!(c.record(0), big[2].as_slice());
        assert!(r.next_chunk(10, 4096).unwrap().is_none());
    }
    // A stream that ends inside such a record while it is passed: past the end of the
    // stream's first block, the rest of the record is drained and found missing.
    let cut = bytes[..(1 << 20) + 100_000].to_vec();
    let err = stream(io::Cursor::new(cut.clone()), ReaderOptions::default())
        .skip(3)
        .unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    assert!(
        err.detail().contains("stream ends inside a record of"),
        "{err}"
    );
    let mut r = stream(io::Cursor::new(cut.clone()), skipping());
    assert_eq!(r.skip(3).unwrap(), 0);
    assert_eq!(
        (r.stats().skipped_records, r.stats().skipped_bytes),
        (1, cut.len() as u64)
    );
    // Or a decoder that fails there: its failure is the error.
    let broken = fails_after(cut, 0, io::ErrorKind::InvalidData);
    let err = stream(broken, ReaderOptions::default())
        .skip(3)
        .unwrap_err();
    assert!(err.detail().contains("stream is corrupt"), "{err}");
}

/// Blocks of 2 MiB less 64 KiB (the Loader's), mapped for themselves on Linux: records cut by
/// every block's end, and one longer than a block, read whole and in order, CRCs checked.
#[test]
fn records_across_loader_sized_blocks() {
    let records: Vec<Vec<u8>> = (0..9_000usize)
        .map(|i| {
            let len = if i == 4_321 {
                3 << 20
            } else {
                300 + i * 7 % 900
            };
            (0..len).map(|j| (i * 13 + j) as u8).collect()
        })
        .collect();
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let bytes = framed(&refs);
    let mut r = plain(&bytes, ReaderOptions::default(), Range::default()).unwrap();
    let mut got = Vec::new();
    while let Some(c) = r.next_chunk(usize::MAX, (2 << 20) - (64 << 10)).unwrap() {
        got.extend((0..c.len()).map(|i| c.record(i).to_vec()));
    }
    assert_eq!(got.len(), records.len());
    assert!(got == records);
}
