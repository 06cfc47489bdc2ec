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

use super::lists::{direct_raw, varint_at_end, varint_value};
use super::spec::{CompiledSpec, Direct, Kind};
use crate::wire::{self, read_key, read_len_delimited, skip_value, Wire};

/// What pass 1 found for one feature in one record: its message bytes, borrowed from the record.
pub(crate) type Found<'a> = Option<&'a [u8]>;

/// One record's row of a batch's table of what pass 1 found, which is column-major
/// (`found[slot * rows + row]`) so that pass 2 reads each feature's rows contiguously. The
/// scan writes each entry in place: no per-record slots to clear and then scatter.
pub(super) struct FoundRow<'t, 'a> {
    pub found: &'t mut [Found<'a>],
    pub rows: usize,
    pub row: usize,
}

impl<'a> FoundRow<'_, 'a> {
    #[inline(always)]
    fn at(&mut self, slot: usize) -> &mut Found<'a> {
        &mut self.found[slot * self.rows + self.row]
    }
}

/// Pass 1's table of the batch's direct values (see [`Direct`]): column-major, one column of
/// values per direct feature (`Direct::index`), so that each feature's column is built from
/// contiguous values; and per row, which of them the record held.
pub(super) struct DirectTable {
    values: Vec<u64>,
    seen: Vec<u64>,
    width: usize,
}

impl DirectTable {
    /// A table for `rows` records of `width` direct features.
    pub fn new(rows: usize, width: usize) -> Self {
        DirectTable {
            values: vec![0; rows * width],
            seen: vec![0; rows],
            width,
        }
    }

    /// Row `row`, for its record's scan (then [`DirectRow::commit`]).
    pub fn row(&mut self, row: usize) -> DirectRow<'_> {
        DirectRow {
            values: &mut self.values,
            row,
            rows: self.seen.len(),
            seen_in_table: &mut self.seen[row],
            seen: 0,
            unusual: false,
        }
    }

    /// Direct feature `index` of row `row`: `Some(value)` where the record held it.
    #[inline(always)]
    pub fn get(&self, row: usize, index: usize) -> Option<u64> {
        let held = self.seen[row] & (1u64 << index) != 0;
        held.then(|| self.values[index * self.rows() + row])
    }

    /// Direct feature `index` of every row: meaningful in the rows that held it.
    pub fn column(&self, index: usize) -> &[u64] {
        &self.values[index * self.rows()..(index + 1) * self.rows()]
    }

    /// Bit `index` set when every row held direct feature `index`.
    pub fn held_by_all(&self) -> u64 {
        let all = if self.width == 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        };
        self.seen.iter().fold(all, |a, &s| a & s)
    }

    /// Rows in the table.
    pub fn rows(&self) -> usize {
        self.seen.len()
    }
}

/// One record's row of a [`DirectTable`]. Its seen bits are kept here while the record is
/// scanned (a register, not a store per feature) and go back to the table once it is.
pub(super) struct DirectRow<'t> {
    /// The whole table's values, of which this row's are `values[index * rows + row]`.
    values: &'t mut [u64],
    row: usize,
    rows: usize,
    seen_in_table: &'t mut u64,
    /// Bit `index` is set when the record held direct feature `index`.
    seen: u64,
    /// Set when a direct feature came in another form than the usual one, or twice: the
    /// batch then goes to the two-pass parser, whose rules decide those cases.
    unusual: bool,
}

