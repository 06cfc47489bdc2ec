//! The one error type of the native core. `python/errors.rs` maps each variant to a class of
//! `jaxrec.errors` (in one place); nothing here knows about Python.
//!
//! Errors about data carry where it happened as fields: a [`Location`] (file, record, byte
//! offset) and, for parse errors, the feature. Messages say what was expected and what was
//! found; the location is added when the error is shown, so no caller parses it back out.

use std::fmt;

/// Where a record is: enough for a user to find it with `dd` or a hex editor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file the record was read from, if it came from a file.
    pub path: Option<String>,
    /// 0-based index of the record in its file (or in its batch for in-memory input).
    pub record_index: Option<u64>,
    /// Offset of the record's header; in the decompressed stream for GZIP/ZLIB files.
    pub byte_offset: Option<u64>,
}

impl Location {
    /// The location of row `row` of an in-memory batch: its index and nothing else.
    pub fn row(row: usize) -> Self {
        Location {
            record_index: Some(row as u64),
            ..Location::default()
        }
    }
}

/// Everything that can go wrong in the native core.
#[derive(Debug)]
pub enum Error {
    /// TFRecord framing is broken (CRC mismatch, impossible length, bad compressed stream).
    Corrupt {
        /// The record whose header or payload is bad.
        loc: Location,
        /// What was expected and what was found.
        detail: String,
    },
    /// The file ends inside a record or a compressed stream.
    Truncated {
        /// The record that is cut short.
        loc: Location,
        /// What was expected and what was found.
        detail: String,
    },
    /// A record, or a single encoded value, does not parse against the spec. Until the
    /// boundary maps batch rows to files ([`Error::relocate`]), `loc.record_index` is the row
    /// in the batch; a single value (`decode_image`, `parse_tensor`) has no location.
    Parse {
        /// The record.
        loc: Location,
        /// The feature, when the error is about one.
        feature: Option<String>,
        /// What was expected and what was found.
        detail: String,
    },
    /// A value cannot be encoded (an image of the wrong size for its format, say).
    Encode {
        /// What was wrong with it.
        detail: String,
    },
    /// A setting the user chose is invalid: an unknown compression name, or a spec whose
    /// padded output would be too large for the batch it meets.
    Spec {
        /// The feature, when the setting is one feature's.
        feature: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// A bug in jaxrec, never the user's data: a spec `jaxrec/_spec.py` should have refused
    /// reached the native compiler (see `parse/spec.rs`'s boundary contract), or a lock was
    /// poisoned by an earlier panic.
    Internal(String),
    /// An operating-system error (missing file, permissions); stays a builtin `OSError`.
    Io {
        /// The file, when known.
        path: Option<String>,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A parse error about `feature` of batch row `row`.
    pub fn parse(row: usize, feature: &str, detail: impl Into<String>) -> Self {
        Error::Parse {
            loc: Location::row(row),
            feature: Some(feature.to_owned()),
            detail: detail.into(),
        }
    }

    /// A single value that does not decode (no record, no feature).
    pub fn decode(detail: impl Into<String>) -> Self {
        Error::Parse {
            loc: Location::default(),
            feature: None,
            detail: detail.into(),
        }
    }

    /// A value that cannot be encoded.
    pub fn encode(detail: impl Into<String>) -> Self {
        Error::Encode {
            detail: detail.into(),
        }
    }

    /// An invalid setting, of `feature` if given.
    pub fn spec(feature: Option<&str>, detail: impl Into<String>) -> Self {
        Error::Spec {
            feature: feature.map(str::to_owned),
            detail: detail.into(),
        }
    }

    /// A broken invariant (a bug in jaxrec).
    pub fn internal(detail: impl Into<String>) -> Self {
        Error::Internal(detail.into())
    }

    /// What went wrong, without the location.
    pub fn detail(&self) -> String {
        match self {
            Error::Corrupt { detail, .. }
            | Error::Truncated { detail, .. }
            | Error::Parse { detail, .. }
            | Error::Encode { detail }
            | Error::Spec { detail, .. } => detail.clone(),
            Error::Internal(detail) => detail.clone(),
            Error::Io { source, .. } => source.to_string(),
        }
    }

    /// Rewrites a parse error's batch row into where that record really is (`locate(row)`:
    /// its file, index in the file and byte offset), keeping what `locate` leaves unknown.
    pub fn relocate(self, locate: impl FnOnce(usize) -> Option<Location>) -> Self {
        match self {
            Error::Parse {
                loc,
                feature,
                detail,
            } => {
                let row = loc.record_index.and_then(|r| usize::try_from(r).ok());
                let loc = match row.and_then(locate) {
                    Some(new) => Location {
                        path: new.path.or(loc.path),
                        record_index: new.record_index.or(loc.record_index),
                        byte_offset: new.byte_offset.or(loc.byte_offset),
                    },
                    None => loc,
                };
                Error::Parse {
                    loc,
                    feature,
                    detail,
                }
            }
            other => other,
        }
    }
}

/// Which variant an [`Error`] is, without its data: what a skipped record would have raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// [`Error::Corrupt`].
    Corrupt,
    /// [`Error::Truncated`].
    Truncated,
    /// [`Error::Parse`].
    Parse,
    /// [`Error::Encode`].
    Encode,
    /// [`Error::Spec`].
    Spec,
    /// [`Error::Internal`].
    Internal,
    /// [`Error::Io`].
    Io,
}

impl Error {
    /// The variant.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Truncated { .. } => ErrorKind::Truncated,
            Error::Parse { .. } => ErrorKind::Parse,
            Error::Encode { .. } => ErrorKind::Encode,
            Error::Spec { .. } => ErrorKind::Spec,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// The record this error would have failed, as skipped under `on_error="skip"`.
    pub fn to_skip(&self) -> Skip {
        let (loc, feature) = match self {
            Error::Corrupt { loc, .. } | Error::Truncated { loc, .. } => (loc.clone(), None),
            Error::Parse { loc, feature, .. } => (loc.clone(), feature.clone()),
            Error::Io { path, .. } => (
                Location {
                    path: path.clone(),
                    ..Location::default()
                },
                None,
            ),
            Error::Spec { feature, .. } => (Location::default(), feature.clone()),
            Error::Encode { .. } | Error::Internal(_) => (Location::default(), None),
        };
        Skip {
            kind: self.kind(),
            loc,
            feature,
            reason: self.detail(),
        }
    }
}

/// A record (or a row of a decoded column) skipped under `on_error="skip"` instead of failing:
/// the error it would have raised, where it is, and why — the fields of that error, so no
/// caller needs to parse them back out of a message. Shown, it reads as that error's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// The error it would have raised.
    pub kind: ErrorKind,
    /// Where the record is.
    pub loc: Location,
    /// The feature, for a row of a decoded column.
    pub feature: Option<String>,
    /// What was expected and what was found.
    pub reason: String,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.loc, self.feature.as_deref(), &self.reason)
    }
}

