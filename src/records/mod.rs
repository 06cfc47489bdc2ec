//! TFRecord files: framing, compression and the masked CRC32C. Each record on disk is
//!
//! ```text
//! u64 length (little-endian) | u32 masked_crc32c(length bytes) | data[length] | u32 masked_crc32c(data)
//! ```
//!
//! (tensorflow/core/lib/io/record_writer.h); a GZIP or ZLIB file is that stream compressed as a
//! whole ([`compress`]).

pub mod blocks;
pub mod compress;
pub mod crc;
pub mod reader;
pub mod writer;

/// Bytes before a record's payload: the length and its masked CRC.
pub(crate) const HEADER: usize = 12;
/// Bytes after a record's payload: the payload's masked CRC.
pub(crate) const FOOTER: usize = 4;
