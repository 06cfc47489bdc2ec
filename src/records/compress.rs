//! Compression of whole TFRecord files: none, GZIP (RFC 1952) or ZLIB (RFC 1950), as written by
//! `tf.io.TFRecordOptions(compression_type=...)`. The framing inside is the same either way.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use super::crc::masked_crc32c;
use crate::error::{Error, Result};

/// How a TFRecord file is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain framing.
    None,
    /// A GZIP stream (one or more members).
    Gzip,
    /// A ZLIB stream.
    Zlib,
}

impl Compression {
    /// Parses tf.io's names: `None`/"" → none, "GZIP", "ZLIB" (case-insensitive).
    pub fn from_name(name: Option<&str>) -> Result<Self> {
        match name.map(|s| s.to_ascii_uppercase()).as_deref() {
            None | Some("") | Some("NONE") => Ok(Compression::None),
            Some("GZIP") => Ok(Compression::Gzip),
            Some("ZLIB") => Ok(Compression::Zlib),
            Some(other) => Err(Error::spec(
                None,
                format!(
                    "unknown compression {other:?}: expected None, \"GZIP\", \"ZLIB\" or \"auto\""
                ),
            )),
        }
    }

    /// tf.io's name for this compression.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => "GZIP",
            Compression::Zlib => "ZLIB",
        }
    }

    /// Infers the compression of a file from its name, then from its first bytes.
    ///
    /// `.gz`/`.gzip` → GZIP and `.zlib`/`.zz` → ZLIB. Otherwise the first 12 bytes decide: a
    /// valid TFRecord header (its length CRC matches) means plain; else the GZIP magic
    /// `1f 8b`, or a ZLIB header (deflate method, `(CMF*256+FLG) % 31 == 0`).
    pub fn infer(path: &Path, head: &[u8]) -> Compression {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase());
        if let Some(name) = name {
            if name.ends_with(".gz") || name.ends_with(".gzip") {
                return Compression::Gzip;
            }
            if name.ends_with(".zlib") || name.ends_with(".zz") {
                return Compression::Zlib;
            }
        }
        Self::sniff(head)
    }

    /// Decides from a file's first bytes alone (see [`Compression::infer`]).
    pub fn sniff(head: &[u8]) -> Compression {
        if head.len() >= 12 {
            let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
            if masked_crc32c(&head[..8]) == crc {
                return Compression::None;
            }
        }
        if head.len() >= 2 {
            if head[0] == 0x1f && head[1] == 0x8b {
                return Compression::Gzip;
            }
            let (cmf, flg) = (u16::from(head[0]), u16::from(head[1]));
            if cmf & 0x0f == 8 && cmf >> 4 <= 7 && (cmf * 256 + flg) % 31 == 0 {
                return Compression::Zlib;
            }
        }
        Compression::None
    }
}

/// An opened input: the decompressed byte stream and, for plain files, how many bytes it holds
/// (so a record length can be checked against what exists before anything is allocated).
pub struct Source {
    /// The (decompressed) stream.
    pub reader: Box<dyn Read + Send>,
    /// Total stream length in bytes when known (plain files).
    pub known_len: Option<u64>,
    /// The compression in effect (resolved from `auto`).
    pub compression: Compression,
}

/// Opens `path` for reading, resolving `compression = None` ("auto") from the name and bytes.
/// A plain file starts at `start` (a seek); a compressed stream always starts at 0, since only
/// decompressing from the beginning reaches a position in it.
pub fn open(path: &Path, compression: Option<Compression>, start: u64) -> io::Result<Source> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    open_stream(file, path, compression, start, Some(len))
}

/// [`open`] for any seekable byte stream (a Python file object from fsspec, say) named `name`
/// (the name is only used to infer the compression) holding `len` bytes if known.
pub fn open_stream<S: Read + Seek + Send + 'static>(
    mut file: S,
    name: &Path,
    compression: Option<Compression>,
    start: u64,
    len: Option<u64>,
) -> io::Result<Source> {
    let compression = match compression {
        Some(c) => c,
        None => {
            let mut head = [0u8; 12];
            let n = read_up_to(&mut file, &mut head)?;
            file.seek(SeekFrom::Start(0))?;
            Compression::infer(name, &head[..n])
        }
    };
    let known_len = match compression {
        Compression::None => len,
        _ => None,
    };
    // The decoders read through a buffer of their own; plain files are read in large blocks
    // straight into the reader's block buffer, so they need none.
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => {
            file.seek(SeekFrom::Start(start))?;
            Box::new(file)
        }
        Compression::Gzip => Box::new(MultiGzDecoder::new(io::BufReader::with_capacity(
            1 << 20,
            file,
        ))),
        Compression::Zlib => Box::new(ZlibDecoder::new(io::BufReader::with_capacity(
            1 << 20,
            file,
        ))),
    };
    Ok(Source {
        reader,
        known_len,
        compression,
    })
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
pub fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A (possibly compressing) output file. `finish` must be called to write GZIP/ZLIB trailers.
pub enum Sink {
    /// Plain file.
    Plain(BufWriter<File>),
    /// GZIP stream.
    Gzip(GzEncoder<BufWriter<File>>),
    /// ZLIB stream.
    Zlib(ZlibEncoder<BufWriter<File>>),
}

impl Sink {
    /// Creates (truncates) `path`. `level` is zlib's 0–9; `None` is zlib's default (6), as in TF.
    pub fn create(path: &Path, compression: Compression, level: Option<u32>) -> io::Result<Sink> {
        let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
        let level = level.map_or(flate2::Compression::default(), flate2::Compression::new);
        Ok(match compression {
            Compression::None => Sink::Plain(file),
            Compression::Gzip => Sink::Gzip(GzEncoder::new(file, level)),
            Compression::Zlib => Sink::Zlib(ZlibEncoder::new(file, level)),
        })
    }

    /// Writes the compressed stream's trailer (if any) and flushes to the OS.
    pub fn finish(self) -> io::Result<()> {
        let mut file = match self {
            Sink::Plain(f) => f,
            Sink::Gzip(e) => e.finish()?,
            Sink::Zlib(e) => e.finish()?,
        };
        file.flush()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
            Sink::Zlib(w) => w.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(buf),
            Sink::Gzip(w) => w.write_all(buf),
            Sink::Zlib(w) => w.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
            Sink::Zlib(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            Compression::from_name(Some("gzip")).unwrap(),
            Compression::Gzip
        );
        assert_eq!(Compression::from_name(Some("")).unwrap(), Compression::None);
        assert!(Compression::from_name(Some("lz4")).is_err());
    }

    #[test]
    fn sniffs_magic() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(Compression::sniff(&[0x78, 0x9c]), Compression::Zlib);
        let mut plain = 5u64.to_le_bytes().to_vec();
        plain.extend(masked_crc32c(&plain).to_le_bytes());
        assert_eq!(Compression::sniff(&plain), Compression::None);
    }
}
