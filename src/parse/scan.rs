//! Pass 1 of the parser: find the requested features in each record.
//!
//! ```text
//! Example         { Features features = 1; }
//! SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
//! Features        { map<string, Feature> feature = 1; }          // entries: key = 1, value = 2
//! FeatureLists    { map<string, FeatureList> feature_list = 1; }
//! ```
//!
//! Each record's feature map is scanned once and the bytes of every *requested* feature (its
//! `Feature`, or `FeatureList`, message) remembered in its slot; unrequested features are
//! skipped without decoding.

use super::spec::{CompiledSpec, Kind};
use crate::wire::{self, read_key, read_len_delimited, skip_value};

/// What pass 1 found for one feature in one record: its message bytes, borrowed from the record.
pub(crate) type Found<'a> = Option<&'a [u8]>;

/// Scans a `Features` (or `FeatureLists`) map, storing the value bytes of requested keys in
/// `slots`.
///
/// Follows TensorFlow's fast parser rather than generic protobuf where they differ (the golden
/// tests pin each rule): a map entry is exactly two fields, each the key or the value, in any
/// order (a key given twice leaves the value empty); a later entry for the same key replaces an
/// earlier one, except that in an Example's `Features` (`example_features`) an empty (kind-less)
/// Feature does not replace an earlier value of a FixedLen or FixedLenSequence feature.
fn scan_map<'a>(
    map: &'a [u8],
    spec: &CompiledSpec,
    slots: &mut [Option<&'a [u8]>],
    example_features: bool,
    what: &'static str,
    keys: &mut KeyCache<'a>,
) -> std::result::Result<(), &'static str> {
    let mut pos = 0;
    let mut entry_index = 0;
    while pos < map.len() {
        match read_key(map, &mut pos) {
            Some((1, wire::LEN)) => {}
            _ => return Err(what),
        }
        let entry = read_len_delimited(map, &mut pos).ok_or("map entry overruns the record")?;
        let (mut key, mut value): (&[u8], &[u8]) = (b"", b"");
        let mut p = 0;
        for _ in 0..2 {
            match read_key(entry, &mut p) {
                Some((1, wire::LEN)) => {
                    key = read_len_delimited(entry, &mut p).ok_or("map key overruns its entry")?
                }
                Some((2, wire::LEN)) => {
                    value =
                        read_len_delimited(entry, &mut p).ok_or("map value overruns its entry")?
                }
                _ => return Err("map entry is not a key and a value"),
            }
        }
        if p != entry.len() {
            return Err("map entry has fields after its key and value");
        }
        let slot = keys.slot(entry_index, key, spec);
        entry_index += 1;
        if let Some(slot) = slot {
            let keep_earlier = example_features
                && value.is_empty()
                && slots[slot].is_some()
                && spec.features.get(slot).is_none_or(|f| f.kind != Kind::Var);
            if !keep_earlier {
                slots[slot] = Some(value);
            }
        }
    }
    Ok(())
}

/// The slot each map entry of the previous record resolved to, by entry position.
///
/// Records of a dataset nearly always list their features in the same order (writers serialise
/// maps deterministically), so comparing an entry's key with the key at the same position in
/// the previous record answers the lookup without hashing; only a miss goes to the hash table.
#[derive(Default)]
pub(super) struct KeyCache<'a> {
    by_position: Vec<(&'a [u8], Option<usize>)>,
}

impl<'a> KeyCache<'a> {
    #[inline]
    fn slot(&mut self, position: usize, key: &'a [u8], spec: &CompiledSpec) -> Option<usize> {
        if let Some(&(seen, slot)) = self.by_position.get(position) {
            if seen == key {
                return slot;
            }
        }
        let slot = spec.slot(key);
        match self.by_position.get_mut(position) {
            Some(entry) => *entry = (key, slot),
            None => self.by_position.push((key, slot)),
        }
        slot
    }
}

/// Scans one serialized Example (`seq = None`) or SequenceExample.
pub(super) fn scan_record<'a>(
    record: &'a [u8],
    context: &CompiledSpec,
    ctx_slots: &mut [Option<&'a [u8]>],
    seq: Option<(&CompiledSpec, &mut [Option<&'a [u8]>])>,
    keys: &mut [KeyCache<'a>; 2],
) -> std::result::Result<(), &'static str> {
    let mut seq = seq;
    let mut pos = 0;
    while pos < record.len() {
        let (field, wt) = read_key(record, &mut pos).ok_or("malformed field key")?;
        match (field, wt, seq.as_mut()) {
            (1, wire::LEN, _) => {
                let map =
                    read_len_delimited(record, &mut pos).ok_or("features overrun the record")?;
                // TensorFlow's SequenceExample parser lacks the Example parser's kind-less rule.
                let what = "unexpected field in Features";
                scan_map(map, context, ctx_slots, seq.is_none(), what, &mut keys[0])?;
            }
            (2, wire::LEN, Some((spec, slots))) => {
                let map = read_len_delimited(record, &mut pos)
                    .ok_or("feature_lists overrun the record")?;
                let what = "unexpected field in FeatureLists";
                scan_map(map, spec, slots, false, what, &mut keys[1])?;
            }
            _ => skip_value(record, &mut pos, wt).ok_or("malformed field")?,
        }
    }
    Ok(())
}