impl DirectRow<'_> {
    /// Keeps the record's seen bits in the table; false when the record was unusual.
    pub fn commit(self) -> bool {
        *self.seen_in_table = self.seen;
        !self.unusual
    }

    #[inline(always)]
    fn take(&mut self, d: Direct, feature: &[u8]) {
        match direct_raw(d.wire, feature) {
            Some(v) => self.put(d, v),
            None => self.unusual = true,
        }
    }

    /// Keeps the values of the run of map entries from `map[pos..]` (the map's entry number
    /// `position`) that have the [`Quick`] shapes of the previous record's entries at their
    /// positions; returns the position and the entry number where the run stopped. A feature
    /// seen before in the record stops it too (the general reader's [`DirectRow::put`] then
    /// marks the record unusual).
    #[inline(always)]
    fn put_quick_run(
        &mut self,
        keys: &KeyCache<'_>,
        map: &[u8],
        mut pos: usize,
        mut position: usize,
        pext: Pext,
    ) -> (usize, usize) {
        // The seen bits in a register through the run, not stored back after each entry.
        let mut seen = self.seen;
        while let Some((d, raw, end)) = keys.quick(position, map, pos, pext) {
            let bit = 1u64 << d.index;
            if seen & bit != 0 {
                break;
            }
            self.values[usize::from(d.index) * self.rows + self.row] = raw;
            seen |= bit;
            pos = end;
            position += 1;
        }
        self.seen = seen;
        (pos, position)
    }

    /// Keeps `raw` ([`direct_raw`]'s form) as the record's value of `d`, the first time only.
    #[inline(always)]
    fn put(&mut self, d: Direct, raw: u64) {
        let bit = 1u64 << d.index;
        if self.seen & bit == 0 {
            self.values[usize::from(d.index) * self.rows + self.row] = raw;
            self.seen |= bit;
        } else {
            self.unusual = true;
        }
    }
}

/// Scans a `Features` (or `FeatureLists`) map, storing the value bytes of requested keys in
/// their slots of `found` (which hold `None` before the record's scan).
///
/// Follows TensorFlow's fast parser rather than generic protobuf where they differ (the golden
/// tests pin each rule): a map entry is exactly two fields, each the key or the value, in any
/// order (a key given twice leaves the value empty); a later entry for the same key replaces an
/// earlier one, except that in an Example's `Features` (`example_features`) an empty (kind-less)
/// Feature does not replace an earlier value of a FixedLen or FixedLenSequence feature.
///
/// With `direct`, the spec's [`Direct`] features are decoded into it instead of stored in
/// `found`.
fn scan_map<'a>(
    map: &'a [u8],
    spec: &CompiledSpec,
    found: &mut FoundRow<'_, 'a>,
    mut direct: Option<&mut DirectRow<'_>>,
    example_features: bool,
    what: &'static str,
    keys: &mut KeyCache<'a>,
) -> std::result::Result<(), &'static str> {
    let mut pos = 0;
    let mut entry_index = 0;
    let pext = Pext::of_this_cpu();
    while pos < map.len() {
        // The run of direct entries from here that have the short shapes of the previous
        // record's entries at their positions, in a loop of their own (see `Quick`).
        if let Some(row) = direct.as_deref_mut() {
            (pos, entry_index) = row.put_quick_run(keys, map, pos, entry_index, pext);
            if pos >= map.len() {
                break;
            }
        }
        // An entry with the shape of the entry at its position in the previous record is read
        // without its key being looked up (see `Shape`).
        let mut shaped = None;
        if let Some((slot, read, end)) = keys.same_shape(entry_index, map, pos) {
            match (read, direct.as_deref_mut()) {
                (Read::Direct(d, raw), Some(row)) => {
                    row.put(d, raw);
                    pos = end;
                    entry_index += 1;
                    continue;
                }
                (Read::Value(value), _) => shaped = Some((slot, value, end)),
                // Shapes of direct features are learned by scans with a table only; without
                // one, the general reader reads the entry.
                (Read::Direct(..), None) => {}
            }
        }
        let (slot, value) = match shaped {
            Some((slot, value, end)) => {
                pos = end;
                (slot, value)
            }
            None => {
                let (key, value) = match short_entry(map, pos) {
                    Some((key, value, end)) => {
                        pos = end;
                        (key, value)
                    }
                    None => {
                        match read_key(map, &mut pos) {
                            Some((1, wire::LEN)) => {}
                            _ => return Err(what),
                        }
                        let entry = read_len_delimited(map, &mut pos)
                            .ok_or("map entry overruns the record")?;
                        match usual_entry(entry) {
                            Some(kv) => kv,
                            None => any_entry(entry)?,
                        }
                    }
                };
                (keys.slot(entry_index, key, spec, direct.is_some()), value)
            }
        };
        entry_index += 1;
        if let Some(slot) = slot {
            // Without a direct table (SequenceExamples, specs of few scalars) the spec's
            // direct slots are not even looked up.
            if let Some(row) = direct.as_deref_mut() {
                if let Some(d) = spec.direct(slot) {
                    row.take(d, value);
                    continue;
                }
            }
            let at = found.at(slot);
            let keep_earlier = example_features
                && value.is_empty()
                && at.is_some()
                && spec.features.get(slot).is_none_or(|f| f.kind != Kind::Var);
            if !keep_earlier {
                *at = Some(value);
            }
        }
    }
    Ok(())
}

