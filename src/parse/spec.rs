//! A feature spec compiled for the parser: what each requested feature is read from, into
//! which dtype and shape, and a hash table from feature name to slot. Built once per spec.
//!
//! # The boundary contract
//!
//! `jaxrec/_spec.py` is the one place for the rules users see (and their messages): it
//! validates the user's spec and passes the reduced form here. This compiler checks only the
//! invariants the parser's memory safety rests on, and refuses a spec that breaks one with an
//! [`Error::Internal`] (a bug in jaxrec, never the user's fault, and never a panic):
//!
//! - defaults: `None` only for fixed features; otherwise of the dtype's list type, `n` of them
//!   (fixed) or one padding value (var, sequence) — rows are filled by copying them;
//! - a sequence step holds at least one value (steps are counted by dividing by it);
//! - a row holds at most [`MAX_ROW_VALUES`] values: `n`, `max_len * n`, an image's
//!   `height * width * channels` (lengths and shapes are int32, and sizes are multiplied
//!   unchecked when the batch is allocated);
//! - names are unique (one slot each);
//! - decoders sit only on scalar bytes features (one value to decode per row);
//! - a raw tensor decodes to a numeric dtype (elements have a size) with at most one `-1`;
//!   a serialized tensor's dims are sizes or any;
//! - `max_shape` has the shape's rank; an image is `height, width > 0` with 1, 3 or 4 channels.
//!
//! `tests/unit/test_spec_contract.py` checks that every spec `_spec.py` accepts compiles here,
//! so a rule added on one side only fails a test.

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
    /// For uint64: its defaults may exceed int64 (a sentinel such as `2**64 - 1`), though the
    /// values of an `int64_list` cannot.
    UInt(Vec<u64>),
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
    /// Per slot, how pass 1 may decode it on the spot (see [`Direct`]); kept by [`Self::plan`].
    direct: Vec<Option<Direct>>,
}

/// A one-value numeric feature of an Example that pass 1 decodes as it finds it, into column
/// `index` of the batch's table of direct values, instead of remembering its bytes for pass 2.
///
/// Tabular data is mostly such scalars: remembering each one's bytes in the column-major table
/// of what pass 1 found, then reading them (and the record) back in pass 2, touched every
/// record twice and a table larger than the records. Only the usual form is decoded so:
/// anything else (another form, a second entry for the key, a value that does not fit) sends
/// the batch to the two-pass parser, whose rules and errors are the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Direct {
    /// Its column in the table of direct values (below [`MAX_DIRECT`]).
    pub index: u8,
    /// The list its value comes from: `Int64` or `Float`.
    pub wire: Wire,
}

/// At most this many features are [`Direct`]: which ones a record held is one bit each of a
/// `u64`.
pub(super) const MAX_DIRECT: usize = 64;

/// Values one row of a feature may hold (see the boundary contract).
pub const MAX_ROW_VALUES: usize = i32::MAX as usize;

/// Refuses a spec that breaks the boundary contract (see the module docs).
fn contract(ok: bool, feature: &str, broken: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "the spec compiler refused feature {feature:?}: {}",
            broken()
        )))
    }
}

impl CompiledSpec {
    /// Checks the configs against the boundary contract and builds the name table.
    pub fn new(features: Vec<FeatureConfig>) -> Result<Self> {
        let mut lookup = FxHashMap::default();
        for (i, f) in features.iter().enumerate() {
            let want = if f.kind == Kind::Fixed { f.n } else { 1 };
            let ok_defaults = match (&f.defaults, f.wire()) {
                (Defaults::None, _) => f.kind == Kind::Fixed,
                (Defaults::Int(v), Wire::Int64) => v.len() == want,
                (Defaults::UInt(v), Wire::Int64) => f.dtype == OutDType::U64 && v.len() == want,
                (Defaults::Float(v), Wire::Float) => v.len() == want,
                (Defaults::Bytes(v), Wire::Bytes) => v.len() == want,
                _ => false,
            };
            let name = &f.name;
            contract(ok_defaults, name, || {
                "default/padding values do not match its dtype or shape".into()
            })?;
            contract(f.kind != Kind::Sequence || f.n > 0, name, || {
                "a sequence step holds no value".into()
            })?;
            let row = match f.kind {
                Kind::Fixed => Some(f.n),
                Kind::Var => Some(f.max_len.unwrap_or(0)),
                Kind::Sequence => f.n.checked_mul(f.max_len.unwrap_or(1)),
            };
            contract(row.is_some_and(|r| r <= MAX_ROW_VALUES), name, || {
                format!("a row holds over {MAX_ROW_VALUES} values")
            })?;
            contract(
                lookup.insert(name.as_bytes().into(), i).is_none(),
                name,
                || "it is listed twice".into(),
            )?;
        }
        let decoders = vec![None; features.len()];
        Ok(CompiledSpec {
            features,
            lookup,
            decoders,
            aux: Vec::new(),
            direct: Vec::new(),
        }
        .plan())
    }

