//! The output dtypes a spec may ask for, shared by the parser and the decoders.
//!
//! A dtype crosses the Python boundary as a short code (`jaxrec/_spec.py`'s `dtype_code`):
//! numpy's `i1 i2 i4 i8 u1 u2 u4 u8 b1 f2 f4 f8`, plus `bf2` (bfloat16) and `bytes`.

use crate::error::{Error, Result};
use crate::wire::Wire;

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
    /// Every output dtype.
    pub const ALL: [OutDType; 14] = [
        OutDType::I8,
        OutDType::I16,
        OutDType::I32,
        OutDType::I64,
        OutDType::U8,
        OutDType::U16,
        OutDType::U32,
        OutDType::U64,
        OutDType::Bool,
        OutDType::F16,
        OutDType::BF16,
        OutDType::F32,
        OutDType::F64,
        OutDType::Bytes,
    ];

    /// Parses the codes `jaxrec/_spec.py` uses. An unknown code breaks the boundary contract.
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
            other => return Err(Error::internal(format!("unknown dtype code {other:?}"))),
        })
    }

    /// The list of `tf.train.Feature` a value of this dtype is read from.
    pub fn wire(self) -> Wire {
        match self {
            OutDType::Bytes => Wire::Bytes,
            OutDType::F16 | OutDType::BF16 | OutDType::F32 | OutDType::F64 => Wire::Float,
            _ => Wire::Int64,
        }
    }

    /// The name messages use: numpy's, and TensorFlow's `string` for bytes.
    pub fn name(self) -> &'static str {
        match self {
            OutDType::I8 => "int8",
            OutDType::I16 => "int16",
            OutDType::I32 => "int32",
            OutDType::I64 => "int64",
            OutDType::U8 => "uint8",
            OutDType::U16 => "uint16",
            OutDType::U32 => "uint32",
            OutDType::U64 => "uint64",
            OutDType::Bool => "bool",
            OutDType::F16 => "float16",
            OutDType::BF16 => "bfloat16",
            OutDType::F32 => "float32",
            OutDType::F64 => "float64",
            OutDType::Bytes => "string",
        }
    }

    /// Bytes per element as stored (raw bytes, `tensor_content`); 0 for bytes.
    pub fn size(self) -> usize {
        match self {
            OutDType::I8 | OutDType::U8 | OutDType::Bool => 1,
            OutDType::I16 | OutDType::U16 | OutDType::F16 | OutDType::BF16 => 2,
            OutDType::I32 | OutDType::U32 | OutDType::F32 => 4,
            OutDType::I64 | OutDType::U64 | OutDType::F64 => 8,
            OutDType::Bytes => 0,
        }
    }
}
