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

use numpy::npyffi::{get_type_object, npy_intp, NpyTypes, PyArrayObject, NPY_ARRAY_WRITEABLE};
use numpy::{Element, PyArrayDescr, PyArrayDescrMethods, PY_ARRAY_API};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::errors::JaxrecError;
use super::parser::{array, data_array, skip_list};
use crate::alloc::spares::{self, Spare};
use crate::column::{Column, ColumnData};
use crate::error::{Error, Location};

/// `jaxrec._parse.BatchOutput`: one array of the finished batch.
#[derive(FromPyObject)]
pub(super) struct OutputArg {
    key: Py<PyString>,
    /// The column it comes from: the context's (or the Example's) in spec order, then a
    /// SequenceExample's feature lists.
    column: usize,
    /// "values", "lengths", "shapes", "valid" or "steps" (a feature list's steps per row).
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
    Steps,
}

struct Output {
    key: Py<PyString>,
    column: usize,
    part: Part,
    row_shape: Vec<usize>,
    /// The array's shape: the batch size, then `row_shape` (made once, not per batch).
    dims: Vec<usize>,
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
    /// Checks the form against a parser whose parses give `columns` columns.
    pub(super) fn new(arg: FormArg, columns: usize) -> PyResult<Self> {
        let mut seen = std::collections::HashSet::new();
        let mut outputs = Vec::with_capacity(arg.outputs.len());
        for o in arg.outputs {
            let part = match o.part.as_str() {
                "values" => Part::Values,
                "lengths" => Part::Lengths,
                "shapes" => Part::Shapes,
                "valid" => Part::Valid,
                "steps" => Part::Steps,
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
            let dims = std::iter::once(arg.batch_size)
                .chain(o.row_shape.iter().copied())
                .collect();
            outputs.push(Output {
                key: o.key,
                column: o.column,
                part,
                row_shape: o.row_shape,
                dims,
                view: o.view,
            });
        }
        Ok(BatchForm {
            batch_size: arg.batch_size,
            mask_key: arg.mask_key,
            outputs,
        })
    }

    /// Builds the batch of `real` records from its padded columns (see [`Column::pad_rows`];
    /// the context's, then the feature lists'), plus what Python counts: `(feature,
    /// truncated, skipped, skips)` for each column that truncated or skipped rows. `name(i)`
    /// names column `i`'s feature, and `locate(row)` a skipped row's record.
    pub(super) fn finish<'py, 's>(
        &self,
        py: Python<'py>,
        columns: Vec<Column<'_>>,
        real: usize,
        name: &dyn Fn(usize) -> &'s str,
        locate: &dyn Fn(usize) -> Option<Location>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyList>)> {
        let notes = PyList::empty(py);
        let mut parts: Vec<Parts<'_>> = Vec::with_capacity(columns.len());
        for (i, col) in columns.into_iter().enumerate() {
            if col.truncated > 0 || col.skipped > 0 {
                let feature = name(i);
                let skips = skip_list(py, &col.skips, feature, locate)?;
                notes.append((feature, col.truncated, col.skipped, skips))?;
            }
            parts.push(Parts::from(col));
        }
        // The small arrays (most of a tabular batch's: 40 of 1-2 KiB) share one base object,
        // made once their memory is all in it; the others are made as they come.
        let mut small = SmallArrays::default();
        let mut made: Vec<Made<'py>> = Vec::with_capacity(self.outputs.len() + 1);
        for o in &self.outputs {
            let p = &mut parts[o.column];
            let missing = || {
                Error::internal(format!(
                    "column {} has no part the batch form names (key {})",
                    o.column, o.key
                ))
            };
            let dims = &o.dims;
            let m = match o.part {
                Part::Values => {
                    let (data, shape, reusable) = p.values.take().ok_or_else(missing)?;
                    let rows = shape.first().copied().unwrap_or(0);
                    let per_row: usize = shape.iter().skip(1).product();
                    if rows != self.batch_size || per_row != o.row_shape.iter().product::<usize>() {
                        return Err(self.recompile(py, o, &format!("shape {shape:?}")));
                    }
                    small.values(py, data, dims, reusable)?
                }
                Part::Lengths => {
                    let v = p.lengths.take().ok_or_else(missing)?;
                    small
                        .flat(py, v, dims)
                        .ok_or_else(|| self.recompile(py, o, "lengths"))??
                }
                Part::Shapes => {
                    let v = p.shapes.take().ok_or_else(missing)?;
                    small
                        .flat(py, v, dims)
                        .ok_or_else(|| self.recompile(py, o, "shapes"))??
                }
                Part::Valid => {
                    let v = p.valid.take().ok_or_else(missing)?;
                    small
                        .flat(py, v, dims)
                        .ok_or_else(|| self.recompile(py, o, "valid flags"))??
                }
                Part::Steps => {
                    // int32 as Python's path gives them; at most max_len, which fits.
                    let v: Vec<i32> = p
                        .steps
                        .take()
                        .ok_or_else(missing)?
                        .into_iter()
                        .map(|s| i32::try_from(s).unwrap_or(i32::MAX))
                        .collect();
                    small
                        .flat(py, v, dims)
                        .ok_or_else(|| self.recompile(py, o, "step counts"))??
                }
            };
            made.push(m);
        }
        let mut mask = vec![false; self.batch_size];
        mask[..real.min(self.batch_size)].fill(true);
        let mask = small.flat(py, mask, &[self.batch_size]);
        made.push(mask.ok_or_else(|| Error::internal("a mask of another size"))??);
        let arrays = small.arrays(py, made)?;
        let batch = PyDict::new(py);
        let (mask, arrays) = arrays
            .split_last()
            .ok_or_else(|| Error::internal("no mask"))?;
        for (o, arr) in self.outputs.iter().zip(arrays) {
            match &o.view {
                Some(dtype) => batch.set_item(
                    &o.key,
                    arr.call_method1(pyo3::intern!(py, "view"), (dtype,))?,
                )?,
                None => batch.set_item(&o.key, arr)?,
            }
        }
        batch.set_item(&self.mask_key, mask)?;
        Ok((batch, notes))
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
    steps: Option<Vec<i64>>,
}

impl<'a> From<Column<'a>> for Parts<'a> {
    fn from(col: Column<'a>) -> Self {
        Parts {
            values: Some((col.data, col.shape, col.reusable)),
            lengths: col.lengths,
            shapes: col.shapes,
            valid: col.valid,
            steps: col.steps,
        }
    }
}

/// An array of the finished batch: made already, or the `i`-th of the small ones, made once
/// their shared base holds all their memory ([`SmallArrays::arrays`]).
enum Made<'py> {
    Array(Bound<'py, PyAny>),
    Small(usize),
}

/// A small array waiting for its base: where its values are, its dtype and its shape.
struct Pending<'py> {
    data: *mut u8,
    dtype: Bound<'py, PyArrayDescr>,
    /// Its shape: the first `nd` (no allocation for it).
    dims: [npy_intp; MAX_SMALL_DIMS],
    nd: usize,
}

