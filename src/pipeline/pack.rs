//! Sequence packing: variable-length documents into fixed-length rows, first fit.
//!
//! The input is a window of documents in stream order, one or more features each (say `inputs`
//! and `targets`), every feature a padded `[documents, max_len]` array of some element size and
//! the true length of each document. The output is whole batches of `rows` rows; each feature's
//! row holds `seq_len` values, where the documents placed in the row follow each other, with
//!
//! - `segment_ids`: 1 for the row's first document, 2 for the second …, 0 on padding;
//! - `positions`: each value's index within its document (its chunk, when split), 0 on padding.
//!
//! That is the layout MaxText and seqio feed to attention masks. Placement is first fit over the
//! open rows of the batch being filled (the rows are opened in order, up to `rows`): a document
//! goes to the first row where every feature has room; when it fits in none and all rows are
//! open, the batch is complete and the document opens the next. grain's `FirstFitPackIterDataset`
//! with `num_packing_bins = rows` does the same, so efficiencies compare.
//!
//! A document longer than a feature's `seq_len` is split into chunks of `seq_len` (each its own
//! segment, positions from 0) or truncated (the rest dropped and counted). A document with no
//! values in any feature makes no segment and is counted. The window's last batch may have rows
//! that never opened: their `row_used` is false. Everything is a function of the input alone.

use crate::alloc::{try_zeroed, AllocError};
use crate::error::{Error, Result};

/// How to pack.
#[derive(Clone, Debug)]
pub struct PackConfig {
    /// The row length of each feature, in values.
    pub seq_lens: Vec<usize>,
    /// Rows per batch (the open bins of first fit).
    pub rows: usize,
    /// A document longer than a row: split into chunks (true), or truncated (false).
    pub split: bool,
}

/// One feature of the window's documents.
#[derive(Clone, Copy, Debug)]
pub struct FeatureInput<'a> {
    /// The documents' values one after the other, as bytes (no padding between them).
    pub values: &'a [u8],
    /// Bytes per value.
    pub itemsize: usize,
    /// Values in each document.
    pub lengths: &'a [i32],
}

/// The packed batches of a window.
#[derive(Debug, Default)]
pub struct Packed {
    /// Batches made (each `rows` rows).
    pub batches: usize,
    /// Per feature: `[batches, rows, seq_len]` values as bytes (zeros on padding).
    pub values: Vec<Vec<u8>>,
    /// Per feature: `[batches, rows, seq_len]` segment ids (1-based; 0 = padding).
    pub segment_ids: Vec<Vec<i32>>,
    /// Per feature: `[batches, rows, seq_len]` positions within the segment.
    pub positions: Vec<Vec<i32>>,
    /// `[batches, rows]`: whether the row holds a segment.
    pub row_used: Vec<bool>,
    /// Documents cut to fit (with `split: false`).
    pub truncated_documents: u64,
    /// Values dropped by those cuts, over all features.
    pub truncated_values: u64,
    /// Documents split into more than one chunk.
    pub split_documents: u64,
    /// Documents with no values at all (they make no segment).
    pub empty_documents: u64,
    /// Values placed, over all features.
    pub values_packed: u64,
}

fn bad(detail: String) -> Error {
    Error::spec(None, format!("pack: {detail}"))
}

