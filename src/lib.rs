//! jaxrec's native core: TFRecord framing ([`framing`]), compression ([`compress`]), masked
//! CRC32C ([`crc`]) and `tf.train.Example` parsing ([`example`]) into columnar arrays, with
//! bytes features decoded to tensors ([`decode`]) and images ([`image`]).
//!
//! Everything here is plain Rust with no Python in it; `python.rs` (behind the `python`
//! feature, which maturin enables) is the only place that converts to and from Python objects.

pub mod compress;
pub mod crc;
pub mod decode;
pub mod error;
pub mod example;
pub mod framing;
pub mod image;
pub mod spec;
pub mod wire;

#[cfg(feature = "python")]
mod python;