/// The map entry at `map[pos..]`, its key, value and end, when the entry is in the usual form
/// (see [`usual_entry`]) and under 128 bytes, as every entry of a scalar feature is:
/// `0a E 0a K key 12 V value` with one-byte lengths, read in one straight line. `None` for
/// anything else, which the general path reads (with the same result where both apply).
#[inline(always)]
fn short_entry(map: &[u8], pos: usize) -> Option<(&[u8], &[u8], usize)> {
    let &[0x0a, e, 0x0a, k] = map.get(pos..pos.wrapping_add(4))? else {
        return None;
    };
    let (e, k) = (usize::from(e), usize::from(k));
    if e >= 0x80 {
        return None;
    }
    let end = pos + 2 + e;
    // The entry, `0a K key 12 V value`: E < 128 bytes, so K and V are one-byte lengths if the
    // value runs to the entry's end.
    let entry = map.get(pos + 2..end)?;
    let [0x12, v, value @ ..] = entry.get(2 + k..)? else {
        return None;
    };
    (usize::from(*v) == value.len()).then(|| (&entry[2..2 + k], value, end))
}

/// The key and value of a map entry in the form writers give it, `0a <key len> key 12 <value
/// len> value` with a key under 128 bytes; `None` for any other form, which [`any_entry`]
/// reads (with the same result where both apply).
#[inline(always)]
fn usual_entry(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let [0x0a, key_len, rest @ ..] = entry else {
        return None;
    };
    let key_len = usize::from(*key_len);
    if key_len >= 0x80 || rest.len() <= key_len || rest[key_len] != 0x12 {
        return None;
    }
    let (key, rest) = rest.split_at(key_len);
    let mut p = 1;
    let value = read_len_delimited(rest, &mut p)?;
    (p == rest.len()).then_some((key, value))
}

/// A map entry's key and value, in any form TensorFlow's parser accepts (see [`scan_map`]).
fn any_entry(entry: &[u8]) -> std::result::Result<(&[u8], &[u8]), &'static str> {
    let (mut key, mut value): (&[u8], &[u8]) = (b"", b"");
    let mut p = 0;
    for _ in 0..2 {
        match read_key(entry, &mut p) {
            Some((1, wire::LEN)) => {
                key = read_len_delimited(entry, &mut p).ok_or("map key overruns its entry")?
            }
            Some((2, wire::LEN)) => {
                value = read_len_delimited(entry, &mut p).ok_or("map value overruns its entry")?
            }
            _ => return Err("map entry is not a key and a value"),
        }
    }
    if p != entry.len() {
        return Err("map entry has fields after its key and value");
    }
    Ok((key, value))
}

/// The slot each map entry of the previous record resolved to, by entry position, and the
/// [`Shape`] of the entry there.
///
/// Records of a dataset nearly always list their features in the same order (writers serialise
/// maps deterministically), so an entry with the shape of the entry at the same position in the
/// previous record is read in one masked compare, without its key being looked up; else its
/// key compared with the key at that position answers the lookup without hashing; only a miss
/// goes to the hash table.
#[derive(Default)]
pub(super) struct KeyCache<'a> {
    by_position: Vec<Cached<'a>>,
    /// The [`Quick`] form of each position's shape (`Quick::NONE` where it has none).
    quick: Vec<Quick>,
}