/// Packs one window of documents (see the module docs).
///
/// # Errors
/// The features disagree on the number of documents, a length is negative, the lengths do not
/// add up to the values given, a size is zero, or the output cannot be allocated.
pub fn pack(features: &[FeatureInput<'_>], cfg: &PackConfig) -> Result<Packed> {
    let nf = features.len();
    if nf == 0 || cfg.seq_lens.len() != nf {
        return Err(bad(format!(
            "{nf} features and {} row lengths",
            cfg.seq_lens.len()
        )));
    }
    if cfg.rows == 0 || cfg.seq_lens.contains(&0) {
        return Err(bad("rows and row lengths must be positive".into()));
    }
    let docs = features[0].lengths.len();
    let mut starts = Vec::with_capacity(nf);
    for (f, feat) in features.iter().enumerate() {
        if feat.lengths.len() != docs {
            return Err(bad(format!(
                "feature {f} has {} lengths, feature 0 has {docs}",
                feat.lengths.len()
            )));
        }
        if feat.itemsize == 0 {
            return Err(bad(format!("feature {f}: values of 0 bytes")));
        }
        // Where each document's values start, checked against the bytes that exist.
        let mut start = Vec::new();
        start
            .try_reserve(docs)
            .map_err(|e| bad(format!("{docs} documents: {e}")))?;
        let mut at = 0usize;
        for &l in feat.lengths {
            let l = usize::try_from(l).map_err(|_| bad(format!("feature {f}: length {l}")))?;
            start.push(at);
            at = at.saturating_add(l);
        }
        if at.checked_mul(feat.itemsize) != Some(feat.values.len()) {
            return Err(bad(format!(
                "feature {f}: {} bytes of values, the lengths sum to {at} values of {} bytes",
                feat.values.len(),
                feat.itemsize
            )));
        }
        starts.push(start);
    }
    // Two passes: first fit decides every chunk's place from the lengths alone, then the
    // outputs are allocated once, zeroed by the allocator (untouched padding pages cost
    // nothing), and filled. Growing them batch by batch copied and zero-filled them again.
    let mut p = Packer::new(features, cfg);
    for doc in 0..docs {
        p.place_document(doc)?;
    }
    p.fill(&starts)
}

/// A row being filled: values used per feature, and segments placed.
struct Row {
    used: Vec<usize>,
    segments: i32,
}

/// Where one chunk of a document goes: its row (of all batches) and segment. Place `i`'s
/// features are `Packer::parts[i * nf..(i + 1) * nf]`.
struct Place {
    doc: usize,
    row: usize,
    segment: i32,
}

struct Packer<'a, 'b> {
    features: &'b [FeatureInput<'a>],
    cfg: &'b PackConfig,
    open: Vec<Row>,
    places: Vec<Place>,
    /// `(start in the document, values, start in the row)` per place and feature.
    parts: Vec<(usize, usize, usize)>,
    out: Packed,
}

