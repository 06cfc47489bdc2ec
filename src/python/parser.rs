//! The parser from Python: [`ExampleParser`] compiles the spec `jaxrec/_spec.py` reduced, and
//! parses lists of records or chunks with the GIL released, handing columns back as numpy.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::records::Chunk;
use crate::column::{Column, ColumnData};
use crate::decode::image::{Format as ImageFormat, ImageSpec, PixelType, Resize};
use crate::decode::spec::{DecoderConfig, Dim, RawSpec, ShapeFrom, TensorSpec, Transform};
use crate::dtype::OutDType;
use crate::error::{Error, Location};
use crate::parse::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use crate::parse::{self, ParsedBatch};

type FeatureTuple = (
    String,
    u8,
    u8,
    String,
    usize,
    Option<usize>,
    bool,
    Option<Vec<f64>>,
    Option<Vec<i64>>,
    Option<Vec<Vec<u8>>>,
    bool,
);

fn compile(features: Vec<FeatureTuple>) -> Result<CompiledSpec, Error> {
    let configs = features
        .into_iter()
        .map(
            |(
                name,
                kind,
                _wire,
                code,
                n,
                max_len,
                truncate,
                floats,
                ints,
                bytes,
                allow_missing,
            )| {
                let kind = match kind {
                    0 => Kind::Fixed,
                    1 => Kind::Var,
                    2 => Kind::Sequence,
                    k => return Err(Error::internal(format!("unknown feature kind {k}"))),
                };
                let defaults = match (floats, ints, bytes) {
                    (Some(f), None, None) => Defaults::Float(f),
                    (None, Some(i), None) => Defaults::Int(i),
                    (None, None, Some(b)) => Defaults::Bytes(b),
                    (None, None, None) => Defaults::None,
                    _ => {
                        return Err(Error::internal(format!(
                            "feature {name:?}: more than one kind of default"
                        )))
                    }
                };
                Ok(FeatureConfig {
                    name,
                    kind,
                    dtype: OutDType::from_code(&code)?,
                    n,
                    max_len,
                    truncate,
                    defaults,
                    allow_missing,
                })
            },
        )
        .collect::<Result<Vec<_>, Error>>()?;
    CompiledSpec::new(configs)
}

/// A compiled spec: parses batches of serialized Examples (or SequenceExamples when
/// `sequence_features` is given) into numpy arrays, with the GIL released.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct ExampleParser {
    context: CompiledSpec,
    sequence: Option<CompiledSpec>,
}

pub(super) fn column_to_py<'py>(py: Python<'py>, col: Column<'_>) -> PyResult<Bound<'py, PyTuple>> {
    macro_rules! arr {
        ($v:expr) => {
            PyArray1::from_vec(py, $v)
                .reshape(col.shape.clone())?
                .into_any()
        };
    }
    let (values, view) = match col.data {
        ColumnData::I8(v) => (arr!(v), None),
        ColumnData::I16(v) => (arr!(v), None),
        ColumnData::I32(v) => (arr!(v), None),
        ColumnData::I64(v) => (arr!(v), None),
        ColumnData::U8(v) => (arr!(v), None),
        ColumnData::U16(v) => (arr!(v), None),
        ColumnData::U32(v) => (arr!(v), None),
        ColumnData::U64(v) => (arr!(v), None),
        ColumnData::Bool(v) => (arr!(v), None),
        // Bit patterns; Python views them as float16 / ml_dtypes.bfloat16.
        ColumnData::F16(v) => (arr!(v), Some("float16")),
        ColumnData::BF16(v) => (arr!(v), Some("bfloat16")),
        ColumnData::F32(v) => (arr!(v), None),
        ColumnData::F64(v) => (arr!(v), None),
        ColumnData::Bytes(v) => {
            let objs: Vec<Py<PyAny>> = v
                .iter()
                .map(|b| PyBytes::new(py, b).into_any().unbind())
                .collect();
            (arr!(objs), None)
        }
    };
    let lengths = col.lengths.map(|l| PyArray1::from_vec(py, l));
    let steps = col.steps.map(|s| PyArray1::from_vec(py, s));
    // Decoded features: per-row valid flags (skip_errors) and per-row shapes [B, ndim].
    let valid = col.valid.map(|v| PyArray1::from_vec(py, v));
    let rows = col.shape.first().copied().unwrap_or(0);
    let shapes = match col.shapes {
        Some(s) => {
            let ndim = s.len().checked_div(rows).unwrap_or(0);
            Some(PyArray1::from_vec(py, s).reshape([rows, ndim])?)
        }
        None => None,
    };
    PyTuple::new(
        py,
        [
            values,
            view.into_pyobject(py)?.into_any(),
            lengths.into_pyobject(py)?.into_any(),
            steps.into_pyobject(py)?.into_any(),
            col.truncated.into_pyobject(py)?.into_any(),
            valid.into_pyobject(py)?.into_any(),
            shapes.into_pyobject(py)?.into_any(),
            col.skipped.into_pyobject(py)?.into_any(),
            PyList::new(py, col.errors)?.into_any(),
        ],
    )
}