/// What the entry at one position of the previous record was: its key, the key's slot (`None`:
/// not requested) and the key's [`Shape`] (`None` for a key too long to have one).
struct Cached<'a> {
    key: &'a [u8],
    slot: Option<usize>,
    shape: Option<Shape>,
}

impl<'a> KeyCache<'a> {
    /// The slot of `key`, the key of the map's entry number `position`; `direct`: the scan
    /// decodes the spec's [`Direct`] features on the spot (the shapes learned then read them).
    #[inline]
    fn slot(
        &mut self,
        position: usize,
        key: &'a [u8],
        spec: &CompiledSpec,
        direct: bool,
    ) -> Option<usize> {
        if let Some(seen) = self.by_position.get(position) {
            if same_key(seen.key, key) {
                return seen.slot;
            }
        }
        let slot = spec.slot(key);
        let shape = Shape::of(key, slot.and_then(|s| spec.direct(s)).filter(|_| direct));
        let quick = shape.as_ref().map_or(Quick::NONE, Quick::of);
        let cached = Cached { key, slot, shape };
        match self.by_position.get_mut(position) {
            Some(entry) => {
                *entry = cached;
                self.quick[position] = quick;
            }
            None => {
                self.by_position.push(cached);
                self.quick.push(quick);
            }
        }
        slot
    }

    /// The direct feature, its value ([`direct_raw`]'s form) and the end of the map entry at
    /// `map[pos..]` when it has the [`Quick`] shape of the entry at the same position in the
    /// previous record: what [`Shape::read`] reads there, or `None`.
    #[inline(always)]
    fn quick(
        &self,
        position: usize,
        map: &[u8],
        pos: usize,
        pext: Pext,
    ) -> Option<(Direct, u64, usize)> {
        let quick = self.quick.get(position)?;
        let read = quick.read(map, pos, pext);
        #[cfg(test)]
        if read.is_some() {
            tests::SHAPE_READS.set(tests::SHAPE_READS.get() + 1);
        }
        read
    }

    /// The slot, what was read and the end of the map entry at `map[pos..]` when it has the
    /// [`Shape`] of the entry at the same position in the previous record.
    #[inline(always)]
    fn same_shape(
        &self,
        position: usize,
        map: &'a [u8],
        pos: usize,
    ) -> Option<(Option<usize>, Read<'a>, usize)> {
        let cached = self.by_position.get(position)?;
        let (read, end) = cached.shape.as_ref()?.read(map, pos)?;
        Some((cached.slot, read, end))
    }
}

/// What a [`Shape`] read of an entry: its value (the `Feature`'s bytes), or for a [`Direct`]
/// feature its value decoded ([`direct_raw`]'s form).
enum Read<'a> {
    Value(&'a [u8]),
    Direct(Direct, u64),
}

/// The bytes that every map entry of one key has in the short form ([`short_entry`]),
/// `0a E 0a K key 12 V value`: all but the lengths E and V and the value. For a [`Direct`]
/// feature the value's usual form is in it too: a float's `12 06 0a 04 f32` (E and V then
/// fixed as well), an int64's `1a G 0a H varint` (all but the lengths E, V, G and H, which
/// must agree with the varint's width H).
///
/// One masked compare of an entry's first [`Shape::SPAN`] bytes then tells that it is an entry
/// of that key in that form, where the general reader checks each byte in turn and looks the
/// key up: on tabular data (40 scalars a record) that was most of the parse.
#[derive(Clone, Copy)]
struct Shape {
    bytes: [u64; 4],
    mask: [u64; 4],
    key_len: u8,
    direct: Option<Direct>,
}

impl Shape {
    /// Bytes compared at once: keys of up to `SPAN - 10` bytes have a shape.
    const SPAN: usize = 32;

