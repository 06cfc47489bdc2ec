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
    m.add_function(wrap_pyfunction!(pack::pack_documents, m)?)?;
    m.add_function(wrap_pyfunction!(parser::spare_batches, m)?)?;
    m.add_function(wrap_pyfunction!(parser::release_spare_batches, m)?)?;
    m.add_class::<parser::BatchMemory>()?;
    m.add_class::<records::Chunk>()?;
    m.add_class::<records::RecordReader>()?;
    m.add_class::<records::RecordWriter>()?;
    m.add_class::<parser::ExampleParser>()?;
    m.add_class::<parser::Column>()?;
    m.add_class::<parser::Parsed>()?;
    m.add_class::<queue::ParseQueue>()?;
    Ok(())
}
