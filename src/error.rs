//! The one error type of the native core. `python.rs` maps each variant to a class of
//! `jaxrec.errors`; nothing here knows about Python.

use std::fmt;

/// Where in a file a record starts: enough for a user to find it with `dd` or a hex editor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file the record was read from, if it came from a file.
    pub path: Option<String>,
    /// 0-based index of the record in its file (or in its batch for in-memory input).
    pub record_index: Option<u64>,
    /// Offset of the record's header; in the decompressed stream for GZIP/ZLIB files.
    pub byte_offset: Option<u64>,
}

/// Everything that can go wrong in the native core.
#[derive(Debug)]
pub enum Error {
    /// TFRecord framing is broken (CRC mismatch, impossible length, bad compressed stream).
    Corrupt { loc: Location, detail: String },
    /// The file ends inside a record or a compressed stream.
    Truncated { loc: Location, detail: String },
    /// A record does not parse against the spec. `row` is the record's index in the batch.
    Parse {
        row: usize,
        feature: Option<String>,
        detail: String,
    },
    /// The compiled spec is inconsistent (caught in Python first; this is the backstop).
    Spec(String),
    /// An operating-system error (missing file, permissions); stays a builtin `OSError`.
    Io {
        path: Option<String>,
        source: std::io::Error,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A parse error about `feature` of batch row `row`.
    pub fn parse(row: usize, feature: &str, detail: impl Into<String>) -> Self {
        Error::Parse {
            row,
            feature: Some(feature.to_owned()),
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(p) = &self.path {
            parts.push(p.clone());
        }
        if let Some(i) = self.record_index {
            parts.push(format!("record {i}"));
        }
        if let Some(o) = self.byte_offset {
            parts.push(format!("byte offset {o}"));
        }
        write!(f, "{}", parts.join(", "))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt { loc, detail } | Error::Truncated { loc, detail } => {
                write!(f, "{loc}: {detail}")
            }
            Error::Parse {
                row,
                feature,
                detail,
            } => match feature {
                Some(name) => write!(f, "record {row}, feature {name:?}: {detail}"),
                None => write!(f, "record {row}: {detail}"),
            },
            Error::Spec(detail) => write!(f, "invalid spec: {detail}"),
            Error::Io { path, source } => match path {
                Some(p) => write!(f, "{p}: {source}"),
                None => write!(f, "{source}"),
            },
        }
    }
}

impl std::error::Error for Error {}
