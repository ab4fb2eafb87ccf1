//! Decode-context-parallel token sharding of the paged latent cache (spec `mla_dcp.md`
//! §2.2–§2.3): which rank owns a token, where it lands in that rank's cache, how many
//! tokens of a sequence each rank holds, and the history/current split lengths.
//!
//! Tokens are dealt to ranks round-robin in runs of `interleave` consecutive positions,
//! inside "virtual blocks" of `block_size · dcp_size` tokens; every rank shares the same
//! block-table row, each physical block holding that rank's `block_size` tokens.

use thiserror::Error;

/// Geometry of the DCP sharding: D, I and B of §2.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcpLayout {
    /// D = `dcp_size`: ranks sharing one sequence's KV.
    pub dcp_size: u32,
    /// I = `cp_kv_cache_interleave_size`: consecutive tokens per rank turn.
    pub interleave: u32,
    /// B = `block_size`: tokens per physical block on one rank.
    pub block_size: u32,
}

/// Invalid DCP geometry or rank.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DcpLayoutError {
    /// `dcp_size` is 0.
    #[error("dcp_size = {0}; it must be >= 1")]
    DcpSize(u32),
    /// The interleave is 0 or does not divide the block size.
    #[error("interleave = {interleave} must be >= 1 and divide block_size = {block_size}")]
    Interleave {
        /// I: consecutive tokens per rank turn.
        interleave: u32,
        /// B: tokens per physical block.
        block_size: u32,
    },
    /// `dcp_rank` is not below `dcp_size`.
    #[error("dcp_rank = {rank} is outside [0, dcp_size = {dcp_size})")]
    Rank {
        /// The rank given.
        rank: u32,
        /// DCP world size D.
        dcp_size: u32,
    },
    /// An input has the wrong length.
    #[error("{what} has length {got}, expected {expected}")]
    Length {
        /// Name of the input.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The expected length.
        expected: usize,
    },
    /// A block-table entry is negative.
    #[error("block table entry {index} = {got} is negative")]
    NegativeBlock {
        /// Index of the entry.
        index: usize,
        /// Its value.
        got: i64,
    },
}

/// Where a token lives: its owning rank and its local position within that rank's
/// sequence (`vblk · B + local_off`, monotone in the global position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenPlacement {
    /// The rank that owns the token.
    pub owner: u32,
    /// Index of the virtual block (= block-table column).
    pub virtual_block: u64,
    /// Offset inside the owner's physical block, in `[0, B)`.
    pub local_offset: u64,
}

impl TokenPlacement {
    /// Position of the token in its owner's local sequence.
    pub fn local_position(&self, block_size: u32) -> u64 {
        self.virtual_block * u64::from(block_size) + self.local_offset
    }
}

impl DcpLayout {
    /// Checks D ≥ 1 and that I divides B (vLLM's config rule, §2.2).
    pub fn new(dcp_size: u32, interleave: u32, block_size: u32) -> Result<Self, DcpLayoutError> {
        if dcp_size == 0 {
            return Err(DcpLayoutError::DcpSize(dcp_size));
        }
        if interleave == 0 || block_size == 0 || !block_size.is_multiple_of(interleave) {
            return Err(DcpLayoutError::Interleave {
                interleave,
                block_size,
            });
        }
        Ok(DcpLayout {
            dcp_size,
            interleave,
            block_size,
        })
    }

    fn check_rank(&self, rank: u32) -> Result<(), DcpLayoutError> {
        if rank < self.dcp_size {
            Ok(())
        } else {
            Err(DcpLayoutError::Rank {
                rank,
                dcp_size: self.dcp_size,
            })
        }
    }

    /// §2.2 owner and local offset of the token at absolute position `p`.
    pub fn place(&self, p: u64) -> TokenPlacement {
        let (d, i, b) = (
            u64::from(self.dcp_size),
            u64::from(self.interleave),
            u64::from(self.block_size),
        );
        let virtual_block = p / (b * d);
        let off = p - virtual_block * b * d;
        TokenPlacement {
            owner: ((off / i) % d) as u32,
            virtual_block,
            local_offset: (off / (d * i)) * i + off % i,
        }
    }

