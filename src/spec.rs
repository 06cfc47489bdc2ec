//! A feature spec compiled for the parser: what each requested feature is read from, into
//! which dtype and shape, and a hash table from feature name to slot. Built once per spec
//! (`jaxrec/_spec.py` validates the user's spec and passes the reduced form here).

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

/// How a feature's values map to rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `FixedLenFeature`: exactly `n` values per record.
    Fixed,
    /// `VarLenFeature`: any number of values, padded to `max_len` (or the batch's longest).
    Var,
    /// `FixedLenSequenceFeature`: steps of `n` values, padded to `max_len` steps.
    Sequence,
}

/// Which list of `tf.train.Feature`'s oneof holds the values (field numbers 1, 2, 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `bytes_list = 1`.
    Bytes,
    /// `float_list = 2`.
    Float,
    /// `int64_list = 3`.
    Int64,
}

impl Wire {
    /// The name of the list in tf.train.Feature.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Bytes => "bytes_list",
            Wire::Float => "float_list",
            Wire::Int64 => "int64_list",
        }
    }
}

/// The output dtype of a feature (numpy's names in comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutDType {
    /// int8
    I8,
    /// int16
    I16,
    /// int32
    I32,
    /// int64
    I64,
    /// uint8
    U8,
    /// uint16
    U16,
    /// uint32
    U32,
    /// uint64
    U64,
    /// bool (values must be 0 or 1)
    Bool,
    /// float16
    F16,
    /// bfloat16
    BF16,
    /// float32
    F32,
    /// float64
    F64,
    /// bytes (numpy object array of Python bytes)
    Bytes,
}

impl OutDType {
    /// Parses the codes `jaxrec/_spec.py` uses.
    pub fn from_code(code: &str) -> Result<Self> {
        Ok(match code {
            "i1" => OutDType::I8,
            "i2" => OutDType::I16,
            "i4" => OutDType::I32,
            "i8" => OutDType::I64,
            "u1" => OutDType::U8,
            "u2" => OutDType::U16,
            "u4" => OutDType::U32,
            "u8" => OutDType::U64,
            "b1" => OutDType::Bool,
            "f2" => OutDType::F16,
            "bf2" => OutDType::BF16,
            "f4" => OutDType::F32,
            "f8" => OutDType::F64,
            "bytes" => OutDType::Bytes,
            other => return Err(Error::Spec(format!("unknown dtype code {other:?}"))),
        })
    }

    /// The list a value of this dtype is read from.
    pub fn wire(self) -> Wire {
        match self {
            OutDType::Bytes => Wire::Bytes,
            OutDType::F16 | OutDType::BF16 | OutDType::F32 | OutDType::F64 => Wire::Float,
            _ => Wire::Int64,
        }
    }
}

/// Default (FixedLen) or padding (Var/Sequence) values, flat.
#[derive(Debug, Clone, PartialEq)]
pub enum Defaults {
    /// No default: a missing FixedLen feature is an error.
    None,
    /// For integer and bool dtypes, already range-checked.
    Int(Vec<i64>),
    /// For float dtypes.
    Float(Vec<f64>),
    /// For bytes.
    Bytes(Vec<Vec<u8>>),
}

/// One requested feature.
#[derive(Debug, Clone)]
pub struct FeatureConfig {
    /// Feature name as stored in the record's map.
    pub name: String,
    /// Fixed, Var or Sequence.
    pub kind: Kind,
    /// Output dtype; its wire type is the list the values must come from.
    pub dtype: OutDType,
    /// Values per record (Fixed) or per step (Sequence); unused for Var.
    pub n: usize,
    /// Pad to this many values (Var) or steps (Sequence); `None` pads to the batch's longest.
    pub max_len: Option<usize>,
    /// Keep the first `max_len` of longer rows instead of failing.
    pub truncate: bool,
    /// Default values (Fixed, `n` of them) or the single padding value (Var, Sequence).
    pub defaults: Defaults,
    /// Sequence features of a SequenceExample: a missing feature list has 0 steps.
    pub allow_missing: bool,
}

impl FeatureConfig {
    /// The wire type the values must have.
    pub fn wire(&self) -> Wire {
        self.dtype.wire()
    }
}

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
        /// Its slot in the record scan, set by [`CompiledSpec::with_decoders`].
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
        /// Its slot in the record scan, set by [`CompiledSpec::with_decoders`].
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
    /// JPEG/PNG to a fixed-shape image ([`crate::image`]).
    Image(crate::image::ImageSpec),
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

/// A validated list of features plus a name → slot table.
#[derive(Debug, Clone)]
pub struct CompiledSpec {
    /// Features in output order.
    pub features: Vec<FeatureConfig>,
    lookup: FxHashMap<Box<[u8]>, usize>,
    /// Per feature, the decoder that turns its bytes into an array (see [`Self::with_decoders`]).
    pub decoders: Vec<Option<DecoderConfig>>,
    /// Features read only for their values (shape sources of raw tensors), in slots after the
    /// requested ones: `features.len() + i`.
    pub aux: Vec<String>,
}

