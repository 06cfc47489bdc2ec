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

/// A validated list of features plus a name → slot table.
#[derive(Debug, Clone)]
pub struct CompiledSpec {
    /// Features in output order.
    pub features: Vec<FeatureConfig>,
    lookup: FxHashMap<Box<[u8]>, usize>,
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
        Ok(CompiledSpec { features, lookup })
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
