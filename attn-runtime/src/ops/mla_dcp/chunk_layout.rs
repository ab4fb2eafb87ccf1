//! Byte layout of the history exchange buffers (spec `mla_dcp.md` §9.1/§9.3): `hist_send` and
//! `hist_recv` are D chunks, chunk p = { out `[N, T, L]` in the activation dtype, lse `[N, T]` f32 },
//! each part starting on a 256-byte boundary and each chunk padded to a 256-byte multiple, so the
//! A2A moves raw bytes (the fp32 lse bits stay exact) and every part is aligned for vector loads.
//!
//! In `hist_send`, chunk p holds the partials of global heads `[p·N, (p+1)·N)` (the peer that owns
//! them); in `hist_recv`, chunk p holds what rank p computed over its KV shard for this rank's heads.

use super::act_dtype::{ActDtype, ActivationElem};
use super::exchange::ExchangeError;

/// Alignment of each part and of each chunk, in bytes.
pub const CHUNK_ALIGN: usize = 256;

/// Geometry and offsets of one exchange buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    /// D: DCP world size (number of chunks).
    pub ranks: usize,
    /// N: heads owned by one rank (the gathered head count is D·N).
    pub heads: usize,
    /// T: decode tokens of this call.
    pub tokens: usize,
    /// L: latent width of a partial output row (512 for DeepSeek-V3).
    pub latent: usize,
    /// Activation dtype of the partial outputs.
    pub dtype: ActDtype,
    lse_offset: usize,
    chunk_bytes: usize,
}

fn round_up(x: usize, to: usize) -> Option<usize> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

impl ChunkLayout {
    /// Validates the geometry and computes the offsets (T may be 0: empty chunks).
    pub fn new(
        ranks: usize,
        heads: usize,
        tokens: usize,
        latent: usize,
        dtype: ActDtype,
    ) -> Result<Self, ExchangeError> {
        for (name, v) in [("ranks", ranks), ("heads", heads), ("latent", latent)] {
            if v == 0 {
                return Err(ExchangeError::ZeroDim { name });
            }
        }
        let overflow = || ExchangeError::Overflow {
            ranks,
            heads,
            tokens,
            latent,
        };
        let rows = heads.checked_mul(tokens).ok_or_else(overflow)?;
        let out_bytes = rows
            .checked_mul(latent)
            .and_then(|e| e.checked_mul(dtype.size_bytes()))
            .ok_or_else(overflow)?;
        let lse_offset = round_up(out_bytes, CHUNK_ALIGN).ok_or_else(overflow)?;
        let lse_end = rows
            .checked_mul(4)
            .and_then(|b| b.checked_add(lse_offset))
            .ok_or_else(overflow)?;
        let chunk_bytes = round_up(lse_end, CHUNK_ALIGN).ok_or_else(overflow)?;
        chunk_bytes.checked_mul(ranks).ok_or_else(overflow)?;
        Ok(ChunkLayout {
            ranks,
            heads,
            tokens,
            latent,
            dtype,
            lse_offset,
            chunk_bytes,
        })
    }

    /// Bytes of one chunk (padded).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Bytes of the whole buffer (D chunks).
    pub fn total_bytes(&self) -> usize {
        self.chunk_bytes * self.ranks
    }

    /// Byte offset of chunk p.
    pub fn chunk_offset(&self, p: usize) -> usize {
        p * self.chunk_bytes
    }

    /// Byte offset of the out part inside a chunk (0).
    pub fn out_offset_in_chunk(&self) -> usize {
        0
    }

    /// Byte offset of the lse part inside a chunk.
    pub fn lse_offset_in_chunk(&self) -> usize {
        self.lse_offset
    }

    /// Byte offset of out[h, t, l] of chunk p.
    pub fn out_byte(&self, p: usize, h: usize, t: usize, l: usize) -> usize {
        self.chunk_offset(p) + ((h * self.tokens + t) * self.latent + l) * self.dtype.size_bytes()
    }

    /// Byte offset of lse[h, t] of chunk p.
    pub fn lse_byte(&self, p: usize, h: usize, t: usize) -> usize {
        self.chunk_offset(p) + self.lse_offset + (h * self.tokens + t) * 4
    }

    fn check_host_len(
        what: &'static str,
        got: usize,
        expected: usize,
    ) -> Result<(), ExchangeError> {
        if got == expected {
            Ok(())
        } else {
            Err(ExchangeError::HostLength {
                what,
                got,
                expected,
            })
        }
    }

    /// The send buffer a history kernel writes for partials `out [T, D·N, L]` and `lse [T, D·N]`
    /// (host reference of the layout; padding bytes are 0).
    pub fn pack_host<E: ActivationElem>(
        &self,
        out: &[E],
        lse: &[f32],
    ) -> Result<Vec<u8>, ExchangeError> {
        self.check_dtype(E::DTYPE)?;
        let dn = self.ranks * self.heads;
        Self::check_host_len("out [T, D*N, L]", out.len(), self.tokens * dn * self.latent)?;
        Self::check_host_len("lse [T, D*N]", lse.len(), self.tokens * dn)?;
        let mut bytes = vec![0u8; self.total_bytes()];
        for p in 0..self.ranks {
            for h in 0..self.heads {
                for t in 0..self.tokens {
                    let g = p * self.heads + h;
                    for l in 0..self.latent {
                        let at = self.out_byte(p, h, t, l);
                        let v = out[(t * dn + g) * self.latent + l].to_bits();
                        bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
                    }
                    let at = self.lse_byte(p, h, t);
                    bytes[at..at + 4].copy_from_slice(&lse[t * dn + g].to_le_bytes());
                }
            }
        }
        Ok(bytes)
    }