    /// The shape of `key`'s entries, with `direct` those of that direct feature's usual form;
    /// `None` for a key too long.
    fn of(key: &[u8], direct: Option<Direct>) -> Option<Shape> {
        // Direct features are int64 or float lists; a bytes one would get the plain shape.
        let direct = direct.filter(|d| d.wire != Wire::Bytes);
        let k = key.len();
        #[cfg(test)]
        if tests::NO_SHAPES.get() {
            return None;
        }
        if k + 10 > Self::SPAN {
            return None;
        }
        let (mut bytes, mut mask) = ([0u8; Self::SPAN], [0u8; Self::SPAN]);
        bytes[..4].copy_from_slice(&[0x0a, 0, 0x0a, k as u8]);
        bytes[4..4 + k].copy_from_slice(key);
        bytes[4 + k] = 0x12;
        mask[0] = 0xff;
        mask[2..5 + k].fill(0xff);
        match direct.map(|d| d.wire) {
            Some(Wire::Float) => {
                // 0a E 0a K key 12 08 12 06 0a 04 f32: E = K + 12.
                bytes[1] = (k + 12) as u8;
                bytes[5 + k..10 + k].copy_from_slice(&[0x08, 0x12, 0x06, 0x0a, 0x04]);
                mask[1] = 0xff;
                mask[5 + k..10 + k].fill(0xff);
            }
            Some(Wire::Int64) => {
                // 0a E 0a K key 12 V 1a G 0a H varint: all but E, V, G and H.
                bytes[6 + k] = 0x1a;
                bytes[8 + k] = 0x0a;
                mask[6 + k] = 0xff;
                mask[8 + k] = 0xff;
            }
            Some(Wire::Bytes) | None => {}
        }
        let words = |b: [u8; Self::SPAN]| {
            std::array::from_fn(|i| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()))
        };
        Some(Shape {
            bytes: words(bytes),
            mask: words(mask),
            key_len: k as u8,
            direct,
        })
    }

    /// What the entry at `map[pos..]` holds, and its end, if it has this shape: the value
    /// [`short_entry`] reads there, or what [`direct_raw`] decodes from it. `None` also for an
    /// entry within `SPAN` bytes of the map's end (the general reader reads those).
    #[inline(always)]
    fn read<'a>(&self, map: &'a [u8], pos: usize) -> Option<(Read<'a>, usize)> {
        let head: &[u8; Self::SPAN] = map
            .get(pos..pos.checked_add(Self::SPAN)?)?
            .try_into()
            .ok()?;
        let mut diff = 0;
        for i in 0..4 {
            let word = u64::from_le_bytes(head[8 * i..8 * i + 8].try_into().unwrap());
            diff |= (word ^ self.bytes[i]) & self.mask[i];
        }
        if diff != 0 {
            return None;
        }
        let k = usize::from(self.key_len);
        let Some(d) = self.direct else {
            let (e, v) = (usize::from(head[1]), usize::from(head[5 + k]));
            if e >= 0x80 || e != k + 4 + v {
                return None;
            }
            let end = pos + 2 + e;
            return counted(Read::Value(map.get(pos + 6 + k..end)?), end);
        };
        if d.wire == Wire::Float {
            let end = pos + k + 14;
            let value = map.get(pos + k + 10..end)?;
            let bits = u32::from_le_bytes(value.try_into().ok()?);
            return counted(Read::Direct(d, u64::from(bits)), end);
        }
        // An int64's varint of H bytes, 1 to 10: E = K + 8 + H, V = H + 4, G = H + 2.
        let h = head[9 + k];
        let lengths_agree = (1..=10).contains(&h)
            && head[1] == k as u8 + 8 + h
            && head[5 + k] == h + 4
            && head[7 + k] == h + 2;
        if !lengths_agree {
            return None;
        }
        let end = pos + k + 10 + usize::from(h);
        let value = varint_at_end(map.get(pos..end)?, usize::from(h))?;
        counted(Read::Direct(d, value), end)
    }
}