impl CompiledSpec {
    /// Checks the configs for consistency and builds the name table.
    pub fn new(features: Vec<FeatureConfig>) -> Result<Self> {
        let mut lookup = FxHashMap::default();
        for (i, f) in features.iter().enumerate() {
            let ok_defaults = match (&f.defaults, f.wire()) {
                (Defaults::None, _) => f.kind == Kind::Fixed,
                (Defaults::Int(v), Wire::Int64) => {
                    v.len() == if f.kind == Kind::Fixed { f.n } else { 1 }
                }
                (Defaults::Float(v), Wire::Float) => {
                    v.len() == if f.kind == Kind::Fixed { f.n } else { 1 }
                }
                (Defaults::Bytes(v), Wire::Bytes) => {
                    v.len() == if f.kind == Kind::Fixed { f.n } else { 1 }
                }
                _ => false,
            };
            if !ok_defaults {
                return Err(Error::Spec(format!(
                    "feature {:?}: default/padding values do not match its dtype or shape",
                    f.name
                )));
            }
            if f.kind == Kind::Sequence && f.n == 0 {
                return Err(Error::Spec(format!(
                    "feature {:?}: a sequence step must hold at least one value",
                    f.name
                )));
            }
            if lookup.insert(f.name.as_bytes().into(), i).is_some() {
                return Err(Error::Spec(format!("feature {:?} is listed twice", f.name)));
            }
        }
        let decoders = vec![None; features.len()];
        Ok(CompiledSpec {
            features,
            lookup,
            decoders,
            aux: Vec::new(),
        })
    }

    /// Attaches decoders (`(feature index, decoder)`) to bytes features, and resolves the
    /// features their shapes are read from: a requested feature shares its slot, any other
    /// gets an extra slot that is scanned but not returned.
    pub fn with_decoders(mut self, decoders: Vec<(usize, DecoderConfig)>) -> Result<Self> {
        for (i, mut dec) in decoders {
            let Some(f) = self.features.get(i) else {
                return Err(Error::Spec(format!(
                    "decoder for feature #{i}, which does not exist"
                )));
            };
            if f.kind != Kind::Fixed || f.dtype != OutDType::Bytes || f.n != 1 {
                return Err(Error::Spec(format!(
                    "feature {:?}: only a scalar bytes feature can be decoded",
                    f.name
                )));
            }
            let name = f.name.clone();
            match &mut dec.transform {
                Transform::Raw(raw) => {
                    if raw.dtype == OutDType::Bytes {
                        return Err(Error::Spec(format!(
                            "feature {name:?}: raw bytes decode to a numeric dtype"
                        )));
                    }
                    match &mut raw.shape {
                        ShapeFrom::Dims(dims) => {
                            if dims.iter().filter(|d| **d == Dim::Infer).count() > 1 {
                                return Err(Error::Spec(format!(
                                    "feature {name:?}: at most one -1 in a shape"
                                )));
                            }
                            for d in dims.iter_mut() {
                                if let Dim::Feature { name, slot } = d {
                                    *slot = self.slot_for(name);
                                }
                            }
                        }
                        ShapeFrom::Feature { name, slot, .. } => *slot = self.slot_for(name),
                    }
                    check_max_shape(&name, raw.shape.ndim(), raw.max_shape.as_deref())?;
                }
                Transform::Tensor(t) => {
                    if t.shape
                        .iter()
                        .any(|d| !matches!(d, Dim::Fixed(_) | Dim::Any))
                    {
                        return Err(Error::Spec(format!(
                            "feature {name:?}: a tensor's dims are sizes or any"
                        )));
                    }
                    check_max_shape(&name, t.shape.len(), t.max_shape.as_deref())?;
                }
                Transform::Image(img) => {
                    if !matches!(img.channels, 1 | 3 | 4) || img.height == 0 || img.width == 0 {
                        return Err(Error::Spec(format!("feature {name:?}: an image shape is (height > 0, width > 0, 1 | 3 | 4)")));
                    }
                }
            }
            self.decoders[i] = Some(dec);
        }
        Ok(self)
    }

    fn slot_for(&mut self, name: &str) -> usize {
        if let Some(&slot) = self.lookup.get(name.as_bytes()) {
            return slot;
        }
        let slot = self.features.len() + self.aux.len();
        self.aux.push(name.to_owned());
        self.lookup.insert(name.as_bytes().into(), slot);
        slot
    }

    /// Slots a record scan fills: the features, then the auxiliary ones.
    pub fn slot_count(&self) -> usize {
        self.features.len() + self.aux.len()
    }

    /// The slot of feature `name`, if the spec asks for it.
    #[inline]
    pub fn slot(&self, name: &[u8]) -> Option<usize> {
        if self.features.is_empty() {
            return None;
        }
        self.lookup.get(name).copied()
    }

    /// Number of features.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    /// True for an empty spec.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }
}

fn check_max_shape(name: &str, ndim: usize, max_shape: Option<&[usize]>) -> Result<()> {
    match max_shape {
        Some(m) if m.len() != ndim => Err(Error::Spec(format!(
            "feature {name:?}: max_shape has {} dims but the shape has {ndim}",
            m.len()
        ))),
        _ => Ok(()),
    }
}
