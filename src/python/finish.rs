//! [`BatchForm`]: the Loader's finished batch made from a parse in one native call.
//!
//! Without it the consumer thread turned each parse into its batch in Python: a loop over the
//! columns that reshaped them and named their parts (`jaxrec/_parse.py` `_columns`), then one
//! that padded them to the batch size and checked them against the first batch (`Batcher`).
//! With 40 features that was most of the consumer's time per batch, under the GIL that every
//! other thread of the Loader waits for. Here the parse thread pads the columns (no GIL), and
//! one call builds the batch dict, in the order and with the names Python gave.
//!
//! Python (`RowsQueue`) derives the form from the spec and the Loader's template (a parse of
//! no records), and is the one place that knows the output names: this module only moves the
//! parts of columns into arrays of the shapes it is told.

use numpy::{Element, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::errors::JaxrecError;
use super::parser::{array, data_array, skip_list};
use crate::column::{Column, ColumnData};
use crate::error::{Error, Location};
use crate::parse::spec::CompiledSpec;

/// `jaxrec._parse.BatchOutput`: one array of the finished batch.
#[derive(FromPyObject)]
pub(super) struct OutputArg {
    key: Py<PyString>,
    /// The context column it comes from.
    column: usize,
    /// "values", "lengths", "shapes" or "valid".
    part: String,
    /// Its shape after the batch dimension.
    row_shape: Vec<usize>,
    /// The dtype to view bit patterns as (float16, bfloat16), or `None`.
    view: Option<Py<PyAny>>,
}

/// `jaxrec._parse.BatchForm`.
#[derive(FromPyObject)]
pub(super) struct FormArg {
    batch_size: usize,
    mask_key: Py<PyString>,
    outputs: Vec<OutputArg>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Values,
    Lengths,
    Shapes,
    Valid,
}

struct Output {
    key: Py<PyString>,
    column: usize,
    part: Part,
    row_shape: Vec<usize>,
    view: Option<Py<PyAny>>,
}

/// The finished batch's arrays: which part of which column each is, in dict order.
pub(super) struct BatchForm {
    /// Rows of every batch; parses of fewer records are padded to it.
    pub(super) batch_size: usize,
    mask_key: Py<PyString>,
    outputs: Vec<Output>,
}

impl BatchForm {
    /// Checks the form against a parser with `columns` context columns.
    pub(super) fn new(arg: FormArg, columns: usize) -> PyResult<Self> {
        let mut seen = std::collections::HashSet::new();
        let mut outputs = Vec::with_capacity(arg.outputs.len());
        for o in arg.outputs {
            let part = match o.part.as_str() {
                "values" => Part::Values,
                "lengths" => Part::Lengths,
                "shapes" => Part::Shapes,
                "valid" => Part::Valid,
                other => return Err(Error::internal(format!("unknown part {other:?}")).into()),
            };
            // A part is moved into its array, so it can be named once.
            if o.column >= columns || !seen.insert((o.column, o.part.clone())) {
                return Err(Error::internal(format!(
                    "the batch form names column {} ({}) twice or out of {columns}",
                    o.column, o.part
                ))
                .into());
            }
            outputs.push(Output {
                key: o.key,
                column: o.column,
                part,
                row_shape: o.row_shape,
                view: o.view,
            });
        }
        Ok(BatchForm {
            batch_size: arg.batch_size,
            mask_key: arg.mask_key,
            outputs,
        })
    }

    /// Builds the batch of `real` records from its padded context columns (see
    /// [`Column::pad_rows`]), plus what Python counts: `(column, truncated, skipped, skips)`
    /// for each column that truncated or skipped rows. `spec` names the columns, and
    /// `locate(row)` a skipped row's record.
    pub(super) fn finish<'py>(
        &self,
        py: Python<'py>,
        columns: Vec<Column<'_>>,
        real: usize,
        spec: &CompiledSpec,
        locate: &dyn Fn(usize) -> Option<Location>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let notes = PyList::empty(py);
        let mut parts: Vec<Parts<'_>> = Vec::with_capacity(columns.len());
        for (i, col) in columns.into_iter().enumerate() {
            if col.truncated > 0 || col.skipped > 0 {
                let skips = skip_list(py, &col.skips, spec.name(i), locate)?;
                notes.append((i, col.truncated, col.skipped, skips))?;
            }
            parts.push(Parts::from(col));
        }
        let batch = PyDict::new(py);
        for o in &self.outputs {
            let p = &mut parts[o.column];
            let missing = || {
                Error::internal(format!(
                    "column {} has no part the batch form names (key {})",
                    o.column, o.key
                ))
            };
            let dims = self.dims(&o.row_shape);
            let arr = match o.part {
                Part::Values => {
                    let (data, shape, reusable) = p.values.take().ok_or_else(missing)?;
                    let rows = shape.first().copied().unwrap_or(0);
                    let per_row: usize = shape.iter().skip(1).product();
                    if rows != self.batch_size || per_row != o.row_shape.iter().product::<usize>() {
                        return Err(self.recompile(py, o, &format!("shape {shape:?}")));
                    }
                    data_array(py, data, &dims, reusable)?
                }
                Part::Lengths => flat_array(py, p.lengths.take().ok_or_else(missing)?, &dims)
                    .ok_or_else(|| self.recompile(py, o, "lengths"))??,
                Part::Shapes => flat_array(py, p.shapes.take().ok_or_else(missing)?, &dims)
                    .ok_or_else(|| self.recompile(py, o, "shapes"))??,
                Part::Valid => flat_array(py, p.valid.take().ok_or_else(missing)?, &dims)
                    .ok_or_else(|| self.recompile(py, o, "valid flags"))??,
            };
            let arr = match &o.view {
                Some(dtype) => arr.call_method1(pyo3::intern!(py, "view"), (dtype,))?,
                None => arr,
            };
            batch.set_item(&o.key, arr)?;
        }
        let mut mask = vec![false; self.batch_size];
        mask[..real.min(self.batch_size)].fill(true);
        batch.set_item(&self.mask_key, PyArray1::from_vec(py, mask))?;
        Ok((batch, notes))
    }

    fn dims(&self, row_shape: &[usize]) -> Vec<usize> {
        let mut dims = Vec::with_capacity(row_shape.len() + 1);
        dims.push(self.batch_size);
        dims.extend_from_slice(row_shape);
        dims
    }

    /// The error for an array that does not fill the first batch's shape (as `Batcher`
    /// raises: a batch of another shape would make XLA compile the step again, silently).
    fn recompile(&self, py: Python<'_>, o: &Output, found: &str) -> PyErr {
        let key = o
            .key
            .bind(py)
            .repr()
            .map_or_else(|_| "?".into(), |r| r.to_string());
        JaxrecError::new_err(format!(
            "batch array {key} has {found} after padding to {} rows, but the first batch had \
             rows of shape {:?}: refusing a silent recompile",
            self.batch_size, o.row_shape
        ))
    }
}

/// A column taken apart, each part moved out once into its array.
struct Parts<'a> {
    values: Option<(ColumnData<'a>, Vec<usize>, bool)>,
    lengths: Option<Vec<i32>>,
    shapes: Option<Vec<i32>>,
    valid: Option<Vec<bool>>,
}

impl<'a> From<Column<'a>> for Parts<'a> {
    fn from(col: Column<'a>) -> Self {
        Parts {
            values: Some((col.data, col.shape, col.reusable)),
            lengths: col.lengths,
            shapes: col.shapes,
            valid: col.valid,
        }
    }
}

/// [`array`] for a part held flat, or `None` if `v` does not fill `dims`.
fn flat_array<'py, T: Element>(
    py: Python<'py>,
    v: Vec<T>,
    dims: &[usize],
) -> Option<PyResult<Bound<'py, PyAny>>> {
    (v.len() == dims.iter().product::<usize>()).then(|| array(py, v, dims))
}