    /// Chunk p of a buffer as (out `[N, T, L]`, lse `[N, T]`).
    pub fn unpack_chunk_host<E: ActivationElem>(
        &self,
        bytes: &[u8],
        p: usize,
    ) -> Result<(Vec<E>, Vec<f32>), ExchangeError> {
        self.check_dtype(E::DTYPE)?;
        Self::check_host_len("exchange buffer bytes", bytes.len(), self.total_bytes())?;
        if p >= self.ranks {
            return Err(ExchangeError::RankOutOfRange {
                rank: p,
                ranks: self.ranks,
            });
        }
        let mut out = Vec::with_capacity(self.heads * self.tokens * self.latent);
        let mut lse = Vec::with_capacity(self.heads * self.tokens);
        for h in 0..self.heads {
            for t in 0..self.tokens {
                for l in 0..self.latent {
                    let at = self.out_byte(p, h, t, l);
                    out.push(E::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])));
                }
            }
        }
        for h in 0..self.heads {
            for t in 0..self.tokens {
                let at = self.lse_byte(p, h, t);
                let b = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
                lse.push(f32::from_le_bytes(b));
            }
        }
        Ok((out, lse))
    }

    fn check_dtype(&self, got: ActDtype) -> Result<(), ExchangeError> {
        if got == self.dtype {
            Ok(())
        } else {
            Err(ExchangeError::DtypeMismatch {
                layout: self.dtype,
                got,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn offsets_are_aligned_and_padded() {
        // N = 16, T = 3, L = 512, bf16: out = 16·3·512·2 = 49152 B (aligned), lse = 192 B -> 49408.
        let c = ChunkLayout::new(4, 16, 3, 512, ActDtype::Bf16).unwrap();
        assert_eq!(c.lse_offset_in_chunk(), 49152);
        assert_eq!(c.chunk_bytes(), 49408);
        assert_eq!(c.total_bytes(), 4 * 49408);
        assert_eq!(c.chunk_bytes() % CHUNK_ALIGN, 0);
        // Odd sizes: N = 1, T = 1, L = 3 -> out 6 B, lse at 256, chunk 512.
        let c = ChunkLayout::new(2, 1, 1, 3, ActDtype::F16).unwrap();
        assert_eq!((c.lse_offset_in_chunk(), c.chunk_bytes()), (256, 512));
        assert_eq!(c.out_byte(1, 0, 0, 2), 512 + 4);
        assert_eq!(c.lse_byte(1, 0, 0), 512 + 256);
    }

    #[test]
    fn zero_tokens_gives_empty_chunks() {
        let c = ChunkLayout::new(2, 16, 0, 512, ActDtype::Bf16).unwrap();
        assert_eq!(c.total_bytes(), 0);
    }

    #[test]
    fn bad_geometry_is_a_typed_error() {
        assert!(matches!(
            ChunkLayout::new(0, 16, 1, 512, ActDtype::Bf16),
            Err(ExchangeError::ZeroDim { name: "ranks" })
        ));
        assert!(matches!(
            ChunkLayout::new(2, usize::MAX / 2, 4, 512, ActDtype::Bf16),
            Err(ExchangeError::Overflow { .. })
        ));
    }

    #[test]
    fn pack_then_unpack_gives_the_peer_head_slices() {
        let (d, n, t, l) = (3, 2, 2, 5);
        let c = ChunkLayout::new(d, n, t, l, ActDtype::Bf16).unwrap();
        let out: Vec<bf16> = (0..t * d * n * l)
            .map(|i| bf16::from_f32(i as f32 + 0.5))
            .collect();
        let lse: Vec<f32> = (0..t * d * n).map(|i| -(i as f32) - 0.25).collect();
        let bytes = c.pack_host(&out, &lse).unwrap();
        for p in 0..d {
            let (o, s) = c.unpack_chunk_host::<bf16>(&bytes, p).unwrap();
            for h in 0..n {
                for tt in 0..t {
                    let g = p * n + h;
                    assert_eq!(s[h * t + tt], lse[tt * d * n + g]);
                    for ll in 0..l {
                        assert_eq!(o[(h * t + tt) * l + ll], out[(tt * d * n + g) * l + ll]);
                    }
                }
            }
        }
        assert!(matches!(
            c.unpack_chunk_host::<half::f16>(&bytes, 0),
            Err(ExchangeError::DtypeMismatch { .. })
        ));
        assert!(matches!(
            c.unpack_chunk_host::<bf16>(&bytes, 3),
            Err(ExchangeError::RankOutOfRange { rank: 3, ranks: 3 })
        ));
        assert!(matches!(
            c.pack_host(&out[1..], &lse),
            Err(ExchangeError::HostLength { .. })
        ));
    }
}
