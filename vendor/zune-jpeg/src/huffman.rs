/*
 * Copyright (c) 2023.
 *
 * This software is free software;
 *
 * You can redistribute it or modify it under terms of the MIT, Apache License or Zlib license
 */

//! This file contains a single struct `HuffmanTable` that
//! stores Huffman tables needed during `BitStream` decoding.
#![allow(clippy::similar_names, clippy::module_name_repetitions)]

use alloc::string::ToString;

use crate::errors::DecodeErrors;

/// Determines how many bits of lookahead we have for our bitstream decoder.

pub const HUFF_LOOKAHEAD: u8 = 9;

/// Bits of lookahead of the table that decodes a whole small AC coefficient at once.
pub const FAST_AC_BITS: u8 = 11;

/// A struct which contains necessary tables for decoding a JPEG
/// huffman encoded bitstream

#[derive(Clone)]
pub struct HuffmanTable {
    // element `[0]` of each array is unused
    /// largest code of length k
    pub(crate) maxcode: [i32; 18],
    /// offset for codes of length k
    /// Answers the question, where do code-lengths of length k end
    /// Element 0 is unused
    pub(crate) offset:  [i32; 18],
    /// lookup table for fast decoding
    ///
    /// top  bits above HUFF_LOOKAHEAD contain the code length.
    ///
    /// Lower (8) bits contain the symbol in order of increasing code length.
    pub(crate) lookup:  [i32; 1 << HUFF_LOOKAHEAD],

    /// A table which can be used to decode small AC coefficients and
    /// do an equivalent of receive_extend
    pub(crate) ac_lookup: Option<[i16; 1 << FAST_AC_BITS]>,

    /// `ac_lookup` for up to two AC coefficients at once: where the `FAST_AC_BITS` bits
    /// peeked hold one fast coefficient and, after it, all of a second one whose value fits
    /// 6 bits, both (see `BitStream::decode_mcu_block`). Bits 0-3: the bits both take (or the
    /// first alone), 4-5: 0, so that the low 6 bits are that count as a shift takes it; 6-9:
    /// the first's bits; 10-13 and 14-17: their runs (0 without a second); 18-23: the second's
    /// value as a 6-bit signed number, 24-31: the first's as an `i8` (0 without a second).
    /// 0: the first is not a fast coefficient.
    pub(crate) ac_pairs: Option<[u32; 1 << FAST_AC_BITS]>,

    /// Directly represent contents of a JPEG DHT marker
    ///
    /// \# number of symbols with codes of length `k` bits
    // bits[0] is unused
    /// Symbols in order of increasing code length
    pub(crate) values: [u8; 256]
}

impl HuffmanTable {
    pub fn new(
        codes: &[u8; 17], values: [u8; 256], is_dc: bool, is_progressive: bool
    ) -> Result<HuffmanTable, DecodeErrors> {
        #[cfg(feature = "std")]
        if let Some(table) = recent::find(codes, &values, is_dc, is_progressive) {
            return Ok(table);
        }
        let too_long_code = (i32::from(HUFF_LOOKAHEAD) + 1) << HUFF_LOOKAHEAD;
        let mut p = HuffmanTable {
            maxcode: [0; 18],
            offset: [0; 18],
            lookup: [too_long_code; 1 << HUFF_LOOKAHEAD],
            values,
            ac_lookup: None,
            ac_pairs: None
        };

        p.make_derived_table(is_dc, is_progressive, codes)?;
        #[cfg(feature = "std")]
        recent::keep(codes, is_dc, is_progressive, &p);

        Ok(p)
    }

    /// Create a new huffman tables with values that aren't fixed
    /// used by fill_mjpeg_tables
    pub fn new_unfilled(
        codes: &[u8; 17], values: &[u8], is_dc: bool, is_progressive: bool
    ) -> Result<HuffmanTable, DecodeErrors> {
        let mut buf = [0; 256];
        buf[..values.len()].copy_from_slice(values);
        HuffmanTable::new(codes, buf, is_dc, is_progressive)
    }

