//! The interleave's order, for the Loader's native stream: the steps of
//! `jaxrec/_loader/interleave.py`'s `steps`, on the same state, step for step.
//!
//! `cycle_length` pieces are open at once; a round takes `block_length` records of each open
//! piece in slot order (fewer at a piece's end); an ended piece's slot goes to the next piece
//! of the list, or closes; free slots fill before each round. Every piece's length is known,
//! so stretches of whole rounds in which no piece ends are one step ([`Step::Rounds`]).

/// A position in the interleave (Python's `InterleaveState`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interleave {
    /// The first piece not opened yet.
    pub next_piece: usize,
    /// `(piece, records taken)` of each open piece, in slot order.
    pub slots: Vec<(usize, u64)>,
    /// The slot the current round continues with (0: the round has not started).
    pub at: usize,
    /// Records slot `at` already gave of its current block.
    pub in_block: u64,
}

/// One step of the interleave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Whole rounds in which no piece ends: in round `r`, `block_length` records of each of
    /// `pieces` in turn, from its record `starts[j] + r * block_length` on.
    Rounds {
        /// The open pieces, in slot order.
        pieces: Vec<usize>,
        /// Records each had given before.
        starts: Vec<u64>,
        /// How many rounds.
        rounds: u64,
    },
    /// Consecutive records of one piece.
    Run {
        /// The piece.
        piece: usize,
        /// Its first record of the run.
        start: u64,
        /// Records in the run.
        count: u64,
    },
}

impl Interleave {
    /// Opens pieces into free slots, as a round does before it starts.
    pub fn fill(&mut self, num_pieces: usize, cycle_length: usize) {
        while self.slots.len() < cycle_length && self.next_piece < num_pieces {
            self.slots.push((self.next_piece, 0));
            self.next_piece += 1;
        }
    }

    /// The piece in slot `at` has ended: its slot goes to the next piece, or closes.
    pub fn finish_slot(&mut self, num_pieces: usize) {
        if self.next_piece < num_pieces {
            self.slots[self.at] = (self.next_piece, 0);
            self.next_piece += 1;
            self.at += 1;
        } else {
            self.slots.remove(self.at);
        }
        if self.at >= self.slots.len() {
            self.at = 0;
        }
    }

    /// Slot `at` gave the rest of its block, `count` records; `length`: its piece's.
    fn took(&mut self, count: u64, length: u64, num_pieces: usize) {
        self.in_block = 0;
        let taken = self.slots[self.at].1 + count;
        if taken == length {
            self.finish_slot(num_pieces);
        } else {
            self.slots[self.at].1 = taken;
            self.at = (self.at + 1) % self.slots.len();
        }
    }

    /// True when every piece has been read to its end.
    pub fn done(&self, num_pieces: usize) -> bool {
        self.slots.is_empty() && self.next_piece >= num_pieces
    }