/// Dimensions a small array may have (a batch's arrays have 1 to 3 or so; more are made
/// apart).
const MAX_SMALL_DIMS: usize = 8;

/// The memory under a finished batch's small arrays (below `spares::MIN_BYTES`: columns of
/// scalars, lengths, the mask), their one base object: freed when the last of them is.
///
/// Made one by one, each array had an owner of its own (rust-numpy's container, after an
/// `ndarray` of dynamic shape to describe it): on 41 arrays of a tabular batch that was most of
/// the consumer thread's time in the call that hands it the batch, under the GIL.
#[pyclass(module = "jaxrec._native", frozen)]
pub(super) struct BatchParts {
    _memory: Vec<Spare>,
}

/// The small arrays of one finished batch, gathered before their base is made.
#[derive(Default)]
struct SmallArrays<'py> {
    memory: Vec<Spare>,
    pending: Vec<Pending<'py>>,
}

impl<'py> SmallArrays<'py> {
    /// A column's values: kept for the shared base when small and numeric, else made now
    /// (large ones lend their memory to the next batch, see `parser::data_array`).
    fn values(
        &mut self,
        py: Python<'py>,
        mut data: ColumnData<'_>,
        dims: &[usize],
        reusable: bool,
    ) -> PyResult<Made<'py>> {
        let kept = match &mut data {
            ColumnData::I8(v) => self.keep(py, v, dims),
            ColumnData::I16(v) => self.keep(py, v, dims),
            ColumnData::I32(v) => self.keep(py, v, dims),
            ColumnData::I64(v) => self.keep(py, v, dims),
            ColumnData::U8(v) => self.keep(py, v, dims),
            // float16 and bfloat16 as their uint16 bit patterns (viewed as such in `finish`).
            ColumnData::U16(v) | ColumnData::F16(v) | ColumnData::BF16(v) => self.keep(py, v, dims),
            ColumnData::U32(v) => self.keep(py, v, dims),
            ColumnData::U64(v) => self.keep(py, v, dims),
            ColumnData::Bool(v) => self.keep(py, v, dims),
            ColumnData::F32(v) => self.keep(py, v, dims),
            ColumnData::F64(v) => self.keep(py, v, dims),
            ColumnData::Bytes(_) => None,
        };
        match kept {
            Some(i) => Ok(Made::Small(i)),
            None => data_array(py, data, dims, reusable).map(Made::Array),
        }
    }

    /// A part held flat, or `None` if `v` does not fill `dims`.
    fn flat<T: Element>(
        &mut self,
        py: Python<'py>,
        mut v: Vec<T>,
        dims: &[usize],
    ) -> Option<PyResult<Made<'py>>> {
        if v.len() != dims.iter().product::<usize>() {
            return None;
        }
        Some(match self.keep(py, &mut v, dims) {
            Some(i) => Ok(Made::Small(i)),
            None => array(py, v, dims).map(Made::Array),
        })
    }

    /// Moves `v` (filling `dims`) into the shared memory and returns its number; leaves it
    /// where it is not small, or allocated nothing (an empty array).
    fn keep<T: Element>(
        &mut self,
        py: Python<'py>,
        v: &mut Vec<T>,
        dims: &[usize],
    ) -> Option<usize> {
        let bytes = std::mem::size_of_val(v.as_slice());
        let fills = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) == Some(v.len());
        if bytes >= spares::MIN_BYTES || !fills || dims.len() > MAX_SMALL_DIMS || v.capacity() == 0
        {
            return None;
        }
        let mut np_dims = [0 as npy_intp; MAX_SMALL_DIMS];
        for (to, &d) in np_dims.iter_mut().zip(dims) {
            // Within isize: the dims multiply to the length of a Vec.
            *to = d as npy_intp;
        }
        // Some: a Vec with capacity owns an allocation.
        let memory = Spare::from_vec(std::mem::take(v))?;
        self.pending.push(Pending {
            data: memory.as_ptr(),
            dtype: T::get_dtype(py),
            dims: np_dims,
            nd: dims.len(),
        });
        self.memory.push(memory);
        Some(self.pending.len() - 1)
    }

    /// Every array, in order: the small ones made now over their shared base.
    fn arrays(self, py: Python<'py>, made: Vec<Made<'py>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let SmallArrays { memory, pending } = self;
        let mut small: Vec<Option<Bound<'py, PyAny>>> = Vec::with_capacity(pending.len());
        if !pending.is_empty() {
            // Dropped on failure: the memory is freed with it.
            let base = Bound::new(py, BatchParts { _memory: memory })?.into_any();
            for p in pending {
                small.push(Some(over_base(py, p, &base)?));
            }
        }
        made.into_iter()
            .map(|m| match m {
                Made::Array(a) => Ok(a),
                Made::Small(i) => small.get_mut(i).and_then(Option::take).ok_or_else(|| {
                    Error::internal("a small array taken twice or never made").into()
                }),
            })
            .collect()
    }
}