    /// Chooses the [`Direct`] features: fixed, one value, numeric, with no decoder, and not the
    /// source of a decoder's shape (decoders read their sources' bytes from pass 1's table).
    fn plan(mut self) -> Self {
        let mut sources = vec![false; self.slot_count()];
        for dec in self.decoders.iter().flatten() {
            if let Transform::Raw(raw) = &dec.transform {
                raw.shape
                    .source_slots()
                    .for_each(|slot| sources[slot] = true);
            }
        }
        let mut count = 0;
        self.direct = (0..self.slot_count())
            .map(|slot| {
                let f = self.features.get(slot)?;
                let scalar = f.kind == Kind::Fixed && f.n == 1 && f.wire() != Wire::Bytes;
                if !scalar || self.decoders[slot].is_some() || sources[slot] || count == MAX_DIRECT
                {
                    return None;
                }
                count += 1;
                Some(Direct {
                    index: (count - 1) as u8,
                    wire: f.wire(),
                })
            })
            .collect();
        self
    }

    /// How pass 1 treats slot `slot` of an Example: `Some` to decode it on the spot.
    #[inline(always)]
    pub(super) fn direct(&self, slot: usize) -> Option<Direct> {
        self.direct.get(slot).copied().flatten()
    }

    /// How many features pass 1 decodes on the spot (see [`Direct`]; their indexes are
    /// `0..direct_count()`).
    pub(super) fn direct_count(&self) -> usize {
        self.direct.iter().flatten().count()
    }