/// A [`Shape`] of a direct feature whose key has at most [`Quick::MAX_KEY`] bytes, as tabular
/// keys do ("f3", "c12", "label"), in the form a tight loop reads: the entry's first 16 bytes
/// (all but a float's value; an int64's header) in one masked compare of two words, in which
/// an int64's four lengths are those its varint's width H implies. Accepts exactly the entries
/// that [`Shape::read`] reads as direct values, but for varints of 9 and 10 bytes (negative
/// ints), which it leaves to it; and it also reads entries that end within `Shape::SPAN` bytes
/// of the map's end (not within 16), which `Shape` leaves to the general reader (whose values
/// are the same).
///
/// On tabular data (40 scalars a record) the general loop's shaped read, with its cases and
/// spilled registers, was a third of the Loader's CPU; with this loop a tabular batch parses
/// in 17 % less time (`HOT_LOOPS_BEST_OF`: 51.9 -> 43.0 us a batch of 256) and the tabular
/// Loader runs 6 % faster; with its varints decoded by `pext` ([`Pext`]) 35.3 us, +5 % more.
#[derive(Clone, Copy)]
struct Quick {
    /// The entry's first 16 bytes, an int64's lengths (E, V, G, H of `0a E 0a K key 12 V 1a G
    /// 0a H`) as they are for H = 0: each is H plus a constant, `bytes + H * step`.
    bytes: [u64; 2],
    /// 1 at each int64 length's byte, 0 elsewhere (and for floats).
    step: [u64; 2],
    mask: [u64; 2],
    key_len: u8,
    /// `None`: no quick shape (the loop stops there).
    direct: Option<Direct>,
}

impl Quick {
    /// The longest key with a quick shape: its int64 entry's header, `K + 10` bytes, fits in
    /// 16.
    const MAX_KEY: usize = 6;

    const NONE: Quick = Quick {
        bytes: [0; 2],
        step: [0; 2],
        mask: [0; 2],
        key_len: 0,
        direct: None,
    };

    /// The quick form of `shape` (`NONE` for a shape of a long key or of a non-direct value).
    fn of(shape: &Shape) -> Quick {
        let k = usize::from(shape.key_len);
        let Some(direct) = shape.direct.filter(|_| k <= Self::MAX_KEY) else {
            return Quick::NONE;
        };
        // Bytes 0-15 of the shape: its first two words, which cover the whole header.
        let mut quick = Quick {
            bytes: [shape.bytes[0], shape.bytes[1]],
            mask: [shape.mask[0], shape.mask[1]],
            key_len: k as u8,
            direct: Some(direct),
            ..Quick::NONE
        };
        if direct.wire == Wire::Int64 {
            // (byte, constant): E = H + K + 8, V = H + 4, G = H + 2, H = H + 0.
            for (at, plus) in [(1, k + 8), (5 + k, 4), (7 + k, 2), (9 + k, 0)] {
                let (word, shift) = (at / 8, 8 * (at % 8));
                quick.bytes[word] |= (plus as u64) << shift;
                quick.step[word] |= 1 << shift;
                quick.mask[word] |= 0xff << shift;
            }
        }
        quick
    }

    /// As [`KeyCache::quick`] says, for this position's quick shape.
    #[inline(always)]
    fn read(&self, map: &[u8], pos: usize, pext: Pext) -> Option<(Direct, u64, usize)> {
        let d = self.direct?;
        let head = map.get(pos..pos.checked_add(16)?)?;
        let k = usize::from(self.key_len);
        // An int64's H, byte 9 + K (a float's is its fixed 04). Loaded on its own rather than
        // shifted out of a word: the next entry's position waits on it. Below 9, so that
        // `bytes + H * step` carries into no other byte.
        let h = u64::from(head[9 + k]);
        if !(1..=8).contains(&h) {
            return None;
        }
        let w0 = u64::from_le_bytes(head[..8].try_into().unwrap());
        let w1 = u64::from_le_bytes(head[8..].try_into().unwrap());
        let differ = |i: usize, w: u64| (w ^ (self.bytes[i] + h * self.step[i])) & self.mask[i];
        if differ(0, w0) | differ(1, w1) != 0 {
            return None;
        }
        if d.wire == Wire::Float {
            // 0a E 0a K key 12 08 12 06 0a 04 f32, all but the value compared.
            let end = pos + k + 14;
            let value = map.get(end - 4..end)?;
            let bits = u32::from_le_bytes(value.try_into().unwrap());
            return Some((d, u64::from(bits), end));
        }
        // The varint's H bytes are the last of the 8 before the entry's end (the header's 10
        // bytes come before them), each but the last with its continuation bit.
        let h = h as usize;
        let end = pos + k + 10 + h;
        let tail = map.get(end - 8..end)?;
        let w = u64::from_le_bytes(tail.try_into().unwrap()) >> (8 * (8 - h));
        let high = 0x8080_8080_8080_8080u64 >> (8 * (8 - h));
        if w & high != high >> 8 {
            return None;
        }
        Some((d, pext.varint_value(w, h), end))
    }
}