/// A writable, C-contiguous array over `p`'s values, whose base object is `base` (which owns
/// that memory).
fn over_base<'py>(
    py: Python<'py>,
    mut p: Pending<'py>,
    base: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // At most MAX_SMALL_DIMS.
    let nd = p.nd as std::ffi::c_int;
    // SAFETY: `p.data` points at the values of an allocation `base` owns (through its
    // `BatchParts`), as many as the dims multiply to (`SmallArrays::keep` checked), aligned
    // for the dtype (a Vec of its element type). NewFromDescr steals the dtype reference
    // (`into_dtype_ptr` made one) and, given data and no strides, describes it C-contiguous
    // without copying or owning it; SetBaseObject steals the reference `into_ptr` made, on
    // failure too; the array then owns nothing, and dropping it frees nothing of the base's.
    unsafe {
        let arr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            get_type_object(py, NpyTypes::PyArray_Type),
            p.dtype.into_dtype_ptr(),
            nd,
            p.dims.as_mut_ptr(),
            std::ptr::null_mut(),
            p.data.cast(),
            NPY_ARRAY_WRITEABLE,
            std::ptr::null_mut(),
        );
        if arr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let arr = Bound::from_owned_ptr(py, arr);
        let owner = base.clone().into_ptr();
        if PY_ARRAY_API.PyArray_SetBaseObject(py, arr.as_ptr().cast::<PyArrayObject>(), owner) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}
