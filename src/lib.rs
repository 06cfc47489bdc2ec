//! jaxrec's native core, in the order the data flows:
//!
//! - [`records`]: TFRecord files — framing, GZIP/ZLIB, the masked CRC32C — read into chunks;
//! - [`parse`]: a compiled spec, and batches of `tf.train.Example` / `SequenceExample` parsed
//!   into columnar, fixed-shape arrays;
//! - [`decode`]: bytes features decoded into arrays — raw tensors, serialized `TensorProto`s
//!   and JPEG/PNG images — one layer below `parse`, which calls it;
//! - [`pipeline`]: what happens to parsed batches next — sequence packing.
//!
//! Shared leaves: [`error`] (the one error type), [`wire`] (protobuf primitives and
//! `tf.train.Feature`), [`dtype`] (output dtypes), [`column`](mod@column) (a parsed column)
//! and [`alloc`] (the size limits and fallible allocation of everything a record sizes, and
//! the allocator itself); [`idle`] hands the memory Loaders keep for one another to the kernel
//! once none runs.
//!
//! Everything here is plain Rust with no Python in it; `python/` (behind the `python`
//! feature, which maturin enables) is the only place that converts to and from Python objects.

#![warn(missing_docs)]

pub mod alloc;
pub mod column;
pub mod decode;
pub mod dtype;
pub mod error;
pub mod idle;
pub mod parse;
pub mod pipeline;
mod prefetch;
pub mod records;
pub mod wire;

#[cfg(feature = "python")]
mod python;

/// Rust's allocations: small ones from mimalloc, the rest from the system (see
/// [`alloc::SplitAllocator`]).
#[global_allocator]
static ALLOCATOR: alloc::SplitAllocator = alloc::SplitAllocator;
