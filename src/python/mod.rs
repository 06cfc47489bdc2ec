//! The Python boundary (`jaxrec._native`), the only place that uses pyo3 and numpy: argument
//! extraction, GIL release, conversion of results to numpy, and of [`crate::error::Error`] to
//! `jaxrec.errors`. No parsing logic lives here.

mod codecs;
mod errors;
mod finish;
mod pack;
mod parser;
mod queue;
mod records;
mod spec;
mod stream;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::preload(m.py())?;
    // The one version of jaxrec: Cargo.toml's (pyproject.toml reads it too, through maturin).
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(codecs::decode_image, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::encode_png, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::encode_jpeg, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::parse_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(codecs::serialize_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(records::masked_crc32c, m)?)?;
    m.add_function(wrap_pyfunction!(records::chunk_ids, m)?)?;
    m.add_function(wrap_pyfunction!(records::round_robin, m)?)?;
    m.add_function(wrap_pyfunction!(pack::pack_documents, m)?)?;
    m.add_function(wrap_pyfunction!(parser::spare_batches, m)?)?;
    m.add_function(wrap_pyfunction!(parser::release_spare_batches, m)?)?;
    m.add_function(wrap_pyfunction!(parser::loader_started, m)?)?;
    m.add_function(wrap_pyfunction!(parser::loader_ended, m)?)?;
    m.add_function(wrap_pyfunction!(parser::settle_kept_memory, m)?)?;
    m.add_function(wrap_pyfunction!(name_thread, m)?)?;
    // The largest read block the pool keeps: the Loader's automatic block size stays below it.
    m.add("MAX_POOLED_BLOCK", crate::records::blocks::MAX_POOLED_BLOCK)?;
    m.add_class::<parser::BatchMemory>()?;
    m.add_class::<finish::BatchParts>()?;
    m.add_class::<records::Chunk>()?;
    m.add_class::<records::RecordReader>()?;
    m.add_class::<records::RecordWriter>()?;
    m.add_class::<parser::ExampleParser>()?;
    m.add_class::<parser::Column>()?;
    m.add_class::<parser::Parsed>()?;
    m.add_class::<queue::ParseQueue>()?;
    m.add_class::<stream::NativeStream>()?;
    Ok(())
}

/// Names the calling thread for the operating system, as the native threads are named
/// (`jaxrec-parse-0`): `top -H`, `perf` and `/proc/<pid>/task/*/comm` then tell the Loader's
/// Python threads apart by their work. Linux keeps the first 15 bytes; elsewhere it does
/// nothing.
#[pyfunction]
fn name_thread(name: &str) {
    #[cfg(target_os = "linux")]
    {
        let mut bytes: Vec<u8> = name.bytes().filter(|&b| b != 0).take(15).collect();
        bytes.push(0);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the
        // pointer, which `bytes` is for the length of the call.
        unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}