/// Writes `where: detail` the way `jaxrec.errors` composes its messages: the file, `record N`,
/// `byte offset N` and `feature 'name'` that are known, or the detail alone.
pub(crate) fn write_located(
    f: &mut fmt::Formatter<'_>,
    loc: &Location,
    feature: Option<&str>,
    detail: &str,
) -> fmt::Result {
    let mut parts = Vec::new();
    if let Some(p) = &loc.path {
        parts.push(p.clone());
    }
    if let Some(i) = loc.record_index {
        parts.push(format!("record {i}"));
    }
    if let Some(o) = loc.byte_offset {
        parts.push(format!("byte offset {o}"));
    }
    if let Some(name) = feature {
        parts.push(format!("feature '{name}'"));
    }
    if parts.is_empty() {
        write!(f, "{detail}")
    } else {
        write!(f, "{}: {detail}", parts.join(", "))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt { loc, detail } | Error::Truncated { loc, detail } => {
                write_located(f, loc, None, detail)
            }
            Error::Parse {
                loc,
                feature,
                detail,
            } => write_located(f, loc, feature.as_deref(), detail),
            Error::Encode { detail } => write!(f, "{detail}"),
            Error::Spec { feature, detail } => match feature {
                Some(name) => write!(f, "feature {name:?}: {detail}"),
                None => write!(f, "{detail}"),
            },
            Error::Internal(detail) => write!(f, "jaxrec internal error: {detail}"),
            Error::Io { path, source } => match path {
                Some(p) => write!(f, "{p}: {source}"),
                None => write!(f, "{source}"),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_what_is_known() {
        let loc = Location {
            path: Some("a.tfrecord".into()),
            record_index: Some(3),
            byte_offset: Some(120),
        };
        let e = Error::Corrupt {
            loc,
            detail: "data CRC mismatch".into(),
        };
        assert_eq!(
            e.to_string(),
            "a.tfrecord, record 3, byte offset 120: data CRC mismatch"
        );
        assert_eq!(
            Error::decode("empty image bytes").to_string(),
            "empty image bytes"
        );
        assert_eq!(
            Error::parse(2, "x", "missing").to_string(),
            "record 2, feature 'x': missing"
        );
    }

    #[test]
    fn relocate_maps_the_batch_row() {
        let e = Error::parse(1, "x", "bad").relocate(|row| {
            assert_eq!(row, 1);
            Some(Location {
                path: Some("f".into()),
                record_index: Some(41),
                byte_offset: Some(900),
            })
        });
        match e {
            Error::Parse { loc, feature, .. } => {
                assert_eq!(loc.path.as_deref(), Some("f"));
                assert_eq!((loc.record_index, loc.byte_offset), (Some(41), Some(900)));
                assert_eq!(feature.as_deref(), Some("x"));
            }
            other => panic!("{other:?}"),
        }
        // Framing errors already name their file and are left alone.
        let e = Error::Corrupt {
            loc: Location::row(1),
            detail: String::new(),
        };
        assert!(matches!(e.relocate(|_| None), Error::Corrupt { .. }));
    }
}
