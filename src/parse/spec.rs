//! A feature spec compiled for the parser: what each requested feature is read from, into
//! which dtype and shape, and a hash table from feature name to slot. Built once per spec
//! (`jaxrec/_spec.py` validates the user's spec and passes the reduced form here).

use rustc_hash::FxHashMap;

use crate::decode::spec::{DecoderConfig, Dim, ShapeFrom, Transform};
use crate::dtype::OutDType;
use crate::error::{Error, Result};
use crate::wire::Wire;

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
                return Err(Error::internal(format!(
                    "feature {:?}: default/padding values do not match its dtype or shape",
                    f.name
                )));
            }
            if f.kind == Kind::Sequence && f.n == 0 {
                return Err(Error::internal(format!(
                    "feature {:?}: a sequence step must hold at least one value",
                    f.name
                )));
            }
            if lookup.insert(f.name.as_bytes().into(), i).is_some() {
                return Err(Error::internal(format!(
                    "feature {:?} is listed twice",
                    f.name
                )));
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
                return Err(Error::internal(format!(
                    "decoder for feature #{i}, which does not exist"
                )));
            };
            if f.kind != Kind::Fixed || f.dtype != OutDType::Bytes || f.n != 1 {
                return Err(Error::internal(format!(
                    "feature {:?}: only a scalar bytes feature can be decoded",
                    f.name
                )));
            }
            let name = f.name.clone();
            match &mut dec.transform {
                Transform::Raw(raw) => {
                    if raw.dtype == OutDType::Bytes {
                        return Err(Error::internal(format!(
                            "feature {name:?}: raw bytes decode to a numeric dtype"
                        )));
                    }
                    match &mut raw.shape {
                        ShapeFrom::Dims(dims) => {
                            if dims.iter().filter(|d| **d == Dim::Infer).count() > 1 {
                                return Err(Error::internal(format!(
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
                        return Err(Error::internal(format!(
                            "feature {name:?}: a tensor's dims are sizes or any"
                        )));
                    }
                    check_max_shape(&name, t.shape.len(), t.max_shape.as_deref())?;
                }
                Transform::Image(img) => {
                    if !matches!(img.channels, 1 | 3 | 4) || img.height == 0 || img.width == 0 {
                        return Err(Error::internal(format!("feature {name:?}: an image shape is (height > 0, width > 0, 1 | 3 | 4)")));
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
        Some(m) if m.len() != ndim => Err(Error::internal(format!(
            "feature {name:?}: max_shape has {} dims but the shape has {ndim}",
            m.len()
        ))),
        _ => Ok(()),
    }
}