impl ExampleParser {
    /// Parses `records` with the GIL released; `locate(row)` says where row `row` came from,
    /// so that errors name the record's file, index and offset rather than its batch row.
    fn run<'py>(
        &self,
        py: Python<'py>,
        records: &[&[u8]],
        locate: impl Fn(usize) -> Option<Location>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let parsed: Result<ParsedBatch<'_>, Error> = py.detach(|| match &self.sequence {
            None => parse::parse_examples(records, &self.context),
            Some(seq) => parse::parse_sequence_examples(records, &self.context, seq),
        });
        let parsed = parsed.map_err(|e| e.relocate(&locate))?;
        let ctx = PyList::new(
            py,
            parsed
                .context
                .into_iter()
                .map(|c| column_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        let seq = PyList::new(
            py,
            parsed
                .sequence
                .into_iter()
                .map(|c| column_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?,
        )?;
        PyTuple::new(py, [ctx.into_any(), seq.into_any()])
    }
}

#[pymethods]
impl ExampleParser {
    #[new]
    #[pyo3(signature = (features, sequence_features=None, decoders=None))]
    fn new(
        features: Vec<FeatureTuple>,
        sequence_features: Option<Vec<FeatureTuple>>,
        decoders: Option<Vec<(usize, String, Bound<'_, PyDict>)>>,
    ) -> PyResult<Self> {
        let decoders = decoders
            .unwrap_or_default()
            .into_iter()
            .map(|(i, kind, params)| Ok((i, decoder_config(&kind, &params)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let context = compile(features).and_then(|spec| spec.with_decoders(decoders))?;
        let sequence = sequence_features.map(compile).transpose()?;
        Ok(ExampleParser { context, sequence })
    }

    /// Parses a list of serialized records. Returns `(context_columns, sequence_columns)`,
    /// each a list (in spec order) of `(values, view_dtype, lengths, steps, truncated)`.
    fn parse<'py>(
        &self,
        py: Python<'py>,
        records: Vec<PyBackedBytes>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let slices: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        self.run(py, &slices, |_| None)
    }

    /// Parses every record of a chunk; errors name the chunk's file, record index and offset.
    fn parse_chunk<'py>(&self, py: Python<'py>, chunk: &Chunk) -> PyResult<Bound<'py, PyTuple>> {
        let slices = chunk.records();
        self.run(py, &slices, |row| chunk.location(row))
    }

    /// Parses a batch gathered from several chunks: row i is record `rows[i]` of chunk
    /// `chunks[which[i]]` (the loader's shuffled order). Errors name that record's file,
    /// index and offset.
    fn parse_rows<'py>(
        &self,
        py: Python<'py>,
        chunks: Vec<PyRef<'py, Chunk>>,
        which: PyReadonlyArray1<'py, i64>,
        rows: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (which, rows) = (which.as_slice()?, rows.as_slice()?);
        if which.len() != rows.len() {
            return Err(PyValueError::new_err(
                "which and rows must have the same length",
            ));
        }
        let mut slices = Vec::with_capacity(rows.len());
        let mut origins = Vec::with_capacity(rows.len());
        for (&c, &r) in which.iter().zip(rows) {
            let chunk = usize::try_from(c).ok().and_then(|c| chunks.get(c));
            let row = usize::try_from(r).ok();
            match (chunk, row) {
                (Some(chunk), Some(row)) if row < chunk.inner.len() => {
                    slices.push(chunk.inner.record(row));
                    origins.push((chunk, row));
                }
                _ => return Err(PyIndexError::new_err(format!("no record {r} in chunk {c}"))),
            }
        }
        self.run(py, &slices, |i| {
            origins.get(i).and_then(|(chunk, row)| chunk.location(*row))
        })
    }
}

/// Reads `params[key]`, failing with a spec error when it is absent.
fn param<'py, T: FromPyObjectOwned<'py>>(params: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    match params.get_item(key)? {
        Some(v) => v.extract().map_err(Into::into),
        None => Err(PyValueError::new_err(format!(
            "decoder parameter {key:?} is missing"
        ))),
    }
}

fn dims(items: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<Dim>> {
    items
        .into_iter()
        .map(|d| {
            if d.is_none() {
                return Ok(Dim::Any);
            }
            if let Ok(name) = d.extract::<String>() {
                return Ok(Dim::Feature { name, slot: 0 });
            }
            match d.extract::<i64>()? {
                -1 => Ok(Dim::Infer),
                n => usize::try_from(n)
                    .map(Dim::Fixed)
                    .map_err(|_| PyValueError::new_err(format!("bad dimension {n}"))),
            }
        })
        .collect()
}

/// Builds a decoder from `jaxrec/_spec.py`'s `(kind, params)` (see `CompiledFeature.decoder`).
fn decoder_config(kind: &str, p: &Bound<'_, PyDict>) -> PyResult<DecoderConfig> {
    let code: String = param(p, "dtype")?;
    let dtype = OutDType::from_code(&code).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let transform = match kind {
        "image" => Transform::Image(ImageSpec {
            height: param(p, "height")?,
            width: param(p, "width")?,
            channels: param(p, "channels")?,
            format: match param::<String>(p, "format")?.as_str() {
                "jpeg" => ImageFormat::Jpeg,
                "png" => ImageFormat::Png,
                _ => ImageFormat::Auto,
            },
            resize: match param::<Option<String>>(p, "resize")?.as_deref() {
                None => Resize::None,
                Some("crop_or_pad") => Resize::CropOrPad,
                Some("bilinear") => Resize::Bilinear {
                    antialias: param(p, "antialias")?,
                },
                Some(other) => {
                    return Err(PyValueError::new_err(format!("unknown resize {other:?}")))
                }
            },
            pixel: if dtype == OutDType::F32 {
                PixelType::F32
            } else {
                PixelType::U8
            },
            max_pixels: param(p, "max_pixels")?,
        }),
        "raw" => Transform::Raw(RawSpec {
            dtype,
            shape: match param::<Option<String>>(p, "shape_feature")? {
                Some(name) => ShapeFrom::Feature {
                    name,
                    slot: 0,
                    ndim: param(p, "ndim")?,
                },
                None => ShapeFrom::Dims(dims(param(p, "dims")?)?),
            },
            max_shape: param(p, "max_shape")?,
            little_endian: param(p, "little_endian")?,
        }),
        "tensor" => Transform::Tensor(TensorSpec {
            dtype,
            shape: dims(param(p, "dims")?)?,
            max_shape: param(p, "max_shape")?,
        }),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown decoder kind {other:?}"
            )))
        }
    };
    Ok(DecoderConfig {
        transform,
        skip_errors: param::<String>(p, "on_error")? == "skip",
    })
}
