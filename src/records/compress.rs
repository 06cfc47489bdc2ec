//! Compression of whole TFRecord files: none, GZIP (RFC 1952) or ZLIB (RFC 1950), as written by
//! `tf.io.TFRecordOptions(compression_type=...)`. The framing inside is the same either way.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use flate2::bufread;
use flate2::write::{GzEncoder, ZlibEncoder};

use super::crc::masked_crc32c_length;
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
            let len: [u8; 8] = head[..8].try_into().expect("8 bytes");
            if masked_crc32c_length(len) == crc {
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

/// A plain byte source that can also seek: a local file, or a Python file object.
pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

/// The raw file under a decompressor, buffered so the decoder consumes exactly what it inflates
/// (its position then says where in the compressed file a broken stream was found).
type Compressed = io::BufReader<Box<dyn ReadSeek>>;

/// The bytes a reader frames: a plain file it may seek in, a decompressed stream, or any other
/// stream (tests, in-memory data).
pub enum Input {
    /// Plain framing, seekable (a skipped payload is seeked past, not read).
    Plain(Box<dyn ReadSeek>),
    /// A GZIP stream (one or more members), decompressed.
    Gzip(Box<bufread::MultiGzDecoder<Compressed>>),
    /// A ZLIB stream, decompressed.
    Zlib(Box<bufread::ZlibDecoder<Compressed>>),
    /// Any other byte stream; nothing can be seeked.
    Stream(Box<dyn Read + Send>),
}

impl Input {
    /// An input with nothing in it (also what a reader holds once its file is closed).
    pub fn empty() -> Self {
        Input::Stream(Box::new(io::empty()))
    }

    /// Moves a plain input to byte `pos`; false for a stream that cannot seek.
    pub fn seek_to(&mut self, pos: u64) -> io::Result<bool> {
        match self {
            Input::Plain(f) => f.seek(SeekFrom::Start(pos)).map(|_| true),
            _ => Ok(false),
        }
    }

    /// How far into the compressed file the decompressor has read: where a broken GZIP/ZLIB
    /// stream was found (at or just before this byte). None for uncompressed input.
    pub fn compressed_position(&mut self) -> Option<u64> {
        let buffered = match self {
            Input::Gzip(d) => d.get_mut(),
            Input::Zlib(d) => d.get_mut(),
            _ => return None,
        };
        buffered.stream_position().ok()
    }
}

/// The most decompressed bytes asked of a decoder at once. A decoder that meets corrupt data
/// fails the whole call, dropping what it decoded in it: small calls keep that loss (good
/// records just before the damage) to this many bytes, at no measurable cost.
pub const DECODE_STEP: usize = 64 << 10;

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let step = buf.len().min(DECODE_STEP);
        match self {
            Input::Plain(r) => r.read(buf),
            Input::Gzip(r) => r.read(&mut buf[..step]),
            Input::Zlib(r) => r.read(&mut buf[..step]),
            Input::Stream(r) => r.read(buf),
        }
    }
}

/// An opened input: the (decompressed) byte stream and, for plain files, how many bytes it
/// holds (so a record length can be checked against what exists before anything is allocated).
pub struct Source {
    /// The (decompressed) stream.
    pub input: Input,
    /// Total stream length in bytes when known (plain files).
    pub known_len: Option<u64>,
    /// The compression in effect (resolved from `auto`).
    pub compression: Compression,
}

/// Why a path was refused before reading: it is not a regular file. A FIFO or a character
/// device would block (a FIFO until a writer opens it, forever for a reader alone) or never
/// end (`/dev/zero`), and neither can seek; a directory or a socket holds no records.
#[derive(Debug)]
pub struct NotRegularFile {
    /// What it is instead ("a FIFO (named pipe)", "a directory", …).
    pub what: &'static str,
}

impl NotRegularFile {
    /// The errno Python's `OSError` gets: `EISDIR` for a directory (so it is an
    /// `IsADirectoryError`), else `EINVAL`.
    pub fn errno(&self) -> i32 {
        #[cfg(unix)]
        {
            if self.what == DIRECTORY {
                libc::EISDIR
            } else {
                libc::EINVAL
            }
        }
        #[cfg(not(unix))]
        {
            if self.what == DIRECTORY {
                21
            } else {
                22
            }
        }
    }
}

const DIRECTORY: &str = "a directory";

impl std::fmt::Display for NotRegularFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not a regular file: it is {}; TFRecord files must be regular files",
            self.what
        )
    }
}

impl std::error::Error for NotRegularFile {}

