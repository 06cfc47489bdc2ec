//! Single values from Python: images decoded and encoded, serialized tensors parsed.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use super::parser::{column_to_py, Column};
use crate::decode::image::{self, Format as ImageFormat};
use crate::decode::tensor::{self, TensorValues};
use crate::dtype::OutDType;
use crate::error::Error;

/// Decodes JPEG or PNG bytes to a `(height, width, channels)` uint8 array, GIL released.
#[pyfunction]
#[pyo3(signature = (data, channels=3, format="auto", max_pixels=1 << 26))]
pub(super) fn decode_image<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    channels: usize,
    format: &str,
    max_pixels: u64,
) -> PyResult<Bound<'py, PyAny>> {
    // Argument errors are FeatureSpecErrors, as for the same arguments of an Image entry.
    let format = match format {
        "jpeg" => ImageFormat::Jpeg,
        "png" => ImageFormat::Png,
        "auto" => ImageFormat::Auto,
        other => {
            let msg = format!(
                "decode_image: unknown image format {other:?} (expected auto, jpeg or png)"
            );
            return Err(Error::spec(None, msg).into());
        }
    };
    if !matches!(channels, 1 | 3 | 4) {
        let msg = format!("decode_image: channels must be 1, 3 or 4, not {channels}");
        return Err(Error::spec(None, msg).into());
    }
    let img = py.detach(|| image::decode(&data, format, channels, max_pixels))?;
    Ok(PyArray1::from_vec(py, img.pixels)
        .reshape([img.height, img.width, img.channels])?
        .into_any())
}

/// Encodes `height x width x channels` uint8 pixels as PNG (zlib `level` 0-9), GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, height, width, channels, level=None))]
pub(super) fn encode_png<'py>(
    py: Python<'py>,
    pixels: PyBackedBytes,
    height: usize,
    width: usize,
    channels: usize,
    level: Option<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = py.detach(|| image::encode_png(&pixels, height, width, channels, level))?;
    Ok(PyBytes::new(py, &out))
}

/// Encodes `height x width x channels` uint8 pixels as baseline JPEG, GIL released.
#[pyfunction]
#[pyo3(signature = (pixels, height, width, channels, quality=95, chroma_downsampling=true))]
pub(super) fn encode_jpeg<'py>(
    py: Python<'py>,
    pixels: PyBackedBytes,
    height: usize,
    width: usize,
    channels: usize,
    quality: u8,
    chroma_downsampling: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = py.detach(|| {
        image::encode_jpeg(
            &pixels,
            height,
            width,
            channels,
            quality,
            chroma_downsampling,
        )
    })?;
    Ok(PyBytes::new(py, &out))
}

/// Decodes a serialized TensorProto holding `dtype` (a spec dtype code) into a one-row
/// [`Column`] (`values` of shape `[1, *shape]`), GIL released.
#[pyfunction]
pub(super) fn parse_tensor(py: Python<'_>, data: PyBackedBytes, dtype: &str) -> PyResult<Column> {
    let dtype = OutDType::from_code(dtype)?;
    let col = py.detach(|| tensor::parse_tensor(&data, dtype))?;
    column_to_py(py, col, "tensor", &|_| None)
}

/// What `serialize_tensor` gets: numeric elements as little-endian bytes, or one bytes object
/// per string element.
#[derive(FromPyObject)]
pub(super) enum TensorValuesArg {
    Content(PyBackedBytes),
    Strings(Vec<PyBackedBytes>),
}

/// Serializes a tensor of `dtype` (a spec dtype code) and `shape` as a `TensorProto`, byte for
/// byte like `tf.io.serialize_tensor`; `values` is its little-endian elements (numbers) or a
/// list of bytes (strings).
#[pyfunction]
pub(super) fn serialize_tensor<'py>(
    py: Python<'py>,
    dtype: &str,
    shape: Vec<u64>,
    values: TensorValuesArg,
) -> PyResult<Bound<'py, PyBytes>> {
    let dtype = OutDType::from_code(dtype)?;
    let out = py.detach(|| match &values {
        TensorValuesArg::Content(c) => {
            tensor::serialize_tensor(dtype, &shape, TensorValues::Content(c))
        }
        TensorValuesArg::Strings(s) => {
            let strings: Vec<&[u8]> = s.iter().map(|b| &b[..]).collect();
            tensor::serialize_tensor(dtype, &shape, TensorValues::Strings(&strings))
        }
    })?;
    Ok(PyBytes::new(py, &out))
}
