//! What a bytes feature is decoded to after the record scan: an image, a raw tensor or a
//! serialized `TensorProto`, with the shape it must have. Compiled from `jaxrec/_spec.py`'s
//! decoder entries; the spec compiler (`parse::spec`) checks them and resolves the shape features to scan slots.

use crate::dtype::OutDType;

/// One dimension of the shape a bytes feature is decoded to (see [`crate::decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// Exactly this many.
    Fixed(usize),
    /// Whatever the byte count implies (`-1` in a reshape); at most one per shape.
    Infer,
    /// Any size (a serialized tensor's own shape says); padded in the output.
    Any,
    /// The single int64 value of another feature of the same record (e.g. `height`).
    Feature {
        /// That feature's name.
        name: String,
        /// Its slot in the record scan, set by the spec compiler (`CompiledSpec::with_decoders`).
        slot: usize,
    },
}

/// Where a raw tensor's shape comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeFrom {
    /// One [`Dim`] per axis.
    Dims(Vec<Dim>),
    /// Another feature holding the whole shape: an int64_list of `ndim` values, or one bytes
    /// value of `ndim` little-endian int32s (`np.array(shape, np.int32).tobytes()`).
    Feature {
        /// That feature's name.
        name: String,
        /// Its slot in the record scan, set by the spec compiler (`CompiledSpec::with_decoders`).
        slot: usize,
        /// Number of axes.
        ndim: usize,
    },
}

impl ShapeFrom {
    /// Number of axes of the decoded tensor.
    pub fn ndim(&self) -> usize {
        match self {
            ShapeFrom::Dims(d) => d.len(),
            ShapeFrom::Feature { ndim, .. } => *ndim,
        }
    }

    /// The slots of the features the shape is read from (set by the spec compiler).
    pub fn source_slots(&self) -> impl Iterator<Item = usize> + '_ {
        let (dims, whole) = match self {
            ShapeFrom::Dims(dims) => (&dims[..], None),
            ShapeFrom::Feature { slot, .. } => (&[][..], Some(*slot)),
        };
        let per_axis = dims.iter().filter_map(|d| match d {
            Dim::Feature { slot, .. } => Some(*slot),
            _ => None,
        });
        per_axis.chain(whole)
    }

    /// True when every axis has a size known from the spec alone.
    pub fn is_static(&self) -> bool {
        match self {
            ShapeFrom::Dims(d) => d.iter().all(|d| matches!(d, Dim::Fixed(_))),
            ShapeFrom::Feature { .. } => false,
        }
    }
}

/// `np.frombuffer(value, dtype).reshape(shape)` of a bytes feature (`tf.io.decode_raw`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSpec {
    /// Element type (any numeric dtype or bool; not bytes).
    pub dtype: OutDType,
    /// The shape, fixed or from other features.
    pub shape: ShapeFrom,
    /// Pad every row to this shape; `None` pads to the batch's largest (when not static).
    pub max_shape: Option<Vec<usize>>,
    /// Byte order of the stored elements.
    pub little_endian: bool,
}

/// A serialized `TensorProto` (`tf.io.serialize_tensor` / `tf.io.parse_tensor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// The dtype the proto must hold (bytes for `tf.string`).
    pub dtype: OutDType,
    /// The expected shape: `Fixed` or `Any` per axis.
    pub shape: Vec<Dim>,
    /// Pad every row to this shape; `None` pads to the batch's largest (when not static).
    pub max_shape: Option<Vec<usize>>,
}

/// What a bytes feature is decoded to after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    /// JPEG/PNG to a fixed-shape image ([`super::image`]).
    Image(super::image::ImageSpec),
    /// Raw bytes to a numeric tensor.
    Raw(RawSpec),
    /// A serialized TensorProto.
    Tensor(TensorSpec),
}

/// A [`Transform`] attached to one feature of a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The decoding to do.
    pub transform: Transform,
    /// A row whose bytes do not decode (missing, corrupt, wrong size) gets zeros and a `false`
    /// valid flag instead of failing the batch.
    pub skip_errors: bool,
}
