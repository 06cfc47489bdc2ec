//! The spec as it crosses the boundary: `jaxrec/_spec.py`'s `CompiledFeature` and decoder
//! dataclasses, read attribute by attribute (`#[derive(FromPyObject)]`), then built into a
//! [`CompiledSpec`]. A field added to a dataclass is added to its struct here, and nowhere else.

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyString;

use crate::decode::image::{Format, ImageSpec, PixelType, Resize};
use crate::decode::spec::{DecoderConfig, Dim, RawSpec, ShapeFrom, TensorSpec, Transform};
use crate::dtype::OutDType;
use crate::error::Error;
use crate::parse::spec::{CompiledSpec, Defaults, FeatureConfig, Kind};
use crate::wire::Wire;

/// `jaxrec._spec.CompiledFeature`.
#[derive(FromPyObject)]
pub(super) struct FeatureArg<'py> {
    name: String,
    /// `KIND_FIXED | KIND_VAR | KIND_SEQUENCE`: "fixed", "var", "sequence".
    kind: String,
    /// The output dtype's code (`dtype_code`).
    code: String,
    /// Values per record (fixed) or per step (sequence); `()` for VarLen.
    shape: Vec<usize>,
    max_len: Option<usize>,
    truncate: bool,
    /// Flat int64 (uint64 for a uint64 feature) / float64 values (a numpy array) or a list of
    /// bytes, as the dtype reads.
    default: Option<Bound<'py, PyAny>>,
    allow_missing: bool,
    decoding: Option<DecoderArg>,
}

/// `ImageDecoder | RawDecoder | TensorDecoder`, told apart by their `kind` class attribute.
pub(super) enum DecoderArg {
    Image(ImageArg),
    Raw(RawArg),
    Tensor(TensorArg),
}

impl<'a, 'py> FromPyObject<'a, 'py> for DecoderArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let kind = obj.getattr(pyo3::intern!(obj.py(), "kind"))?;
        match kind.cast::<PyString>()?.to_str()? {
            "image" => Ok(DecoderArg::Image(obj.extract()?)),
            "raw" => Ok(DecoderArg::Raw(obj.extract()?)),
            "tensor" => Ok(DecoderArg::Tensor(obj.extract()?)),
            other => Err(Error::internal(format!("unknown decoder kind {other:?}")).into()),
        }
    }
}

/// `jaxrec._spec.ImageDecoder`.
#[derive(FromPyObject)]
pub(super) struct ImageArg {
    dtype: String,
    height: usize,
    width: usize,
    channels: usize,
    format: String,
    resize: Option<String>,
    antialias: bool,
    max_pixels: u64,
    skip_errors: bool,
}

/// `jaxrec._spec.RawDecoder`.
#[derive(FromPyObject)]
pub(super) struct RawArg {
    dtype: String,
    dims: Vec<DimArg>,
    shape_feature: Option<String>,
    ndim: usize,
    max_shape: Option<Vec<usize>>,
    little_endian: bool,
    skip_errors: bool,
}

/// `jaxrec._spec.TensorDecoder`.
#[derive(FromPyObject)]
pub(super) struct TensorArg {
    dtype: String,
    dims: Vec<Option<usize>>,
    max_shape: Option<Vec<usize>>,
    skip_errors: bool,
}

/// One entry of `RawDecoder.dims`: a size, `-1`, or the name of a feature holding the size.
#[derive(FromPyObject)]
pub(super) enum DimArg {
    Size(i64),
    Feature(String),
}