fn not_regular(file_type: std::fs::FileType) -> io::Error {
    #[cfg(unix)]
    use std::os::unix::fs::FileTypeExt;
    let what = if file_type.is_dir() {
        DIRECTORY
    } else {
        #[cfg(unix)]
        {
            if file_type.is_fifo() {
                "a FIFO (named pipe)"
            } else if file_type.is_char_device() {
                "a character device"
            } else if file_type.is_block_device() {
                "a block device"
            } else if file_type.is_socket() {
                "a socket"
            } else {
                "not a file"
            }
        }
        #[cfg(not(unix))]
        {
            "not a file"
        }
    };
    let kind = if what == DIRECTORY {
        io::ErrorKind::IsADirectory
    } else {
        io::ErrorKind::InvalidInput
    };
    io::Error::new(kind, NotRegularFile { what })
}

/// Opens a regular file for reading and returns it with its length, refusing anything else
/// without blocking: the file is opened `O_NONBLOCK` (so opening a FIFO with no writer returns at
/// once instead of waiting, uninterruptibly, for one), its type is checked with `fstat` on the
/// opened descriptor (no window between a `stat` and the `open` for the path to change), and
/// `O_NONBLOCK` is then cleared (it has no effect on regular files, but reads stay plain).
pub fn open_file(path: &Path) -> io::Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns (`file` is alive), with the
        // documented F_GETFL/F_SETFL arguments; no memory is passed.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((file, meta.len()))
}

/// Opens `path` for reading, resolving `compression = None` ("auto") from the name and bytes.
/// The stream starts at byte 0 (the reader moves it: a seek in a plain file; a compressed stream
/// can only be decompressed from its beginning). Only regular files are opened ([`open_file`]).
pub fn open(path: &Path, compression: Option<Compression>) -> io::Result<Source> {
    let (file, len) = open_file(path)?;
    open_stream(file, path, compression, Some(len))
}

/// [`open`] for any seekable byte stream (a Python file object from fsspec, say) named `name`
/// (the name is only used to infer the compression) holding `len` bytes if known.
///
/// A compressed file of 0 bytes holds no records, like an empty plain file (TensorFlow reads
/// it the same way), rather than a stream cut before its header.
pub fn open_stream<S: Read + Seek + Send + 'static>(
    mut file: S,
    name: &Path,
    compression: Option<Compression>,
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
    let file: Box<dyn ReadSeek> = Box::new(file);
    // The decoders read through a buffer of their own; plain files are read in large blocks
    // straight into the reader's block buffer, so they need none.
    let input = match compression {
        _ if compression != Compression::None && len == Some(0) => Input::empty(),
        Compression::None => Input::Plain(file),
        Compression::Gzip => Input::Gzip(Box::new(bufread::MultiGzDecoder::new(
            io::BufReader::with_capacity(1 << 20, file),
        ))),
        Compression::Zlib => Input::Zlib(Box::new(bufread::ZlibDecoder::new(
            io::BufReader::with_capacity(1 << 20, file),
        ))),
    };
    Ok(Source {
        input,
        known_len,
        compression,
    })
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
pub fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let (n, failed) = read_steps(r, buf);
    failed.map_or(Ok(n), Err)
}

