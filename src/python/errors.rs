//! Errors across the boundary: the one conversion of [`Error`] into the classes of
//! `jaxrec/errors.py`, which are imported once here (`import_exception!`) and nowhere else.

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{Error, ErrorKind, Location, Skip};
use crate::records::compress::NotRegularFile;

pyo3::import_exception!(jaxrec.errors, CorruptRecordError);
pyo3::import_exception!(jaxrec.errors, TruncatedRecordError);
pyo3::import_exception!(jaxrec.errors, ExampleParseError);
pyo3::import_exception!(jaxrec.errors, FeatureSpecError);
pyo3::import_exception!(jaxrec.errors, EncodeError);
pyo3::import_exception!(jaxrec.errors, JaxrecError);
pyo3::import_exception!(jaxrec.errors, FileChangedError);

/// `import_exception!` imports a class the first time it is raised, and panics if that import
/// fails; importing `jaxrec.errors` when the module loads (where a failure is an ordinary
/// `ImportError`) makes those later imports look-ups in `sys.modules`, which cannot fail.
pub(super) fn preload(py: Python<'_>) -> PyResult<()> {
    py.import("jaxrec.errors").map(drop)
}

/// The arguments of a located error: `(detail, path, record_index, byte_offset, feature)`,
/// positionally as `jaxrec.errors._LocatedError.__init__` takes them.
type LocatedArgs = (
    String,
    Option<String>,
    Option<u64>,
    Option<u64>,
    Option<String>,
);

fn located(detail: String, loc: Location, feature: Option<String>) -> LocatedArgs {
    (detail, loc.path, loc.record_index, loc.byte_offset, feature)
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Corrupt { loc, detail } => {
                CorruptRecordError::new_err(located(detail, loc, None))
            }
            Error::Truncated { loc, detail } => {
                TruncatedRecordError::new_err(located(detail, loc, None))
            }
            Error::Parse {
                loc,
                feature,
                detail,
            } => ExampleParseError::new_err(located(detail, loc, feature)),
            Error::Encode { detail } => EncodeError::new_err(detail),
            err @ Error::Spec { .. } => FeatureSpecError::new_err(err.to_string()),
            err @ Error::Internal(_) => PyRuntimeError::new_err(format!(
                "{err} (this is a bug in jaxrec; please report it)"
            )),
            Error::Io { path, source } => {
                // A refused special file carries the errno it is raised with (EISDIR makes an
                // IsADirectoryError), beside a message that says what it is.
                let refused = source
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<NotRegularFile>());
                let errno = source.raw_os_error().or(refused.map(NotRegularFile::errno));
                let msg = source.to_string();
                match (errno, path) {
                    // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError…).
                    (Some(code), Some(p)) => PyOSError::new_err((code, msg, p)),
                    (_, Some(p)) => PyOSError::new_err(format!("{p}: {msg}")),
                    _ => PyOSError::new_err(msg),
                }
            }
        }
    }
}

/// A `FileChangedError`: `path` holds fewer records than the Loader counted, the first one
/// missing being `record_index`.
pub(super) fn file_changed(detail: String, path: &str, record_index: u64) -> PyErr {
    FileChangedError::new_err(located(
        detail,
        Location {
            path: Some(path.to_owned()),
            record_index: Some(record_index),
            byte_offset: None,
        },
        None,
    ))
}

/// The Python class [`From<Error> for PyErr`] raises for each kind, by name.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Corrupt => "CorruptRecordError",
        ErrorKind::Truncated => "TruncatedRecordError",
        ErrorKind::Parse => "ExampleParseError",
        ErrorKind::Encode => "EncodeError",
        ErrorKind::Spec => "FeatureSpecError",
        ErrorKind::Internal => "RuntimeError",
        ErrorKind::Io => "OSError",
    }
}

/// A skipped record for Python, the same shape wherever records are skipped:
///
/// ```text
/// {"error": "CorruptRecordError" | "TruncatedRecordError" | "ExampleParseError" | "OSError",
///  "path": str | None, "record_index": int | None, "byte_offset": int | None,
///  "feature": str | None, "row": int | None, "reason": str}
/// ```
///
/// `error` is the class raising would have used, `path`/`record_index`/`byte_offset`/`feature`
/// its attributes, `reason` its message without the location; `row` is the row in the parsed
/// batch (a skipped row of a decoded column; `None` for a record the reader skipped).
pub(super) fn skip_dict<'py>(
    py: Python<'py>,
    skip: &Skip,
    row: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("error", class_name(skip.kind))?;
    d.set_item("path", skip.loc.path.as_deref())?;
    d.set_item("record_index", skip.loc.record_index)?;
    d.set_item("byte_offset", skip.loc.byte_offset)?;
    d.set_item("feature", skip.feature.as_deref())?;
    d.set_item("row", row)?;
    d.set_item("reason", &skip.reason)?;
    Ok(d)
}