/// Builds the compiled spec of a list of features, attaching their decoders.
pub(super) fn compile(features: Vec<FeatureArg<'_>>) -> PyResult<CompiledSpec> {
    let mut configs = Vec::with_capacity(features.len());
    let mut decoders = Vec::new();
    for (i, f) in features.into_iter().enumerate() {
        if let Some(dec) = f.decoding {
            decoders.push((i, decoder_config(dec)?));
        }
        let kind = match f.kind.as_str() {
            "fixed" => Kind::Fixed,
            "var" => Kind::Var,
            "sequence" => Kind::Sequence,
            other => return Err(Error::internal(format!("unknown feature kind {other:?}")).into()),
        };
        let dtype = OutDType::from_code(&f.code)?;
        let n = f
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::internal(format!("feature {:?}: shape overflows", f.name)))?;
        let defaults = match (f.default, dtype.wire()) {
            (None, _) => Defaults::None,
            (Some(d), Wire::Int64) if dtype == OutDType::U64 => Defaults::UInt(d.extract()?),
            (Some(d), Wire::Int64) => Defaults::Int(d.extract()?),
            (Some(d), Wire::Float) => Defaults::Float(d.extract()?),
            (Some(d), Wire::Bytes) => Defaults::Bytes(
                d.extract::<Vec<PyBackedBytes>>()?
                    .iter()
                    .map(|b| b.to_vec())
                    .collect(),
            ),
        };
        configs.push(FeatureConfig {
            name: f.name,
            kind,
            dtype,
            n,
            max_len: f.max_len,
            truncate: f.truncate,
            defaults,
            allow_missing: f.allow_missing,
        });
    }
    Ok(CompiledSpec::new(configs)?.with_decoders(decoders)?)
}

fn decoder_config(dec: DecoderArg) -> Result<DecoderConfig, Error> {
    let (transform, skip_errors) = match dec {
        DecoderArg::Image(a) => {
            let image = ImageSpec {
                height: a.height,
                width: a.width,
                channels: a.channels,
                format: match a.format.as_str() {
                    "jpeg" => Format::Jpeg,
                    "png" => Format::Png,
                    "auto" => Format::Auto,
                    other => return Err(Error::internal(format!("unknown format {other:?}"))),
                },
                resize: match a.resize.as_deref() {
                    None => Resize::None,
                    Some("crop_or_pad") => Resize::CropOrPad,
                    Some("bilinear") => Resize::Bilinear {
                        antialias: a.antialias,
                    },
                    Some(other) => {
                        return Err(Error::internal(format!("unknown resize {other:?}")))
                    }
                },
                pixel: match OutDType::from_code(&a.dtype)? {
                    OutDType::U8 => PixelType::U8,
                    OutDType::F32 => PixelType::F32,
                    other => {
                        return Err(Error::internal(format!(
                            "an image decodes to uint8 or float32, not {}",
                            other.name()
                        )))
                    }
                },
                max_pixels: a.max_pixels,
            };
            (Transform::Image(image), a.skip_errors)
        }
        DecoderArg::Raw(a) => {
            let shape = match a.shape_feature {
                Some(name) => ShapeFrom::Feature {
                    name,
                    slot: 0,
                    ndim: a.ndim,
                },
                None => ShapeFrom::Dims(
                    a.dims
                        .into_iter()
                        .map(|d| match d {
                            DimArg::Size(-1) => Ok(Dim::Infer),
                            DimArg::Size(n) => usize::try_from(n)
                                .map(Dim::Fixed)
                                .map_err(|_| Error::internal(format!("bad dimension {n}"))),
                            DimArg::Feature(name) => Ok(Dim::Feature { name, slot: 0 }),
                        })
                        .collect::<Result<_, Error>>()?,
                ),
            };
            let raw = RawSpec {
                dtype: OutDType::from_code(&a.dtype)?,
                shape,
                max_shape: a.max_shape,
                little_endian: a.little_endian,
            };
            (Transform::Raw(raw), a.skip_errors)
        }
        DecoderArg::Tensor(a) => {
            let tensor = TensorSpec {
                dtype: OutDType::from_code(&a.dtype)?,
                shape: a
                    .dims
                    .into_iter()
                    .map(|d| d.map_or(Dim::Any, Dim::Fixed))
                    .collect(),
                max_shape: a.max_shape,
            };
            (Transform::Tensor(tensor), a.skip_errors)
        }
    };
    Ok(DecoderConfig {
        transform,
        skip_errors,
    })
}