/// Reads `r` into `buf` until it is full or the stream ends, each read asking for all that is
/// left (an [`Input`] cuts a decompressed stream's reads to its decoder's step): how many bytes
/// came, and the error that stopped it, if one did (the bytes before it stay in `buf`).
pub fn read_steps(r: &mut impl Read, buf: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut n = 0;
    while n < buf.len() {
        match read_once(r, &mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

/// One read of `r` into `buf` (asked again when interrupted by a signal).
pub fn read_once(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            done => return done,
        }
    }
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
    use crate::records::crc::masked_crc32c;

    #[test]
    fn infer_reads_the_name_then_the_first_bytes() {
        let plain = {
            let len = 5u64.to_le_bytes();
            let mut h = len.to_vec();
            h.extend(masked_crc32c(&len).to_le_bytes());
            h
        };
        for (name, want) in [
            ("a.gz", Compression::Gzip),
            ("A.GZIP", Compression::Gzip),
            ("dir.gz/a.zlib", Compression::Zlib),
            ("a.ZZ", Compression::Zlib),
            ("a.tfrecord", Compression::None),
            ("gz", Compression::None),
        ] {
            // The name decides over the bytes (a plain header under a .gz name is GZIP).
            assert_eq!(Compression::infer(Path::new(name), &plain), want, "{name}");
        }
        let unnamed = Path::new("data-00000-of-00001");
        assert_eq!(
            Compression::infer(unnamed, &[0x1f, 0x8b, 8, 0]),
            Compression::Gzip
        );
        assert_eq!(
            Compression::infer(unnamed, &[0x78, 0x9c]),
            Compression::Zlib
        );
    }

    #[test]
    fn sniff_tells_plain_gzip_and_zlib_apart() {
        let plain = {
            let len = 0x8b1fu64.to_le_bytes(); // a length that starts like the GZIP magic
            let mut h = len.to_vec();
            h.extend(masked_crc32c(&len).to_le_bytes());
            h
        };
        assert_eq!(Compression::sniff(&plain), Compression::None);
        let mut damaged = plain.clone();
        damaged[8] ^= 1; // its CRC no longer matches: the magic decides
        assert_eq!(Compression::sniff(&damaged), Compression::Gzip);
        assert_eq!(Compression::sniff(&[0x1f, 0x8b]), Compression::Gzip);
        assert_eq!(Compression::sniff(&[0x1f, 0x8c]), Compression::None);
        assert_eq!(Compression::sniff(&[0x1e, 0x8b]), Compression::None);
        // ZLIB: deflate (CM 8), window at most 2^15 (CINFO <= 7), header check % 31.
        for head in [[0x78, 0x9c], [0x78, 0x01], [0x78, 0xda], [0x08, 0x1d]] {
            assert_eq!(Compression::sniff(&head), Compression::Zlib, "{head:02x?}");
        }
        for head in [[0x78, 0x9d], [0x79, 0x9c], [0x88, 0x98], [0x00, 0x00]] {
            assert_eq!(Compression::sniff(&head), Compression::None, "{head:02x?}");
        }
        assert_eq!(Compression::sniff(&[0x78]), Compression::None);
        assert_eq!(Compression::sniff(&[]), Compression::None);
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn read_all(input: &mut Input) -> Vec<u8> {
        let mut out = Vec::new();
        input.read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn open_stream_resolves_and_decompresses() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let name = Path::new("unnamed");
        // Plain: its length is known (record lengths are checked against it) and it seeks.
        let mut plain = vec![0u8; 0];
        let len = 5u64.to_le_bytes();
        plain.extend(len);
        plain.extend(masked_crc32c(&len).to_le_bytes());
        plain.extend(&data);
        let n = plain.len() as u64;
        let mut src = open_stream(io::Cursor::new(plain.clone()), name, None, Some(n)).unwrap();
        assert_eq!(
            (src.compression, src.known_len),
            (Compression::None, Some(n))
        );
        assert!(matches!(src.input, Input::Plain(_)));
        assert!(src.input.compressed_position().is_none());
        assert!(src.input.seek_to(12).unwrap());
        assert_eq!(read_all(&mut src.input), data);
        // GZIP and ZLIB: decompressed (in several reads), length unknown, positions known.
        for (bytes, want) in [
            (gzip(&data), Compression::Gzip),
            (zlib(&data), Compression::Zlib),
        ] {
            let len = Some(bytes.len() as u64);
            let mut src = open_stream(io::Cursor::new(bytes.clone()), name, None, len).unwrap();
            assert_eq!((src.compression, src.known_len), (want, None));
            assert!(!src.input.seek_to(0).unwrap());
            let mut first = vec![0u8; 1 << 20];
            let got = src.input.read(&mut first).unwrap();
            assert!(got > 0 && got <= DECODE_STEP, "{got}");
            let mut rest = read_all(&mut src.input);
            first.truncate(got);
            first.append(&mut rest);
            assert_eq!(first, data);
            let at = src.input.compressed_position().unwrap();
            assert!(at > 0 && at <= bytes.len() as u64, "{at}");
        }
        // A compressed file of 0 bytes holds nothing; so does a plain one, still plain.
        let mut empty = open_stream(
            io::Cursor::new(vec![]),
            name,
            Some(Compression::Gzip),
            Some(0),
        )
        .unwrap();
        assert!(matches!(empty.input, Input::Stream(_)) && read_all(&mut empty.input).is_empty());
        let plain0 = open_stream(
            io::Cursor::new(vec![]),
            name,
            Some(Compression::None),
            Some(0),
        )
        .unwrap();
        assert!(matches!(plain0.input, Input::Plain(_)));
        assert_eq!(plain0.known_len, Some(0));
        assert!(!Input::empty().seek_to(0).unwrap());
    }

    #[test]
    fn read_up_to_fills_the_buffer_through_short_and_interrupted_reads() {
        struct Trickle(Vec<u8>, bool);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.1 = !self.1;
                if self.1 {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "signal"));
                }
                if self.0.is_empty() || buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0.remove(0);
                Ok(1)
            }
        }
        let mut buf = [0u8; 4];
        assert_eq!(
            read_up_to(&mut Trickle(vec![1, 2, 3, 4, 5], false), &mut buf).unwrap(),
            4
        );
        assert_eq!(buf, [1, 2, 3, 4]);
        let mut buf = [0u8; 4];
        assert_eq!(
            read_up_to(&mut Trickle(vec![9, 8], false), &mut buf).unwrap(),
            2
        );
        assert_eq!(buf[..2], [9, 8]);
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk"))
            }
        }
        assert!(read_up_to(&mut Broken, &mut [0u8; 4]).is_err());
    }

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