/// How [`Quick::read`] decodes a varint's 7-bit groups on this CPU: BMI2's `pext` where it is
/// fast (one instruction; the tabular Loader +6 % over the shifts and masks of
/// [`varint_value`]), else those. A copy per map, so the choice is a register the loop
/// branches on, not a load.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only x86-64 has `pext`
struct Pext(bool);

impl Pext {
    /// This CPU's (found once; off in the tests' reference runs with `NO_PEXT`).
    #[inline(always)]
    fn of_this_cpu() -> Pext {
        #[cfg(test)]
        if tests::NO_PEXT.get() {
            return Pext(false);
        }
        #[cfg(target_arch = "x86_64")]
        return Pext(super::short_varints::has_fast_pext());
        #[cfg(not(target_arch = "x86_64"))]
        Pext(false)
    }

    /// The value of a varint of `width` (1 to 8) bytes, the low bytes of `w` (its other bytes
    /// zero).
    #[inline(always)]
    fn varint_value(self, w: u64, width: usize) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.0 {
            // SAFETY: `Pext(true)` only where the CPU has BMI2 (`has_fast_pext`).
            return unsafe { super::short_varints::pext_7bit_groups(w) };
        }
        varint_value(w, width)
    }
}

/// `Some((read, end))`, counted in the tests' [`tests::SHAPE_READS`].
#[inline(always)]
fn counted(read: Read<'_>, end: usize) -> Option<(Read<'_>, usize)> {
    #[cfg(test)]
    tests::SHAPE_READS.set(tests::SHAPE_READS.get() + 1);
    Some((read, end))
}

/// `a == b`, without a call to `memcmp` (or `memcpy`) for the short keys features have
/// ("label", "f12"): the call cost more than the comparison, once per feature of every record.
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let u32_at = |k: &[u8], i: usize| u32::from_le_bytes([k[i], k[i + 1], k[i + 2], k[i + 3]]);
    match len {
        0 => true,
        // Bytes 0, len / 2 and len - 1 are every byte of a key of 1 to 3 bytes.
        1..=3 => a[0] == b[0] && a[len / 2] == b[len / 2] && a[len - 1] == b[len - 1],
        // Two overlapping 4-byte words cover 4 to 8 bytes.
        4..=8 => u32_at(a, 0) == u32_at(b, 0) && u32_at(a, len - 4) == u32_at(b, len - 4),
        _ => a == b,
    }
}

