//! Sequence packing from Python: one window of parsed documents to packed batches.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::pipeline::pack::{self, FeatureInput, PackConfig};

/// Packs a window of documents (see `crate::pipeline::pack`), GIL released.
///
/// `values[f]` holds feature f's documents' values one after the other, as bytes (uint8),
/// `itemsizes[f]` their element size and `lengths[f]` the documents' lengths. Returns a dict:
/// `batches`, per-feature lists `values` (bytes as uint8 arrays), `segment_ids`, `positions`
/// (int32, each `[batches * rows * seq_len]`), `row_used` (bool `[batches * rows]`) and the
/// counters `truncated_documents`, `truncated_values`, `split_documents`, `empty_documents`,
/// `values_packed`.
#[pyfunction]
#[pyo3(signature = (values, itemsizes, lengths, seq_lens, rows, split))]
pub(super) fn pack_documents<'py>(
    py: Python<'py>,
    values: Vec<PyReadonlyArray1<'py, u8>>,
    itemsizes: Vec<usize>,
    lengths: Vec<PyReadonlyArray1<'py, i32>>,
    seq_lens: Vec<usize>,
    rows: usize,
    split: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let n = values.len();
    if itemsizes.len() != n || lengths.len() != n {
        let msg = format!(
            "pack: {n} value arrays, {} itemsizes, {} lengths",
            itemsizes.len(),
            lengths.len()
        );
        return Err(crate::error::Error::spec(None, msg).into());
    }
    let mut features = Vec::with_capacity(n);
    for f in 0..n {
        let v = values[f].as_slice()?;
        let l = lengths[f].as_slice()?;
        features.push(FeatureInput {
            values: v,
            itemsize: itemsizes[f],
            lengths: l,
        });
    }
    let cfg = PackConfig {
        seq_lens,
        rows,
        split,
    };
    let packed = py.detach(|| pack::pack(&features, &cfg))?;
    let out = PyDict::new(py);
    out.set_item("batches", packed.batches)?;
    let arrays = |vs: Vec<Vec<u8>>| -> Vec<Bound<'py, PyArray1<u8>>> {
        vs.into_iter().map(|v| PyArray1::from_vec(py, v)).collect()
    };
    out.set_item("values", arrays(packed.values))?;
    let ints = |vs: Vec<Vec<i32>>| -> Vec<Bound<'py, PyArray1<i32>>> {
        vs.into_iter().map(|v| PyArray1::from_vec(py, v)).collect()
    };
    out.set_item("segment_ids", ints(packed.segment_ids))?;
    out.set_item("positions", ints(packed.positions))?;
    out.set_item("row_used", PyArray1::from_vec(py, packed.row_used))?;
    out.set_item("truncated_documents", packed.truncated_documents)?;
    out.set_item("truncated_values", packed.truncated_values)?;
    out.set_item("split_documents", packed.split_documents)?;
    out.set_item("empty_documents", packed.empty_documents)?;
    out.set_item("values_packed", packed.values_packed)?;
    Ok(out)
}