    /// Compute derived values for a Huffman table
    ///
    /// This routine performs some validation checks on the table
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        clippy::cast_sign_loss,
        clippy::too_many_lines,
        clippy::needless_range_loop
    )]
    fn make_derived_table(
        &mut self, is_dc: bool, _is_progressive: bool, bits: &[u8; 17]
    ) -> Result<(), DecodeErrors> {
        // build a list of code size
        let mut huff_size = [0; 257];
        // Huffman code lengths
        let mut huff_code: [u32; 257] = [0; 257];
        // figure C.1 make table of Huffman code length for each symbol
        let mut p = 0;

        for l in 1..=16 {
            let mut i = i32::from(bits[l]);
            // table overrun is checked before ,so we dont need to check
            while i != 0 {
                huff_size[p] = l as u8;
                p += 1;
                i -= 1;
            }
        }

        huff_size[p] = 0;

        let num_symbols = p;
        // Generate the codes themselves
        // We also validate that the counts represent a legal Huffman code tree
        let mut code = 0;
        let mut si = i32::from(huff_size[0]);

        p = 0;

        while huff_size[p] != 0 {
            while i32::from(huff_size[p]) == si {
                huff_code[p] = code;
                code += 1;
                p += 1;
            }
            // maximum code of length si, pre-shifted by 16-k bits
            self.maxcode[si as usize] = (code << (16 - si)) as i32;
            // code is now 1 more than the last code used for code-length si; but
            // it must still fit in si bits, since no code is allowed to be all ones.
            if (code as i32) >= (1 << si) {
                return Err(DecodeErrors::HuffmanDecode("Bad Huffman Table".to_string()));
            }

            code <<= 1;
            si += 1;
        }

        // Figure F.15 generate decoding tables for bit-sequential decoding
        p = 0;

        for l in 0..=16 {
            if bits[l] == 0 {
                // -1 if no codes of this length
                self.maxcode[l] = -1;
            } else {
                // offset[l]=codes[index of 1st symbol of code length l
                // minus minimum code of length l]
                self.offset[l] = (p as i32) - (huff_code[p]) as i32;
                p += usize::from(bits[l]);
            }
        }

        self.offset[17] = 0;
        // we ensure that decode terminates
        self.maxcode[17] = 0x000F_FFFF;

        /*
         * Compute lookahead tables to speed up decoding.
         * First we set all the table entries to 0(left justified), indicating "too long";
         * (Note too long was set during initialization)
         * then we iterate through the Huffman codes that are short enough and
         * fill in all the entries that correspond to bit sequences starting
         * with that code.
         */

        p = 0;

        for l in 1..=HUFF_LOOKAHEAD {
            for _ in 1..=i32::from(bits[usize::from(l)]) {
                // l -> Current code length,
                // p => Its index in self.code and self.values
                // Generate left justified code followed by all possible bit sequences
                let mut look_bits = (huff_code[p] as usize) << (HUFF_LOOKAHEAD - l);

                for _ in 0..1 << (HUFF_LOOKAHEAD - l) {
                    self.lookup[look_bits] =
                        (i32::from(l) << HUFF_LOOKAHEAD) | i32::from(self.values[p]);
                    look_bits += 1;
                }

                p += 1;
            }
        }
        // build an ac table that does an equivalent of decode and receive_extend
        if !is_dc {
            let mut fast = [255_u16; 1 << FAST_AC_BITS];
            for i in 0..num_symbols {
                let s = huff_size[i];
                if s <= FAST_AC_BITS {
                    let c = (huff_code[i] << (FAST_AC_BITS - s)) as usize;
                    let m = (1 << (FAST_AC_BITS - s)) as usize;
                    for j in 0..m {
                        fast[c + j] = i as u16;
                    }
                }
            }
            let mut fast_ac = [0_i16; 1 << FAST_AC_BITS];
            let bits = i32::from(FAST_AC_BITS);
            for i in 0..(1_usize << FAST_AC_BITS) {
                let fast_v = fast[i];
                if fast_v < 255 {
                    let rs = self.values[fast_v as usize];
                    let run = i32::from((rs >> 4) & 15);
                    let mag_bits = i32::from(rs & 15);
                    let len = i32::from(huff_size[fast_v as usize]);
                    if mag_bits != 0 && (len + mag_bits) <= bits {
                        let mut k = (((i as i32) << len) & ((1 << bits) - 1)) >> (bits - mag_bits);
                        let m = 1 << (mag_bits - 1);
                        if k < m {
                            k += (!0_i32 << mag_bits) + 1;
                        };
                        if (-128..=127).contains(&k) {
                            fast_ac[i] = ((k << 8) + (run << 4) + (len + mag_bits)) as i16;
                        }
                    }
                }
            }
            let mut pairs = [0_u32; 1 << FAST_AC_BITS];
            let run = |e: i16| ((e >> 4) & 15) as u32;
            let value = |e: i16| i32::from((e >> 8) as i8);
            for (i, pair) in pairs.iter_mut().enumerate() {
                let first = fast_ac[i];
                if first == 0 {
                    continue;
                }
                let len1 = (first & 15) as u32;
                // The bits after the first coefficient, left-aligned: a second coefficient
                // counts only when all of its bits are among them, and its value fits 6 bits.
                let next = (i << len1) & ((1 << FAST_AC_BITS) - 1);
                let second = fast_ac[next];
                let (total, run2, value2) = if second != 0
                    && (second & 15) as u32 <= u32::from(FAST_AC_BITS) - len1
                    && (-32..=31).contains(&value(second))
                {
                    (len1 + (second & 15) as u32, run(second), value(second))
                } else {
                    (len1, 0, 0)
                };
                *pair = total
                    | len1 << 6
                    | run(first) << 10
                    | run2 << 14
                    | (value2 as u32 & 63) << 18
                    | (value(first) as u32 & 255) << 24;
            }
            self.ac_lookup = Some(fast_ac);
            self.ac_pairs = Some(pairs);
        }

        // Validate symbols as being reasonable
        // For AC tables, we make no check, but accept all byte values 0..255
        // For DC tables, we require symbols to be in range 0..15
        if is_dc {
            for i in 0..num_symbols {
                let sym = self.values[i];

                if sym > 15 {
                    return Err(DecodeErrors::HuffmanDecode("Bad Huffman Table".to_string()));
                }
            }
        }

        Ok(())
    }
}

