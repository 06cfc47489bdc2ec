//! Writing TFRecord files: each record framed as described in [`super`], into a plain, GZIP
//! or ZLIB stream.

use std::io::{self, Write};
use std::path::Path;

use super::compress::{Compression, Sink};
use super::crc::{masked_crc32c, masked_crc32c_length};
use super::HEADER;
use crate::error::{Error, Result};

/// Writes framed records to a (possibly compressed) file.
pub struct RecordWriter {
    sink: Option<Sink>,
    path: String,
    records: u64,
}

impl RecordWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path, compression: Compression, level: Option<u32>) -> Result<Self> {
        let display = path.display().to_string();
        let sink = Sink::create(path, compression, level).map_err(|e| Error::Io {
            path: Some(display.clone()),
            source: e,
        })?;
        Ok(RecordWriter {
            sink: Some(sink),
            path: display,
            records: 0,
        })
    }

    fn io(&self, e: io::Error) -> Error {
        Error::Io {
            path: Some(self.path.clone()),
            source: e,
        }
    }

    /// Appends one record.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let sink = self.sink.as_mut().ok_or_else(|| Error::Io {
            path: Some(self.path.clone()),
            source: io::Error::other("write to a closed TFRecordWriter"),
        })?;
        let res = write_record(sink, data);
        res.map_err(|e| self.io(e))?;
        self.records += 1;
        Ok(())
    }

    /// Number of records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes buffered bytes to the OS (a compressed stream stays open).
    pub fn flush(&mut self) -> Result<()> {
        match self.sink.as_mut() {
            Some(s) => s.flush().map_err(|e| Error::Io {
                path: Some(self.path.clone()),
                source: e,
            }),
            None => Ok(()),
        }
    }

    /// Finishes the stream (compression trailer) and closes the file. Idempotent.
    pub fn close(&mut self) -> Result<()> {
        match self.sink.take() {
            Some(s) => s.finish().map_err(|e| self.io(e)),
            None => Ok(()),
        }
    }
}

impl Drop for RecordWriter {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Frames `data` into `out`: header, payload, footer.
pub fn write_record(out: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(&len);
    header[8..].copy_from_slice(&masked_crc32c_length(len).to_le_bytes());
    out.write_all(&header)?;
    out.write_all(data)?;
    out.write_all(&masked_crc32c(data).to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::reader::{Range, ReaderOptions, RecordReader};

    fn read_back(path: &Path) -> Vec<Vec<u8>> {
        let mut r =
            RecordReader::open(path, None, ReaderOptions::default(), Range::default()).unwrap();
        let mut out = Vec::new();
        while let Some(c) = r.next_chunk(100, 1 << 20).unwrap() {
            out.extend((0..c.len()).map(|i| c.record(i).to_vec()));
        }
        out
    }

    #[test]
    fn writes_records_that_read_back_in_every_compression() {
        let dir = std::env::temp_dir().join(format!("jaxrec-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let records: Vec<Vec<u8>> = vec![b"a".to_vec(), vec![], vec![7; 70_000]];
        for (name, compression) in [
            ("plain.tfrecord", Compression::None),
            ("z.tfrecord.gz", Compression::Gzip),
            ("z.tfrecord.zlib", Compression::Zlib),
        ] {
            let path = dir.join(name);
            let mut w = RecordWriter::create(&path, compression, Some(1)).unwrap();
            for (i, r) in records.iter().enumerate() {
                assert_eq!(w.records(), i as u64);
                w.write(r).unwrap();
            }
            assert_eq!(w.records(), 3);
            w.flush().unwrap();
            if compression == Compression::None {
                // Flushed: a reader sees every record before the writer closes.
                assert_eq!(read_back(&path), records, "{name}");
            }
            w.close().unwrap();
            w.close().unwrap(); // idempotent
            assert_eq!(read_back(&path), records, "{name}");
            let err = w.write(b"late").unwrap_err();
            assert!(err.to_string().contains("closed"), "{err}");
            assert!(w.flush().is_ok());
        }
        // Dropped without close: the stream is still finished.
        let path = dir.join("dropped.tfrecord.gz");
        {
            let mut w = RecordWriter::create(&path, Compression::Gzip, None).unwrap();
            w.write(b"kept").unwrap();
        }
        assert_eq!(read_back(&path), vec![b"kept".to_vec()]);
        assert!(RecordWriter::create(&dir.join("no/such/dir/f"), Compression::None, None).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