    /// The next step of at most `left` records (`left` > 0), advancing the state past it;
    /// `None` at the interleave's end. Python's `steps` yields these one after another while
    /// records are left.
    pub fn step(
        &mut self,
        lengths: &[u64],
        cycle_length: usize,
        block_length: u64,
        left: u64,
    ) -> Option<Step> {
        let n = lengths.len();
        loop {
            if self.at == 0 {
                self.fill(n, cycle_length);
                if self.slots.is_empty() {
                    return None;
                }
                if self.in_block == 0 {
                    let per_round = block_length * self.slots.len() as u64;
                    // Rounds every open piece survives with a record to spare (its end needs
                    // the careful path below).
                    let rounds = self
                        .slots
                        .iter()
                        .map(|&(p, t)| (lengths[p].saturating_sub(t + 1)) / block_length)
                        .fold(left / per_round, u64::min);
                    if rounds >= 1 {
                        let step = Step::Rounds {
                            pieces: self.slots.iter().map(|s| s.0).collect(),
                            starts: self.slots.iter().map(|s| s.1).collect(),
                            rounds,
                        };
                        for slot in &mut self.slots {
                            slot.1 += rounds * block_length;
                        }
                        return Some(step);
                    }
                }
            }
            let (piece, taken) = self.slots[self.at];
            let length = lengths[piece];
            let count = (block_length - self.in_block).min(length.saturating_sub(taken));
            if count == 0 {
                self.in_block = 0;
                self.finish_slot(n);
                continue;
            }
            if count > left {
                // Stops inside the block: the slot keeps its turn, with the block's rest to go.
                self.slots[self.at].1 = taken + left;
                self.in_block += left;
                return Some(Step::Run {
                    piece,
                    start: taken,
                    count: left,
                });
            }
            self.took(count, length, n);
            return Some(Step::Run {
                piece,
                start: taken,
                count,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of the interleave from `state` on, `(piece, record)` in order, taken in
    /// takes of `take` records.
    fn order(lengths: &[u64], cycle: usize, k: u64, take: u64) -> Vec<(usize, u64)> {
        let mut s = Interleave::default();
        let mut out = Vec::new();
        loop {
            let mut left = take;
            let before = out.len();
            while left > 0 {
                let Some(step) = s.step(lengths, cycle, k, left) else {
                    break;
                };
                match step {
                    Step::Rounds {
                        pieces,
                        starts,
                        rounds,
                    } => {
                        for r in 0..rounds {
                            for (p, st) in pieces.iter().zip(&starts) {
                                out.extend((0..k).map(|i| (*p, st + r * k + i)));
                            }
                        }
                        left -= rounds * k * pieces.len() as u64;
                    }
                    Step::Run {
                        piece,
                        start,
                        count,
                    } => {
                        out.extend((start..start + count).map(|i| (piece, i)));
                        left -= count;
                    }
                }
            }
            if out.len() == before {
                return out;
            }
        }
    }

    /// The interleave written out plainly, a block at a time.
    fn reference(lengths: &[u64], cycle: usize, k: u64) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        let mut slots: Vec<(usize, u64)> = Vec::new();
        let mut next = 0;
        loop {
            while slots.len() < cycle && next < lengths.len() {
                slots.push((next, 0));
                next += 1;
            }
            if slots.is_empty() {
                return out;
            }
            let mut at = 0;
            while at < slots.len() {
                let (p, t) = slots[at];
                let count = k.min(lengths[p] - t);
                out.extend((t..t + count).map(|i| (p, i)));
                if t + count == lengths[p] {
                    if next < lengths.len() {
                        slots[at] = (next, 0);
                        next += 1;
                        at += 1;
                    } else {
                        slots.remove(at);
                    }
                } else {
                    slots[at].1 = t + count;
                    at += 1;
                }
            }
        }
    }

    #[test]
    fn steps_give_the_plain_interleave_in_any_takes() {
        let cases: &[(&[u64], usize, u64)] = &[
            (&[5, 3, 8], 2, 2),
            (&[0, 4, 0, 9, 1], 3, 3),
            (&[16, 16, 16, 16], 4, 4),
            (&[100, 1, 37, 64, 2], 2, 16),
            (&[7], 8, 1),
            (&[], 2, 2),
        ];
        for &(lengths, cycle, k) in cases {
            let want = reference(lengths, cycle, k);
            for take in [1, 2, 3, 7, 16, 33, 1000] {
                assert_eq!(
                    order(lengths, cycle, k, take),
                    want,
                    "{lengths:?} cycle {cycle} block {k} takes of {take}"
                );
            }
        }
    }

    #[test]
    fn a_take_that_ends_inside_a_block_resumes_there() {
        let mut s = Interleave::default();
        assert_eq!(
            s.step(&[10, 10], 2, 4, 3),
            Some(Step::Run {
                piece: 0,
                start: 0,
                count: 3
            })
        );
        assert_eq!(
            (s.at, s.in_block, s.slots.clone()),
            (0, 3, vec![(0, 3), (1, 0)])
        );
        assert_eq!(
            s.step(&[10, 10], 2, 4, 100),
            Some(Step::Run {
                piece: 0,
                start: 3,
                count: 1
            })
        );
        assert!(!s.done(2));
    }
}