/// The tables this thread built last, by their DHT contents.
///
/// Most JPEGs of a dataset come from one encoder and carry the same Huffman tables (libjpeg's
/// standard ones unless it optimised them), and deriving the lookup tables costs as much as a
/// few hundred coefficients: a decoder that reads many small images finds them here instead.
#[cfg(feature = "std")]
mod recent {
    use std::cell::RefCell;
    use std::vec::Vec;

    use super::HuffmanTable;

    /// Tables kept per thread: an image uses up to 4 (DC and AC, luma and chroma).
    const KEPT: usize = 8;

    struct Entry {
        codes:          [u8; 17],
        is_dc:          bool,
        is_progressive: bool,
        table:          HuffmanTable
    }

    std::thread_local! {
        static TABLES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn find(
        codes: &[u8; 17], values: &[u8; 256], is_dc: bool, is_progressive: bool
    ) -> Option<HuffmanTable> {
        TABLES
            .try_with(|tables| {
                let tables = tables.try_borrow().ok()?;
                tables
                    .iter()
                    .find(|e| {
                        e.is_dc == is_dc
                            && e.is_progressive == is_progressive
                            && e.codes == *codes
                            && e.table.values == *values
                    })
                    .map(|e| e.table.clone())
            })
            .ok()
            .flatten()
    }

    pub(super) fn keep(codes: &[u8; 17], is_dc: bool, is_progressive: bool, table: &HuffmanTable) {
        let _ = TABLES.try_with(|tables| {
            if let Ok(mut tables) = tables.try_borrow_mut() {
                if tables.len() == KEPT {
                    tables.remove(0);
                }
                tables.push(Entry {
                    codes: *codes,
                    is_dc,
                    is_progressive,
                    table: table.clone()
                });
            }
        });
    }
}
