//! Errors across the boundary: [`Error`] to the classes of `jaxrec.errors`.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{Error, Location};

/// Raises `jaxrec.errors.<class>(detail, **location)`.
pub(super) fn located(
    py: Python<'_>,
    class: &str,
    detail: String,
    loc: &Location,
    feature: Option<&str>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("jaxrec.errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("path", loc.path.as_deref())?;
        kwargs.set_item("record_index", loc.record_index)?;
        kwargs.set_item("byte_offset", loc.byte_offset)?;
        kwargs.set_item("feature", feature)?;
        Ok(PyErr::from_value(cls.call((detail,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

/// Maps an [`Error`] to its `jaxrec.errors` class (OS errors stay `OSError`).
pub(super) fn to_pyerr(py: Python<'_>, err: Error) -> PyErr {
    match err {
        Error::Corrupt { loc, detail } => located(py, "CorruptRecordError", detail, &loc, None),
        Error::Truncated { loc, detail } => located(py, "TruncatedRecordError", detail, &loc, None),
        Error::Parse {
            row,
            feature,
            detail,
        } => {
            let loc = Location {
                path: None,
                record_index: Some(row as u64),
                byte_offset: None,
            };
            located(py, "ExampleParseError", detail, &loc, feature.as_deref())
        }
        Error::Spec(detail) => {
            let build = || -> PyResult<PyErr> {
                let cls = py.import("jaxrec.errors")?.getattr("FeatureSpecError")?;
                Ok(PyErr::from_value(cls.call1((detail.clone(),))?))
            };
            build().unwrap_or_else(|e| e)
        }
        Error::Io { path, source } => {
            let errno = source.raw_os_error();
            let msg = source.to_string();
            match (errno, path) {
                (Some(code), Some(p)) => PyOSError::new_err((code, msg, p)),
                (_, Some(p)) => PyOSError::new_err(format!("{p}: {msg}")),
                _ => PyOSError::new_err(msg),
            }
        }
    }
}

/// Raises `jaxrec.errors.<class>(detail)` with no location.
pub(super) fn plain_error(py: Python<'_>, class: &str, detail: String) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("jaxrec.errors")?.getattr(class)?;
        Ok(PyErr::from_value(cls.call1((detail,))?))
    };
    build().unwrap_or_else(|e| e)
}