    /// Whether at least three in four slots are [`Direct`], as in tabular data, where
    /// decoding them in pass 1 saved 7 % of a batch's parse (cold records, parse alone); with
    /// one scalar beside long lists (the tokens workload) it measured level to 4 % slower, so
    /// such specs keep the two-pass parser.
    pub(super) fn mostly_direct(&self) -> bool {
        let count = self.direct_count();
        count > 0 && count * 4 >= self.slot_count() * 3
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
            let name = f.name.clone();
            let scalar_bytes = f.kind == Kind::Fixed && f.dtype == OutDType::Bytes && f.n == 1;
            contract(scalar_bytes, &name, || {
                "only a scalar bytes feature can be decoded".into()
            })?;
            match &mut dec.transform {
                Transform::Raw(raw) => {
                    contract(raw.dtype != OutDType::Bytes, &name, || {
                        "raw bytes decode to a numeric dtype".into()
                    })?;
                    match &mut raw.shape {
                        ShapeFrom::Dims(dims) => {
                            let inferred = dims.iter().filter(|d| **d == Dim::Infer).count();
                            contract(inferred <= 1, &name, || {
                                "more than one -1 in a shape".into()
                            })?;
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
                    let sizes = t
                        .shape
                        .iter()
                        .all(|d| matches!(d, Dim::Fixed(_) | Dim::Any));
                    contract(sizes, &name, || "a tensor's dims are sizes or any".into())?;
                    check_max_shape(&name, t.shape.len(), t.max_shape.as_deref())?;
                }
                Transform::Image(img) => {
                    let shape =
                        matches!(img.channels, 1 | 3 | 4) && img.height > 0 && img.width > 0;
                    contract(shape, &name, || {
                        "an image shape is (height > 0, width > 0, 1 | 3 | 4)".into()
                    })?;
                    let values = img
                        .height
                        .checked_mul(img.width)
                        .and_then(|n| n.checked_mul(img.channels));
                    contract(values.is_some_and(|n| n <= MAX_ROW_VALUES), &name, || {
                        format!("an image holds over {MAX_ROW_VALUES} values")
                    })?;
                }
            }
            self.decoders[i] = Some(dec);
        }
        Ok(self.plan())
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

    /// The name of feature `i` ("" past the requested features).
    pub fn name(&self, i: usize) -> &str {
        self.features.get(i).map_or("", |f| &f.name)
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
    let rank = max_shape.map_or(ndim, <[usize]>::len);
    contract(rank == ndim, name, || {
        format!("max_shape has {rank} dims but the shape has {ndim}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::image::{Format, ImageSpec, PixelType, Resize};
    use crate::decode::spec::{RawSpec, TensorSpec};

    fn feature(name: &str, kind: Kind, dtype: OutDType, n: usize) -> FeatureConfig {
        let pad = |count| match dtype.wire() {
            Wire::Int64 => Defaults::Int(vec![0; count]),
            Wire::Float => Defaults::Float(vec![0.0; count]),
            Wire::Bytes => Defaults::Bytes(vec![Vec::new(); count]),
        };
        FeatureConfig {
            name: name.into(),
            kind,
            dtype,
            n,
            max_len: None,
            truncate: false,
            defaults: if kind == Kind::Fixed {
                Defaults::None
            } else {
                pad(1)
            },
            allow_missing: false,
        }
    }

    fn refused(res: Result<CompiledSpec>, why: &str) {
        match res {
            Err(Error::Internal(m)) => assert!(m.contains(why), "{m}"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("accepted; expected {why:?}"),
        }
    }

    fn raw(shape: ShapeFrom, max_shape: Option<Vec<usize>>) -> DecoderConfig {
        DecoderConfig {
            transform: Transform::Raw(RawSpec {
                dtype: OutDType::U8,
                shape,
                max_shape,
                little_endian: true,
            }),
            skip_errors: false,
        }
    }

    fn image(height: usize, width: usize, channels: usize) -> DecoderConfig {
        DecoderConfig {
            transform: Transform::Image(ImageSpec {
                height,
                width,
                channels,
                format: Format::Auto,
                resize: Resize::None,
                pixel: PixelType::U8,
                max_pixels: 1 << 20,
            }),
            skip_errors: false,
        }
    }

    fn bytes_spec() -> CompiledSpec {
        CompiledSpec::new(vec![
            feature("x", Kind::Fixed, OutDType::Bytes, 1),
            feature("h", Kind::Fixed, OutDType::I64, 1),
        ])
        .unwrap()
    }

    #[test]
    fn accepts_every_kind_and_builds_the_name_table() {
        let mut seq = feature("s", Kind::Sequence, OutDType::F32, 3);
        seq.max_len = Some(4);
        let spec = CompiledSpec::new(vec![
            feature("a", Kind::Fixed, OutDType::I8, 2),
            feature("v", Kind::Var, OutDType::Bytes, 1),
            seq,
        ])
        .unwrap();
        assert_eq!(spec.slot(b"a"), Some(0));
        assert_eq!(spec.slot(b"s"), Some(2));
        assert_eq!(spec.slot(b"nope"), None);
        assert_eq!((spec.len(), spec.slot_count()), (3, 3));
    }

    #[test]
    fn refuses_defaults_of_another_type_or_count() {
        let mut f = feature("a", Kind::Fixed, OutDType::I32, 2);
        f.defaults = Defaults::Int(vec![1]);
        refused(CompiledSpec::new(vec![f.clone()]), "default/padding");
        f.defaults = Defaults::Float(vec![1.0, 2.0]);
        refused(CompiledSpec::new(vec![f]), "default/padding");
        let mut v = feature("v", Kind::Var, OutDType::F32, 1);
        v.defaults = Defaults::None;
        refused(CompiledSpec::new(vec![v]), "default/padding");
    }

    #[test]
    fn refuses_an_empty_step_a_huge_row_and_a_repeated_name() {
        refused(
            CompiledSpec::new(vec![feature("s", Kind::Sequence, OutDType::I64, 0)]),
            "step holds no value",
        );
        let mut f = feature("a", Kind::Fixed, OutDType::U8, MAX_ROW_VALUES + 1);
        f.defaults = Defaults::None;
        refused(CompiledSpec::new(vec![f]), "over");
        let mut v = feature("v", Kind::Var, OutDType::U8, 1);
        v.max_len = Some(MAX_ROW_VALUES + 1);
        refused(CompiledSpec::new(vec![v]), "over");
        let mut s = feature("s", Kind::Sequence, OutDType::U8, usize::MAX);
        s.max_len = Some(2);
        refused(CompiledSpec::new(vec![s]), "over");
        let a = feature("a", Kind::Fixed, OutDType::I64, 1);
        refused(CompiledSpec::new(vec![a.clone(), a]), "listed twice");
    }

    #[test]
    fn decoders_sit_on_scalar_bytes_features_only() {
        let dims = || ShapeFrom::Dims(vec![Dim::Fixed(2)]);
        refused(
            bytes_spec().with_decoders(vec![(1, raw(dims(), None))]),
            "scalar bytes",
        );
        refused(
            bytes_spec().with_decoders(vec![(7, raw(dims(), None))]),
            "does not exist",
        );
        let mut two = feature("x", Kind::Fixed, OutDType::Bytes, 2);
        two.defaults = Defaults::None;
        let spec = CompiledSpec::new(vec![two]).unwrap();
        refused(
            spec.with_decoders(vec![(0, raw(dims(), None))]),
            "scalar bytes",
        );
    }

    #[test]
    fn refuses_raw_and_tensor_shapes_it_cannot_fill() {
        let mut bytes = raw(ShapeFrom::Dims(vec![Dim::Fixed(1)]), None);
        if let Transform::Raw(r) = &mut bytes.transform {
            r.dtype = OutDType::Bytes;
        }
        refused(
            bytes_spec().with_decoders(vec![(0, bytes)]),
            "numeric dtype",
        );
        let two_inferred = raw(ShapeFrom::Dims(vec![Dim::Infer, Dim::Infer]), None);
        refused(bytes_spec().with_decoders(vec![(0, two_inferred)]), "-1");
        let rank = raw(ShapeFrom::Dims(vec![Dim::Infer]), Some(vec![2, 2]));
        refused(
            bytes_spec().with_decoders(vec![(0, rank)]),
            "max_shape has 2 dims",
        );
        let tensor = DecoderConfig {
            transform: Transform::Tensor(TensorSpec {
                dtype: OutDType::F32,
                shape: vec![Dim::Infer],
                max_shape: None,
            }),
            skip_errors: false,
        };
        refused(
            bytes_spec().with_decoders(vec![(0, tensor)]),
            "sizes or any",
        );
    }

    #[test]
    fn refuses_images_without_pixels_or_with_too_many() {
        refused(
            bytes_spec().with_decoders(vec![(0, image(4, 4, 2))]),
            "image shape",
        );
        refused(
            bytes_spec().with_decoders(vec![(0, image(0, 4, 3))]),
            "image shape",
        );
        refused(
            bytes_spec().with_decoders(vec![(0, image(4, 0, 3))]),
            "image shape",
        );
        let huge = image(1 << 31, 1 << 31, 4);
        refused(bytes_spec().with_decoders(vec![(0, huge)]), "over");
        assert!(bytes_spec()
            .with_decoders(vec![(0, image(4, 4, 3))])
            .is_ok());
    }

    #[test]
    fn shape_features_share_a_requested_slot_or_get_their_own() {
        let dims = ShapeFrom::Dims(vec![
            Dim::Feature {
                name: "h".into(),
                slot: 0,
            },
            Dim::Feature {
                name: "w".into(),
                slot: 0,
            },
        ]);
        let spec = bytes_spec()
            .with_decoders(vec![(0, raw(dims, None))])
            .unwrap();
        assert_eq!(spec.aux, vec!["w".to_string()]);
        assert_eq!(spec.slot_count(), 3);
        assert!(!spec.is_empty() && CompiledSpec::new(vec![]).unwrap().is_empty());
        // Two features the spec does not ask for: each its own slot, after the spec's.
        let dims = ShapeFrom::Dims(vec![
            Dim::Feature {
                name: "w".into(),
                slot: 0,
            },
            Dim::Feature {
                name: "d".into(),
                slot: 0,
            },
        ]);
        let two = bytes_spec()
            .with_decoders(vec![(0, raw(dims, None))])
            .unwrap();
        assert_eq!((two.slot(b"w"), two.slot(b"d")), (Some(2), Some(3)));
        assert_eq!(two.slot_count(), 4);
        match &spec.decoders[0].as_ref().unwrap().transform {
            Transform::Raw(RawSpec {
                shape: ShapeFrom::Dims(d),
                ..
            }) => {
                let slots: Vec<usize> = d
                    .iter()
                    .map(|d| match d {
                        Dim::Feature { slot, .. } => *slot,
                        _ => usize::MAX,
                    })
                    .collect();
                assert_eq!(slots, vec![1, 2]);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Which features pass 1 decodes: scalars of a numeric list, up to 64, not one whose
    /// bytes a decoder reads for its shape; and which specs take that path at all.
    #[test]
    fn direct_features_are_numeric_scalars_no_decoder_reads() {
        let mut features: Vec<FeatureConfig> = (0..70)
            .map(|i| feature(&format!("s{i}"), Kind::Fixed, OutDType::I32, 1))
            .collect();
        features.push(feature("raw", Kind::Fixed, OutDType::Bytes, 1));
        features.push(feature("pair", Kind::Fixed, OutDType::F32, 2));
        let spec = CompiledSpec::new(features).unwrap();
        assert_eq!(spec.direct_count(), 64);
        assert_eq!(spec.direct(63).map(|d| d.index), Some(63));
        assert_eq!(
            (spec.direct(64), spec.direct(70), spec.direct(71)),
            (None, None, None)
        );
        let s3 = Dim::Feature {
            name: "s3".into(),
            slot: 0,
        };
        let spec = spec
            .with_decoders(vec![(70, raw(ShapeFrom::Dims(vec![s3]), None))])
            .unwrap();
        assert_eq!(spec.direct(3), None, "s3 is the raw feature's shape");
        assert_eq!(spec.direct(4).map(|d| d.index), Some(3));
        assert!(spec.mostly_direct());
        let tokens = CompiledSpec::new(vec![
            feature("tokens", Kind::Var, OutDType::I32, 1),
            feature("label", Kind::Fixed, OutDType::I32, 1),
        ])
        .unwrap();
        assert_eq!(tokens.direct_count(), 1);
        assert!(!tokens.mostly_direct());
    }
}