    /// §2.2 slot mapping on `rank`: `Some(phys · B + local_off)` when the rank owns the
    /// token, `None` for the PAD (−1) slot that skips the write.
    pub fn slot_for(
        &self,
        p: u64,
        rank: u32,
        block_table_row: &[i32],
    ) -> Result<Option<i64>, DcpLayoutError> {
        self.check_rank(rank)?;
        let pl = self.place(p);
        if pl.owner != rank {
            return Ok(None);
        }
        let col = pl.virtual_block as usize;
        let phys = *block_table_row.get(col).ok_or(DcpLayoutError::Length {
            what: "block table row",
            got: block_table_row.len(),
            expected: col + 1,
        })?;
        if phys < 0 {
            return Err(DcpLayoutError::NegativeBlock {
                index: col,
                got: i64::from(phys),
            });
        }
        Ok(Some(
            i64::from(phys) * i64::from(self.block_size) + pl.local_offset as i64,
        ))
    }

    /// §2.3 closed form: tokens of a length-`s` sequence held by `rank`.
    pub fn n_local(&self, s: u64, rank: u32) -> u64 {
        let (d, i) = (u64::from(self.dcp_size), u64::from(self.interleave));
        let base = (s / i) / d * i;
        let rem = s - base * d;
        let r_start = u64::from(rank) * i;
        base + rem.saturating_sub(r_start).min(i)
    }

    /// Blocks per request on one rank for `max_model_len`: `ceil(len / (B · D))` (§2.2).
    pub fn max_blocks_per_request(&self, max_model_len: u64) -> u64 {
        max_model_len.div_ceil(u64::from(self.block_size) * u64::from(self.dcp_size))
    }
}

/// §2.3 history length of a request: keys before its current chunk.
pub fn history_len(seq_len: u64, query_len: u64) -> u64 {
    seq_len.saturating_sub(query_len)
}

/// §2.3 split-decode metadata of one rank for a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcpDecodeMetadata {
    /// `cp_history_seq_len[b] = n_local(history_len_b, r)`, zero-padded to the padded batch.
    pub history_seq_lens: Vec<u64>,
    /// `cp_seq_len[b] = n_local(S_b, r)` (unsplit path), zero-padded likewise.
    pub local_seq_lens: Vec<u64>,
    /// Cumulative query ends (TND layout): `q_len = [4, 4]` gives `[4, 8]`.
    pub actual_seq_lengths_q: Vec<u64>,
}

/// Builds [`DcpDecodeMetadata`] for `rank` from global `seq_lens` and `query_lens`,
/// padding the per-request vectors to `padded_batch` rows (≥ the batch size).
pub fn decode_metadata(
    layout: &DcpLayout,
    rank: u32,
    seq_lens: &[u64],
    query_lens: &[u64],
    padded_batch: usize,
) -> Result<DcpDecodeMetadata, DcpLayoutError> {
    layout.check_rank(rank)?;
    if query_lens.len() != seq_lens.len() {
        return Err(DcpLayoutError::Length {
            what: "query_lens",
            got: query_lens.len(),
            expected: seq_lens.len(),
        });
    }
    let rows = padded_batch.max(seq_lens.len());
    let mut meta = DcpDecodeMetadata {
        history_seq_lens: vec![0; rows],
        local_seq_lens: vec![0; rows],
        actual_seq_lengths_q: Vec::with_capacity(seq_lens.len()),
    };
    let mut end = 0;
    for (b, (&s, &q)) in seq_lens.iter().zip(query_lens).enumerate() {
        meta.history_seq_lens[b] = layout.n_local(history_len(s, q), rank);
        meta.local_seq_lens[b] = layout.n_local(s, rank);
        end += q;
        meta.actual_seq_lengths_q.push(end);
    }
    Ok(meta)
}