impl<'a, 'b> Packer<'a, 'b> {
    fn new(features: &'b [FeatureInput<'a>], cfg: &'b PackConfig) -> Self {
        Packer {
            features,
            cfg,
            open: Vec::new(),
            places: Vec::new(),
            parts: Vec::new(),
            out: Packed::default(),
        }
    }

    fn place_document(&mut self, doc: usize) -> Result<()> {
        let lens: Vec<usize> = self
            .features
            .iter()
            .map(|f| f.lengths[doc] as usize)
            .collect();
        if lens.iter().all(|&l| l == 0) {
            self.out.empty_documents += 1;
            return Ok(());
        }
        let seq = &self.cfg.seq_lens;
        let chunks = if self.cfg.split {
            lens.iter()
                .zip(seq)
                .map(|(&l, &s)| l.div_ceil(s))
                .max()
                .unwrap_or(1)
                .max(1)
        } else {
            let cut: usize = lens
                .iter()
                .zip(seq)
                .map(|(&l, &s)| l.saturating_sub(s))
                .sum();
            if cut > 0 {
                self.out.truncated_documents += 1;
                self.out.truncated_values += cut as u64;
            }
            1
        };
        if chunks > 1 {
            self.out.split_documents += 1;
        }
        for c in 0..chunks {
            // This chunk's [start, start + len) of each feature (a later chunk may be empty in
            // a shorter feature: it still makes a segment, for the features that go on).
            let part: Vec<(usize, usize)> = lens
                .iter()
                .zip(seq)
                .map(|(&l, &s)| {
                    let start = (c * s).min(l);
                    (start, (l - start).min(s))
                })
                .collect();
            self.place_chunk(doc, &part)?;
        }
        Ok(())
    }

    fn place_chunk(&mut self, doc: usize, part: &[(usize, usize)]) -> Result<()> {
        let seq = &self.cfg.seq_lens;
        let fits = |row: &Row| {
            row.used
                .iter()
                .zip(part)
                .zip(seq)
                .all(|((&u, &(_, n)), &s)| u + n <= s)
        };
        let row = match self.open.iter().position(fits) {
            Some(r) => r,
            None => {
                if self.open.len() == self.cfg.rows {
                    self.open.clear(); // the batch is complete
                }
                if self.open.is_empty() {
                    self.new_batch()?;
                }
                self.open.push(Row {
                    used: vec![0; part.len()],
                    segments: 0,
                });
                let r = self.open.len() - 1;
                let at = (self.out.batches - 1) * self.cfg.rows + r;
                self.out.row_used[at] = true;
                r
            }
        };
        let open_row = &mut self.open[row];
        open_row.segments += 1;
        // Amortised growth, refused (not aborted) when the memory is not there.
        self.places
            .try_reserve(1)
            .and_then(|()| self.parts.try_reserve(part.len()))
            .map_err(|e| bad(format!("placements: {e}")))?;
        self.places.push(Place {
            doc,
            row: (self.out.batches - 1) * self.cfg.rows + row,
            segment: open_row.segments,
        });
        for (f, &(start, n)) in part.iter().enumerate() {
            self.parts.push((start, n, open_row.used[f]));
            open_row.used[f] += n;
            self.out.values_packed += n as u64;
        }
        Ok(())
    }

    /// Opens the next batch: its rows are marked unused until a chunk opens them.
    fn new_batch(&mut self) -> Result<()> {
        let rows = self.cfg.rows;
        self.out
            .row_used
            .try_reserve(rows)
            .map_err(|e| bad(format!("{rows} more rows: {e}")))?;
        self.out
            .row_used
            .resize(self.out.row_used.len() + rows, false);
        self.out.batches += 1;
        Ok(())
    }

    /// Allocates the outputs (zeroed) and copies every placed chunk in.
    fn fill(mut self, starts: &[Vec<usize>]) -> Result<Packed> {
        let rows = self.out.batches * self.cfg.rows;
        for (f, feat) in self.features.iter().enumerate() {
            let cells = rows
                .checked_mul(self.cfg.seq_lens[f])
                .ok_or_else(|| bad(format!("{rows} rows of {} values", self.cfg.seq_lens[f])))?;
            let bytes = cells
                .checked_mul(feat.itemsize)
                .ok_or_else(|| bad(format!("{cells} values of {} bytes", feat.itemsize)))?;
            let refused = |e: AllocError| bad(format!("packed output: {e}"));
            self.out
                .values
                .push(try_zeroed::<u8>(bytes).map_err(refused)?);
            self.out
                .segment_ids
                .push(try_zeroed::<i32>(cells).map_err(refused)?);
            self.out
                .positions
                .push(try_zeroed::<i32>(cells).map_err(refused)?);
        }
        let outputs = self
            .out
            .values
            .iter_mut()
            .zip(&mut self.out.segment_ids)
            .zip(&mut self.out.positions);
        for (f, (((values, segment_ids), positions), (feat, doc_starts))) in
            outputs.zip(self.features.iter().zip(starts)).enumerate()
        {
            let (size, seq_len) = (feat.itemsize, self.cfg.seq_lens[f]);
            let parts = self.parts.iter().skip(f).step_by(self.features.len());
            for (place, &(start, n, at)) in self.places.iter().zip(parts) {
                if n == 0 {
                    continue;
                }
                let cell = place.row * seq_len + at;
                let src = (doc_starts[place.doc] + start) * size;
                values[cell * size..(cell + n) * size]
                    .copy_from_slice(&feat.values[src..src + n * size]);
                segment_ids[cell..cell + n].fill(place.segment);
                for (i, p) in positions[cell..cell + n].iter_mut().enumerate() {
                    *p = i as i32; // n <= seq_len, which fits an i32 (a row is < 1 GiB)
                }
            }
        }
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documents of one i32 feature: `docs[i]` is document i's values.
    fn window(docs: &[Vec<i32>]) -> (Vec<u8>, Vec<i32>) {
        let values = docs
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        (values, docs.iter().map(|d| d.len() as i32).collect())
    }

    fn ints(bytes: &[u8]) -> Vec<i32> {
        bytes
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn run(docs: &[Vec<i32>], seq_len: usize, rows: usize, split: bool) -> Packed {
        let (values, lengths) = window(docs);
        let feat = FeatureInput {
            values: &values,
            itemsize: 4,
            lengths: &lengths,
        };
        pack(
            &[feat],
            &PackConfig {
                seq_lens: vec![seq_len],
                rows,
                split,
            },
        )
        .unwrap()
    }

    #[test]
    fn first_fit_fills_the_open_rows_in_order() {
        // Rows of 4, 2 rows a batch: [1 1 1][2 2] then [3] goes back to row 0, [4 4 4] fits
        // nowhere: the batch is done and [4 4 4] opens the next.
        let docs = vec![vec![1, 1, 1], vec![2, 2], vec![3], vec![4, 4, 4]];
        let p = run(&docs, 4, 2, true);
        assert_eq!(p.batches, 2);
        assert_eq!(
            ints(&p.values[0]),
            [1, 1, 1, 3, 2, 2, 0, 0, 4, 4, 4, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            p.segment_ids[0],
            [1, 1, 1, 2, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            p.positions[0],
            [0, 1, 2, 0, 0, 1, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(p.row_used, [true, true, true, false]);
        assert_eq!(p.values_packed, 9);
    }

    #[test]
    fn long_documents_split_or_truncate() {
        let docs = vec![(1..=7).collect::<Vec<i32>>(), vec![9]];
        let split = run(&docs, 3, 4, true);
        assert_eq!(split.split_documents, 1);
        assert_eq!(ints(&split.values[0]), [1, 2, 3, 4, 5, 6, 7, 9, 0, 0, 0, 0]);
        assert_eq!(split.positions[0], [0, 1, 2, 0, 1, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(split.segment_ids[0], [1, 1, 1, 1, 1, 1, 1, 2, 0, 0, 0, 0]);
        let cut = run(&docs, 3, 4, false);
        assert_eq!((cut.truncated_documents, cut.truncated_values), (1, 4));
        assert_eq!(ints(&cut.values[0])[..6], [1, 2, 3, 9, 0, 0]);
    }

    #[test]
    fn empty_documents_make_no_segment_and_features_pack_in_step() {
        // inputs and targets: a document fits a row only where both have room.
        let (iv, il) = window(&[vec![1, 1], vec![], vec![2], vec![3, 3]]);
        let (tv, tl) = window(&[vec![7], vec![], vec![8, 8], vec![9]]);
        let features = [
            FeatureInput {
                values: &iv,
                itemsize: 4,
                lengths: &il,
            },
            FeatureInput {
                values: &tv,
                itemsize: 4,
                lengths: &tl,
            },
        ];
        let p = pack(
            &features,
            &PackConfig {
                seq_lens: vec![4, 2],
                rows: 3,
                split: true,
            },
        )
        .unwrap();
        assert_eq!(p.empty_documents, 1);
        // Row 0: doc 0 (targets 1 of 2); doc 2's targets (2) do not fit: row 1; doc 3 back in 0.
        assert_eq!(ints(&p.values[0]), [1, 1, 3, 3, 2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ints(&p.values[1]), [7, 9, 8, 8, 0, 0]);
        assert_eq!(p.segment_ids[1], [1, 2, 1, 1, 0, 0]);
        assert_eq!(p.row_used, [true, true, false]);
    }

    #[test]
    fn every_value_is_placed_once() {
        let mut rng = 12345u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..50 {
            let n = (next() % 40) as usize;
            let docs: Vec<Vec<i32>> = (0..n)
                .map(|i| {
                    (0..(next() % 20) as i32)
                        .map(|j| (i as i32) * 1000 + j + 1)
                        .collect()
                })
                .collect();
            let p = run(&docs, 8, (next() % 4 + 1) as usize, true);
            let mut got: Vec<i32> = ints(&p.values[0]).into_iter().filter(|&v| v != 0).collect();
            let mut want: Vec<i32> = docs.concat();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (v, l) = window(&[vec![1, 2]]);
        let ok = FeatureInput {
            values: &v,
            itemsize: 4,
            lengths: &l,
        };
        let cfg = PackConfig {
            seq_lens: vec![4],
            rows: 2,
            split: true,
        };
        assert!(pack(&[], &cfg).is_err());
        assert!(pack(
            &[FeatureInput {
                values: &v[..4],
                ..ok
            }],
            &cfg
        )
        .is_err());
        assert!(pack(
            &[FeatureInput {
                lengths: &[3],
                ..ok
            }],
            &cfg
        )
        .is_err());
        assert!(pack(
            &[FeatureInput {
                lengths: &[-1],
                ..ok
            }],
            &cfg
        )
        .is_err());
        assert!(pack(
            &[ok],
            &PackConfig {
                rows: 0,
                ..cfg.clone()
            }
        )
        .is_err());
        assert!(pack(
            &[ok],
            &PackConfig {
                seq_lens: vec![0],
                ..cfg
            }
        )
        .is_err());
    }
}