/// Scans one serialized Example (`seq = None`) or SequenceExample; `direct` (an Example's
/// only) as [`scan_map`] takes it.
pub(super) fn scan_record<'a>(
    record: &'a [u8],
    context: &CompiledSpec,
    ctx_found: &mut FoundRow<'_, 'a>,
    mut direct: Option<&mut DirectRow<'_>>,
    seq: Option<(&CompiledSpec, &mut FoundRow<'_, 'a>)>,
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
                let row = direct.as_deref_mut();
                scan_map(
                    map,
                    context,
                    ctx_found,
                    row,
                    seq.is_none(),
                    what,
                    &mut keys[0],
                )?;
            }
            (2, wire::LEN, Some((spec, found))) => {
                let map = read_len_delimited(record, &mut pos)
                    .ok_or("feature_lists overrun the record")?;
                let what = "unexpected field in FeatureLists";
                scan_map(map, spec, found, None, false, what, &mut keys[1])?;
            }
            _ => skip_value(record, &mut pos, wt).ok_or("malformed field")?,
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::{any_entry, same_key, short_entry, usual_entry};

    thread_local! {
        /// Set, scans on this thread learn no [`Shape`](super::Shape): every entry is read by
        /// the general reader (the reference the shapes are tested against).
        pub(in crate::parse) static NO_SHAPES: std::cell::Cell<bool> =
            const { std::cell::Cell::new(false) };
        /// Set, quick reads on this thread decode varints without `pext` (see `Pext`).
        pub(in crate::parse) static NO_PEXT: std::cell::Cell<bool> =
            const { std::cell::Cell::new(false) };
        /// Entries read by their shape on this thread.
        pub(in crate::parse) static SHAPE_READS: std::cell::Cell<u64> =
            const { std::cell::Cell::new(0) };
    }

    /// Where the fast form applies it reads what the general reader reads, on every entry of up
    /// to 6 bytes and on entries built around every key and value length's edge.
    #[test]
    fn usual_entry_agrees_with_any_entry() {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let alphabet = [0x00, 0x01, 0x02, 0x0a, 0x12, 0x7f, 0x80, 0xff];
        for len in 0..=6u32 {
            for i in 0..alphabet.len().pow(len) {
                let mut x = i;
                let e = (0..len)
                    .map(|_| {
                        let b = alphabet[x % alphabet.len()];
                        x /= alphabet.len();
                        b
                    })
                    .collect();
                entries.push(e);
            }
        }
        for key_len in [0usize, 1, 5, 127, 128] {
            for value_len in [0usize, 1, 127, 128, 300] {
                let mut e = vec![0x0a];
                crate::wire::write_varint(&mut e, key_len as u64);
                e.extend(std::iter::repeat_n(b'k', key_len));
                e.push(0x12);
                crate::wire::write_varint(&mut e, value_len as u64);
                e.extend(std::iter::repeat_n(7u8, value_len));
                for cut in [0, 1] {
                    entries.push(e[..e.len() - cut].to_vec());
                }
                let mut longer = e.clone();
                longer.push(0);
                entries.push(longer);
            }
        }
        let (mut fast, mut short) = (0, 0);
        for e in &entries {
            if let Some(kv) = usual_entry(e) {
                assert_eq!(any_entry(e), Ok(kv), "{e:?}");
                fast += 1;
            }
            // The entry inside a map, another entry after it: the straight-line reader reads
            // it (when it does) as the general one does, and ends where the entry does.
            let mut map = vec![0x0a];
            crate::wire::write_varint(&mut map, e.len() as u64);
            let end = map.len() + e.len();
            map.extend_from_slice(e);
            map.extend_from_slice(&[0x0a, 0x00]);
            for map in [&map[..end], &map[..]] {
                if let Some((key, value, at)) = short_entry(map, 0) {
                    assert_eq!(any_entry(e), Ok((key, value)), "{e:?}");
                    assert_eq!(at, end, "{e:?}");
                    short += 1;
                }
            }
            // Cut short, the entry overruns the map: only the general path reads (and refuses) it.
            assert_eq!(short_entry(&map[..end - 1], 0), None, "{e:?}");
        }
        assert!(fast > 20, "the fast form applied to only {fast} entries");
        assert!(
            short > 20,
            "the straight-line form applied to only {short} entries"
        );
    }

    /// Against `==` on every pair of keys up to 10 bytes over a small alphabet (so that keys
    /// that differ in one byte anywhere, or only in length, are all there).
    #[test]
    fn same_key_is_slice_equality() {
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=10usize {
            for i in 0..3usize.pow(len.min(4) as u32) {
                let mut k = vec![b'a'; len];
                let mut x = i;
                for j in 0..len.min(4) {
                    // The varying bytes at both ends and the middle.
                    let at = [0, len - 1, len / 2, len / 3][j];
                    k[at] = b"abc"[x % 3];
                    x /= 3;
                }
                keys.push(k);
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(same_key(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
