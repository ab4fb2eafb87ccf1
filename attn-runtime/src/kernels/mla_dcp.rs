//! MLA decode with decode context parallelism (spec `mla_dcp.md` §9.2) written in the DSL:
//! the split-KV history pass over the rank's paged latent shard, its reduce straight into the
//! exchange layout, the current-chunk attention (causal within the chunk), the one LSE combine,
//! and a V-up fallback (the op uses cuBLAS by default). Partials are `(o, lse)` with a natural-log
//! f32 LSE; an empty row is `o = 0, lse = -inf`, never NaN (spec §3.2 rule 4).

use crate::ops::mla_dcp::plan::{HIST_BLOCK_H_WARPGROUPS, HIST_KV_TILE_WARPGROUPS};
use attn_dsl::driver::Compiled;
use attn_dsl::ir::Function;
use attn_dsl::passes::assume::Promises;
use attn_dsl::template::Template;
use attn_dsl::Binding;
use thiserror::Error;

/// A kernel of the `mla` module could not be found or specialized.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MlaKernelError {
    #[error("no kernel `{0}` in the `mla` module; kernels: mla_history, mla_history_reduce, mla_current, mla_combine, mla_v_up, mla_combine_v_up")]
    Unknown(String),
    #[error("specializing `{kernel}` failed: {message}")]
    Specialize { kernel: String, message: String },
}

/// The run-time template of `kernel` (what `#[module]` embedded for it).
pub fn template(kernel: &str) -> Result<&'static Template, MlaKernelError> {
    Ok(match kernel {
        "mla_history" => &mla::MLA_HISTORY_TEMPLATE,
        "mla_history_reduce" => &mla::MLA_HISTORY_REDUCE_TEMPLATE,
        "mla_current" => &mla::MLA_CURRENT_TEMPLATE,
        "mla_combine" => &mla::MLA_COMBINE_TEMPLATE,
        "mla_v_up" => &mla::MLA_V_UP_TEMPLATE,
        "mla_combine_v_up" => &mla::MLA_COMBINE_V_UP_TEMPLATE,
        other => return Err(MlaKernelError::Unknown(other.to_string())),
    })
}

/// Specializes `kernel` on `bindings` through the same pipeline `instantiate!` runs
/// (specialize → passes → CUDA): the optimized IR and the CUDA source.
pub fn compile_kernel(kernel: &str, bindings: &[Binding]) -> Result<Compiled, MlaKernelError> {
    compile_kernel_assuming(kernel, bindings, &Promises::default())
}

/// [`compile_kernel`] with the parameters `promises` names promised multiples of 16 (what
/// proves the latent rows 16-byte aligned, so they move by `cp.async`) or in `int`'s range;
/// the caller launches it only with arguments that keep the promises.
pub fn compile_kernel_assuming(
    kernel: &str,
    bindings: &[Binding],
    promises: &Promises,
) -> Result<Compiled, MlaKernelError> {
    let consts: Vec<(&str, attn_dsl::ConstValue)> = bindings
        .iter()
        .map(|b| (b.name.as_str(), b.value.clone()))
        .collect();
    let failed = |message: String| MlaKernelError::Specialize {
        kernel: kernel.to_string(),
        message,
    };
    template(kernel)?
        .specialize_with(&consts, |f| {
            f.warpgroup_mma = for_warpgroups(kernel, bindings);
            promises.apply(f)
        })
        .map_err(|e| failed(e.to_string()))
}

/// Whether `kernel` on `bindings` is written for warpgroup MMAs: its source then carries them
/// beside `mma.sync` (sm_90a compiles the first, every other target the second), and the plan
/// picks it only where the JIT compiles sm_90a. `mla_history` qualifies at 64 heads, whose
/// 4 × 2 warp grid is two warpgroups, each one column half of the scores and of the output,
/// over the 64-key tiles that plan gives it (an `mma.sync` plan forced to 64 heads keeps
/// 32-key tiles, and must not be compiled for a producer warpgroup it will not run);
/// `mla_combine_v_up` where the plan asks for it (`WARPGROUPS`, on 64-token tiles).
pub fn for_warpgroups(kernel: &str, bindings: &[Binding]) -> bool {
    let bound = |name: &str, v: attn_dsl::ConstValue| {
        bindings.iter().any(|b| b.name == name && b.value == v)
    };
    let int = |v: u32| attn_dsl::ConstValue::Int(v.into());
    let wanted = match kernel {
        "mla_history" => {
            bound("BLOCK_H", int(HIST_BLOCK_H_WARPGROUPS))
                && bound("KV_TILE", int(HIST_KV_TILE_WARPGROUPS))
        }
        "mla_combine_v_up" => bound("WARPGROUPS", attn_dsl::ConstValue::Bool(true)),
        _ => false,
    };
    attn_dsl::features::warpgroup_mma() && wanted
}

/// The optimized IR of `kernel` on `bindings`: what the CPU executor runs.
pub fn specialize_kernel(kernel: &str, bindings: &[Binding]) -> Result<Function, MlaKernelError> {
    Ok(compile_kernel(kernel, bindings)?.specialized.ir)
}

use attn_dsl_macros::module;

#[module]
pub mod mla {
    /// Merges partials `(o [P, 512], lse [P])` of one row (spec §3.2): only finite LSEs count,
    /// invalid outputs are zeroed before they are weighted, f32 accumulation, one normalization.
    /// An empty row gives `(0, -inf)`.
    #[device]
    fn merge_partials(o: Tile, lse: Tile, present: Tile) -> (Tile, f32) {
        let valid = present & (lse > f32::NEG_INFINITY) & (lse < f32::INFINITY);
        let m_raw = select(valid, lse, f32::NEG_INFINITY).max(0);
        let m = select(m_raw == f32::NEG_INFINITY, 0.0, m_raw);
        let w = select(valid, exp(lse - m), 0.0);
        let o_valid = select(valid.unsqueeze(1), o, 0.0);
        let num = (o_valid * w.unsqueeze(1)).sum(0);
        let den = w.sum(0);
        let out = num / select(den == 0.0, 1.0, den);
        let lse_out = select(
            den == 0.0,
            f32::NEG_INFINITY,
            m + log(select(den == 0.0, 1.0, den)),
        );
        (out, lse_out)
    }

    /// The merge of partials `(o, lse)` of one row (spec §3.2) once their weighted rows and
    /// weights are summed (`weighted_part`, in part order, from zero): one normalization, and
    /// the merged LSE. A row whose parts all weigh 0 gives `(0, -inf)`.
    #[device]
    fn normalized(num: Tile, den: f32, m: f32) -> (Tile, f32) {
        let empty = den == 0.0;
        let den = select(empty, 1.0, den);
        (num / den, select(empty, f32::NEG_INFINITY, m + log(den)))
    }

    /// Whether `x` is finite (NaN is not): the partials whose LSE is count (spec §3.2).
    #[device]
    fn finite(x: f32) -> bool {
        (x > f32::NEG_INFINITY) & (x < f32::INFINITY)
    }

    /// `x` where it is finite, else `fallback`.
    #[device]
    fn finite_or(x: f32, fallback: f32) -> f32 {
        select(finite(x), x, fallback)
    }

    /// The weights' reference point of a merge: the largest finite LSE, or 0 when none is.
    #[device]
    fn merge_max(m_raw: f32) -> f32 {
        select(m_raw == f32::NEG_INFINITY, 0.0, m_raw)
    }

    /// One part's weighted row and weight under the merge's maximum `m` (spec §3.2): only
    /// finite LSEs count, and an invalid part's row is zeroed before it is weighted.
    #[device]
    fn weighted_part(o: Tile, lse: f32, m: f32) -> (Tile, f32) {
        let valid = finite(lse);
        let w = select(valid, exp(lse - m), 0.0);
        (select(valid, o, 0.0) * w, w)
    }

    /// [`weighted_part`] for a tile of rows, each with its own LSE: `o [R, C]`, `lse [R]`.
    #[device]
    fn weighted_rows(o: Tile, lse: Tile, m: Tile) -> (Tile, Tile) {
        let valid = finite(lse);
        let w = select(valid, exp(lse - m), 0.0);
        (select(valid.unsqueeze(1), o, 0.0) * w.unsqueeze(1), w)
    }

    /// [`normalized`]'s rows for a tile of rows: `num [R, C] / den [R]`, a row whose parts all
    /// weigh 0 giving 0.
    #[device]
    fn normalized_rows(num: Tile, den: Tile) -> Tile {
        num / select(den == 0.0, 1.0, den).unsqueeze(1)
    }

    /// Columns `cols [C]` of the latent rows starting at `rows [R]` (rows with `ok` false
    /// read 0): one step of an operand streamed into a `dot`.
    #[device]
    fn row_columns(rows: Tile, cols: Tile, ok: Tile) -> Tile {
        load(rows.unsqueeze(1) + cols.unsqueeze(0), ok.unsqueeze(1), 0.0)
    }

    /// Turns an online-softmax state into a normalized partial `(o, lse)`; rows that saw no key
    /// give `(0, -inf)`.
    #[device]
    fn finish_partial(acc: Tile, m_i: Tile, l_i: Tile) -> (Tile, Tile) {
        let seen = l_i > 0.0;
        // One reciprocal per row, then a multiply per element: IEEE divisions of the whole
        // [heads, 512] accumulator were a tenth of the 1 × 32768 history's stall samples.
        let o = acc * (1.0 / select(seen, l_i, 1.0)).unsqueeze(1);
        (o, partial_lse(m_i, l_i))
    }

    /// The log-sum-exp of an online-softmax state (`-inf` for rows that saw no key).
    #[device]
    fn partial_lse(m_i: Tile, l_i: Tile) -> Tile {
        let seen = l_i > 0.0;
        select(seen, m_i + log(select(seen, l_i, 1.0)), f32::NEG_INFINITY)
    }

    /// Absorbed queries of the rows starting at element offsets `row_start [R]` (576 wide each):
    /// `(latent [R, 512], rope [R, 64])`; rows with `ok` false read 0.
    #[device]
    fn load_query_rows(q: Ptr, row_start: Tile, ok: Tile) -> (Tile, Tile) {
        let rows = q + row_start.unsqueeze(1);
        let lat = load(rows + arange::<512>().unsqueeze(0), ok.unsqueeze(1), 0.0);
        let pe = load(
            rows + 512 + arange::<64>().unsqueeze(0),
            ok.unsqueeze(1),
            0.0,
        );
        (lat, pe)
    }

    /// Latent rows starting at `row_start [N]`, transposed as keys for `dot`:
    /// `(latent [512, N], rope [64, N])`; keys with `ok` false read 0.
    #[device]
    fn load_key_columns(kv: Ptr, row_start: Tile, ok: Tile) -> (Tile, Tile) {
        let cols = kv + row_start.unsqueeze(0);
        let lat = load(cols + arange::<512>().unsqueeze(1), ok.unsqueeze(0), 0.0);
        let pe = load(
            cols + 512 + arange::<64>().unsqueeze(1),
            ok.unsqueeze(0),
            0.0,
        );
        (lat, pe)
    }

    /// Element offsets of the gathered heads `rows` of token `t` in `q_all [D, T, N, 576]`:
    /// head g = p·N + h_loc lives at q_all[p, t, h_loc] (rank-major all-gather).
    #[device]
    fn gathered_query_rows(rows: Tile, t: i32, num_tokens: i32, heads_per_rank: i32) -> Tile {
        let src_rank = rows / heads_per_rank;
        let h_loc = rows % heads_per_rank;
        ((src_rank * num_tokens + t) * heads_per_rank + h_loc).cast::<i64>() * 576
    }

    /// The history program's query token and its program along the head axis, from a grid
    /// whose x axis runs over `head_programs` programs per token, heads fastest: the programs
    /// of one token (which read the same latent keys) then run at the same time, and the
    /// keys that the first reads from memory the others find in L2. (Tokens fastest, each
    /// head tile read its token's keys a wave later, from memory again: L1 read its 604 MB
    /// cache twice.)
    #[device]
    fn token_and_head_program(head_programs: i32) -> (i32, i32) {
        let pid = program_id(0);
        (pid / head_programs, pid % head_programs)
    }

    /// Element offsets of gathered head `g` (a scalar or a tile of heads) of token `t` in the
    /// exchange send buffer (spec §9.1): chunk `p = g / N` holds `out [N, T, 512]` and, at
    /// `lse_offset`, `lse [N, T]`. `(out row start, lse element)`.
    #[device]
    fn exchange_rows(
        g: Tile,
        t: i32,
        num_tokens: i32,
        heads_per_rank: i32,
        chunk_stride_out: i64,
        chunk_stride_lse: i64,
        lse_offset: i64,
    ) -> (Tile, Tile) {
        let peer = (g / heads_per_rank).cast::<i64>();
        let row = ((g % heads_per_rank) * num_tokens + t).cast::<i64>();
        (
            peer * chunk_stride_out + row * 512,
            peer * chunk_stride_lse + lse_offset + row,
        )
    }

    /// The KV tiles `[lo, hi)` of split `split` of a history of `n_hist` keys.
    #[device]
    fn split_tiles<const KV_TILE: i32, const NUM_SPLITS: i32>(
        n_hist: i32,
        split: i32,
    ) -> (i32, i32) {
        let tiles = cdiv(n_hist, KV_TILE);
        let per_split = cdiv(tiles, NUM_SPLITS);
        let lo = split * per_split;
        (lo, min(lo + per_split, tiles))
    }

    /// Element offsets of the latent rows of history keys `keys` in the paged cache, through
    /// the request's block-table row (keys with `ok` false read no table entry).
    #[device]
    fn latent_key_rows<const BLOCK_SIZE: i32>(
        bt_row: Ptr,
        keys: Tile,
        ok: Tile,
        cache_stride_block: i64,
    ) -> Tile {
        let phys = load(bt_row + keys / BLOCK_SIZE, ok, 0);
        phys.cast::<i64>() * cache_stride_block + (keys % BLOCK_SIZE).cast::<i64>() * 576
    }

    /// One online-softmax step over the scores `s · scale` (masked keys at -inf): the
    /// probabilities, the accumulator's rescale, the new running max and denominator. A row
    /// that has seen no key yet keeps max -inf and subtracts 0. Under `SCALE_AFTER_MAX`
    /// (`scale > 0`: `max(s·c) = c·max(s)`) `s` comes unscaled, the row max is scaled once
    /// and `exp(s·scale − m)` is one FMA into `ex2`; else `s` comes scaled. Under
    /// `LAZY_RESCALE` a row's running max moves only when the tile's exceeds it by more than
    /// 5.5 (p then stay below e^5.5 ≈ 245, alpha is exactly 1 and the rescale is skipped);
    /// the first finite max always lands and an all-masked row stays -inf.
    #[device]
    fn softmax_step<const SCALE_AFTER_MAX: bool, const LAZY_RESCALE: bool>(
        s: Tile,
        scale: f32,
        m_i: Tile,
        l_i: Tile,
    ) -> (Tile, Tile, Tile, Tile) {
        let mut row_max = s.max(1);
        let mut scaled = s;
        if SCALE_AFTER_MAX {
            row_max = row_max * scale;
            scaled = s * scale;
        }
        let mut m_raw = max(m_i, row_max);
        if LAZY_RESCALE {
            m_raw = select(m_raw - m_i > 5.5, m_raw, m_i);
        }
        let m_new = select(m_raw == f32::NEG_INFINITY, 0.0, m_raw);
        let p = exp(scaled - m_new.unsqueeze(1));
        let alpha = exp(m_i - m_new);
        (p, alpha, m_raw, l_i * alpha + p.sum(1))
    }

    /// History attention, one program per (query token, tile of gathered heads, KV split): a
    /// grid of (tokens · head tiles, splits). Keys
    /// are the 576-wide latent rows of the rank's shard (512 latent + 64 rope); values are the 512
    /// latent columns of the same rows. Writes one normalized partial per split. 64-head tiles
    /// run on 8 warps (a 4 × 2 warp grid, one slab per warp as at 32 heads on 4). `TMA`: the
    /// latent tiles move as TMA boxes on sm_90a (the launcher's choice for long programs).
    /// The two warpgroups hold column halves and meet at every row maximum, so they take no
    /// turns (`pingpong = false`). The producer warpgroup is the compiler's choice: it needs
    /// the key tiles pipelined, which needs the rows proven 16-byte aligned (the plan's
    /// stride promise), so a launch without the promise runs unsplit rather than failing.
    #[kernel(
        num_warps = 4 + 4 * (BLOCK_H / 64),
        fast_math = true,
        pingpong = false,
        require(BLOCK_H >= 16 && BLOCK_H <= 64 && BLOCK_H & (BLOCK_H - 1) == 0, "BLOCK_H must be 16, 32 or 64"),
        require(KV_TILE >= 16 && KV_TILE & (KV_TILE - 1) == 0, "KV_TILE must be a power of two >= 16"),
        require(BLOCK_SIZE % 16 == 0, "BLOCK_SIZE must be a multiple of 16"),
        require(NUM_SPLITS >= 1, "NUM_SPLITS must be >= 1"),
        require(!DIRECT || NUM_SPLITS == 1, "DIRECT needs NUM_SPLITS == 1: several splits are merged by mla_history_reduce"),
        tma = TMA,
    )]
    pub fn mla_history<
        T,
        const BLOCK_H: i32,
        const KV_TILE: i32,
        const BLOCK_SIZE: i32,
        const NUM_SPLITS: i32,
        const DIRECT: bool,
        const SCALE_AFTER_MAX: bool = false,
        const TMA: bool = false,
        const LAZY_RESCALE: bool = false,
    >(
        q_all: *const T,
        cache: *const T,
        block_table: *const i32,
        token_req: *const i32,
        hist_lens: *const i32,
        split_out: *mut f32,
        split_lse: *mut f32,
        send_out: *mut T,
        send_lse: *mut f32,
        num_tokens: i32,
        heads_per_rank: i32,
        num_heads: i32,
        softmax_scale: f32,
        block_table_stride: i64,
        cache_stride_block: i64,
        chunk_stride_out: i64,
        chunk_stride_lse: i64,
        lse_offset: i64,
    ) {
        let (t, tile) = token_and_head_program(cdiv(num_heads, BLOCK_H));
        let rows = tile * BLOCK_H + arange::<BLOCK_H>();
        let split = program_id(1);
        let row_ok = rows < num_heads;
        let req = load(token_req + t);
        // Never below 0 (the op's lengths are not): keys then provably are not either, so
        // the key tile's rows group by page and move as TMA boxes on sm_90a.
        let n_hist = max(load(hist_lens + req), 0);
        let q_row = gathered_query_rows(rows, t, num_tokens, heads_per_rank);
        let dl = arange::<512>();
        let (q_lat, q_pe) = load_query_rows(q_all, q_row, row_ok);

        let (lo, hi) = split_tiles::<KV_TILE, NUM_SPLITS>(n_hist, split);
        let bt_row = block_table + req.cast::<i64>() * block_table_stride;
        let mut m_i = full([BLOCK_H], f32::NEG_INFINITY);
        let mut l_i = zeros::<f32>([BLOCK_H]);
        let mut acc = zeros::<f32>([BLOCK_H, 512]);
        for j in lo..hi {
            let keys = j * KV_TILE + arange::<KV_TILE>();
            let k_ok = keys < n_hist;
            let key_row = latent_key_rows::<BLOCK_SIZE>(bt_row, keys, k_ok, cache_stride_block);
            let (k_lat, k_pe) = load_key_columns(cache, key_row, k_ok);
            let mut s = dot(q_pe, k_pe, dot(q_lat, k_lat));
            if !SCALE_AFTER_MAX {
                s = s * softmax_scale;
            }
            let s = select(k_ok.unsqueeze(0), s, f32::NEG_INFINITY);
            let (p, alpha, m_raw, l_new) =
                softmax_step::<SCALE_AFTER_MAX, LAZY_RESCALE>(s, softmax_scale, m_i, l_i);
            l_i = l_new;
            acc = dot(p.cast::<T>(), trans(k_lat), acc * alpha.unsqueeze(1));
            m_i = m_raw;
        }
        let (o, lse) = finish_partial(acc, m_i, l_i);
        if DIRECT {
            // One split: the merge would give back (o, lse) unchanged, so the partial goes
            // straight into the exchange send buffer.
            let (out_at, lse_at) = exchange_rows(
                rows,
                t,
                num_tokens,
                heads_per_rank,
                chunk_stride_out,
                chunk_stride_lse,
                lse_offset,
            );
            store(
                send_out + out_at.unsqueeze(1) + dl.unsqueeze(0),
                o.cast::<T>(),
                row_ok.unsqueeze(1),
            );
            store(send_lse + lse_at, lse, row_ok);
        } else {
            let slot = (t * num_heads + rows) * NUM_SPLITS + split;
            store(
                split_out + (slot.cast::<i64>() * 512).unsqueeze(1) + dl.unsqueeze(0),
                o,
                row_ok.unsqueeze(1),
            );
            store(split_lse + slot, lse, row_ok);
        }
    }

    /// Merges the history splits of one (token, gathered head) and writes the result straight
    /// into the exchange send buffer: chunk p = heads [p·N, (p+1)·N) holds `out [N, T, 512]` in
    /// the activation dtype and `lse [N, T]` f32 (spec §9.1). Grid (T, D·N, 512 / COLS): a
    /// program merges `COLS` of the 512 columns (every program weighs the splits the same
    /// way; the first column block writes the LSE), so a step of few tokens still has
    /// programs enough to keep its reads in flight. The splits stay one tile spread over the
    /// threads: as a loop (the combine's form), 1 × 32768's 64 splits ran one after another
    /// (H200: 8.8 → 25 µs).
    #[kernel(
        num_warps = 4,
        require(SPLITS_PADDED >= NUM_SPLITS, "SPLITS_PADDED must be >= NUM_SPLITS"),
        require(COLS >= 16 && COLS <= 512 && 512 % COLS == 0 && COLS & (COLS - 1) == 0, "COLS must be a power of two dividing 512"),
    )]
    pub fn mla_history_reduce<
        T,
        const NUM_SPLITS: i32,
        const SPLITS_PADDED: i32,
        const COLS: i32 = 512,
    >(
        split_out: *const f32,
        split_lse: *const f32,
        send_out: *mut T,
        send_lse: *mut f32,
        num_tokens: i32,
        heads_per_rank: i32,
        num_heads: i32,
        chunk_stride_out: i64,
        chunk_stride_lse: i64,
        lse_offset: i64,
    ) {
        let t = program_id(0);
        let g = program_id(1);
        let s = arange::<SPLITS_PADDED>();
        let present = s < NUM_SPLITS;
        let slot = (t * num_heads + g) * NUM_SPLITS + s;
        let dl = program_id(2) * COLS + arange::<COLS>();
        let o_s = load(
            split_out + (slot.cast::<i64>() * 512).unsqueeze(1) + dl.unsqueeze(0),
            present.unsqueeze(1),
            0.0,
        );
        let lse_s = load(split_lse + slot, present, f32::NEG_INFINITY);
        let (o, lse) = merge_partials(o_s, lse_s, present);
        let (out_at, lse_at) = exchange_rows(
            g,
            t,
            num_tokens,
            heads_per_rank,
            chunk_stride_out,
            chunk_stride_lse,
            lse_offset,
        );
        store(send_out + out_at + dl, o.cast::<T>());
        if program_id(2) == 0 {
            store(send_lse + lse_at, lse);
        }
    }

    /// Current-chunk attention for the rank's own heads: query token t of a request whose chunk
    /// starts at token c0 attends to the chunk's keys c0..=t (causal within the chunk, spec §4.2).
    /// 64-head tiles run on 8 warps (on 4 the `[64, 512]` f32 accumulator took 256 registers a
    /// thread and spilled 192 bytes on sm_90a); the plan takes 32 heads a program.
    /// `LSE_ONLY` (a step whose chunks are one token each, merged by the fused combine): a
    /// token's one key gives it weight 1, so its output rows are that key's latent row
    /// itself, which the fused combine reads from `cur_kv` (`CUR_FROM_KV`); only the LSE
    /// (the score) is written, and the `[T, N, 512]` rows never go to memory.
    #[kernel(
        num_warps = 4 + 4 * (BLOCK_H / 64),
        fast_math = true,
        require(BLOCK_H >= 16 && BLOCK_H & (BLOCK_H - 1) == 0, "BLOCK_H must be a power of two >= 16"),
        require(MAX_CHUNK >= 16 && MAX_CHUNK & (MAX_CHUNK - 1) == 0, "MAX_CHUNK must be a power of two >= 16"),
        require(!LSE_ONLY || MAX_CHUNK == 16, "LSE_ONLY is for chunks of one token (MAX_CHUNK 16)"),
    )]
    pub fn mla_current<
        T,
        const BLOCK_H: i32,
        const MAX_CHUNK: i32,
        const LSE_ONLY: bool = false,
    >(
        q_loc: *const T,
        cur_kv: *const T,
        token_req: *const i32,
        cu_seqlens_q: *const i32,
        cur_out: *mut T,
        cur_lse: *mut f32,
        heads_per_rank: i32,
        softmax_scale: f32,
    ) {
        let t = program_id(0);
        let h = program_id(1) * BLOCK_H + arange::<BLOCK_H>();
        let row_ok = h < heads_per_rank;
        let c0 = load(cu_seqlens_q + load(token_req + t));
        let keys = c0 + arange::<MAX_CHUNK>();
        let k_ok = keys <= t;
        let dl = arange::<512>();
        let q_row = (t * heads_per_rank + h).cast::<i64>() * 576;
        let (q_lat, q_pe) = load_query_rows(q_loc, q_row, row_ok);
        let (k_lat, k_pe) = load_key_columns(cur_kv, keys.cast::<i64>() * 576, k_ok);
        let s = select(
            k_ok.unsqueeze(0),
            dot(q_pe, k_pe, dot(q_lat, k_lat)) * softmax_scale,
            f32::NEG_INFINITY,
        );
        let m_i = s.max(1);
        let p = exp(s - m_i.unsqueeze(1));
        let l_i = p.sum(1);
        if LSE_ONLY {
            store(
                cur_lse + t * heads_per_rank + h,
                partial_lse(m_i, l_i),
                row_ok,
            );
        } else {
            let acc = dot(p.cast::<T>(), trans(k_lat));
            let (o, lse) = finish_partial(acc, m_i, l_i);
            let out_row = (t * heads_per_rank + h).cast::<i64>() * 512;
            store(
                cur_out + out_row.unsqueeze(1) + dl.unsqueeze(0),
                o.cast::<T>(),
                row_ok.unsqueeze(1),
            );
            store(cur_lse + t * heads_per_rank + h, lse, row_ok);
        }
    }

    /// The one combine (spec §3.2, §9.2 K_combine): D received history partials of this rank's
    /// head plus the local current partial → `lat_out [T, N, 512]` in the activation dtype.
    /// Grid (T, N). The parts are loops and their weights per-program scalars, so no thread
    /// needs another's element (held as a `[PARTS_PADDED]` tile spread over the threads, the
    /// LSEs took ten block barriers a program). The order of operations is spec §3.2's: the
    /// largest finite LSE, the weighted rows summed from zero in part order (history parts,
    /// then the current one), one normalization.
    #[kernel(num_warps = 4, require(PARTS_PADDED >= DCP_SIZE + 1, "PARTS_PADDED must be >= DCP_SIZE + 1"))]
    pub fn mla_combine<T, const DCP_SIZE: i32, const PARTS_PADDED: i32>(
        recv_out: *const T,
        recv_lse: *const f32,
        cur_out: *const T,
        cur_lse: *const f32,
        lat_out: *mut T,
        num_tokens: i32,
        heads_per_rank: i32,
        chunk_stride_out: i64,
        chunk_stride_lse: i64,
        lse_offset: i64,
    ) {
        let t = program_id(0);
        let h = program_id(1);
        let dl = arange::<512>();
        let row = (h * num_tokens + t).cast::<i64>();
        let cur_row = (t * heads_per_rank + h).cast::<i64>();
        let lse_cur = load(cur_lse + cur_row);
        let mut m_raw = finite_or(lse_cur, f32::NEG_INFINITY);
        for p in 0..DCP_SIZE {
            let lse = load(recv_lse + p.cast::<i64>() * chunk_stride_lse + lse_offset + row);
            m_raw = max(m_raw, finite_or(lse, f32::NEG_INFINITY));
        }
        let m = merge_max(m_raw);
        let mut num = zeros::<f32>([512]);
        let mut den = 0.0;
        for p in 0..DCP_SIZE {
            let lse = load(recv_lse + p.cast::<i64>() * chunk_stride_lse + lse_offset + row);
            let o = load(recv_out + p.cast::<i64>() * chunk_stride_out + row * 512 + dl);
            let (o_w, w) = weighted_part(o.cast::<f32>(), lse, m);
            num = num + o_w;
            den = den + w;
        }
        let o = load(cur_out + cur_row * 512 + dl);
        let (o_w, w) = weighted_part(o.cast::<f32>(), lse_cur, m);
        let (merged, _lse) = normalized(num + o_w, den + w, m);
        store(lat_out + cur_row * 512 + dl, merged.cast::<T>());
    }

    /// The one combine fused with V-up (spec §3.2 and §6; §9.2's K_combine, then V-up): `y`
    /// for `BLOCK_T` tokens of head `n` a program, grid (cdiv(T, BLOCK_T), N), without the
    /// `[T, N, 512]` merged latent ever leaving the chip. The merge's weights are a row's
    /// own (`w_p / den` for part `p`), so they commute with the product by `W_UV[n]`:
    /// `y = Σ_p (w_p / den) · (o_p · W_UV[n])`, each part's rows multiplied as they are
    /// stored (16-byte copies into a ring, tensor-core MMAs). Every part has an accumulator
    /// of its own and one step of `W_UV[n]`'s rows serves all of them, so `W_UV` crosses
    /// into the SM once a program, not once a part (it was two thirds of the bytes at L1 with
    /// a part at a time); hence at most three parts, `DCP_SIZE` 1 or 2 (larger groups take the
    /// combine, then V-up). A part whose LSE is not finite is dropped by selecting its
    /// product rows away (a row of the product depends only on its own row of `o_p`, so this
    /// is zeroing it before it is weighted, spec §3.2). The one difference to `mla_combine`
    /// then V-up: the merged latent is not rounded to the activation dtype in between.
    /// Part `own_part` (this rank's own history; −1 for none) is read from the send buffer,
    /// where the history wrote it, at the same chunk offset: the exchange then need not copy
    /// it into the receive buffer. The current part's rows `cur_rows` are `cur_out [T, N,
    /// 512]`, or under `CUR_FROM_KV` (chunks of one token, `mla_current`'s `LSE_ONLY`) the
    /// chunk's keys `cur_kv [T, 576]`, whose latent row is every head's output of its token.
    /// `BLOCK_V` of the 128 output columns a program (grid z `128 / BLOCK_V`): steps of few
    /// tokens split `W_UV[n]`'s columns over two programs to keep twice the bytes in flight.
    /// `WARPGROUPS` (sm_90a, 64 tokens × 128 columns): the products as warpgroup MMAs, each of
    /// the two warpgroups of the 4 × 2 warp grid one column half of every part's product (64
    /// columns: the narrowest block a `wgmma` reads `W_UV`'s row-major rows in), operands from
    /// the ring by descriptor (`mma.sync` elsewhere). Copies by a producer warpgroup for two
    /// parts; three parts' accumulators do not fit beside one (they spilled), so at dcp 2
    /// every thread copies. At dcp 1 also 128 tokens (an 8 × 2 warp grid: four warpgroups,
    /// two token halves by two column halves), so one program a head reads `W_UV[n]` once.
    #[kernel(
        num_warps = 4 * ((BLOCK_T + 31) / 32),
        num_stages = STAGES,
        warp_specialize = DCP_SIZE == 1,
        require(DCP_SIZE == 1 || DCP_SIZE == 2, "the fused combine + V-up holds an accumulator a part: DCP_SIZE must be 1 or 2 (larger groups use the combine, then V-up)"),
        require(BLOCK_T >= 16 && BLOCK_T <= 128 && BLOCK_T & (BLOCK_T - 1) == 0, "BLOCK_T must be 16, 32, 64 or 128"),
        require(LAT_CHUNK >= 16 && 512 % LAT_CHUNK == 0, "LAT_CHUNK must divide 512 and be >= 16"),
        require(STAGES >= 2 && STAGES <= 4, "STAGES must be 2, 3 or 4"),
        require(BLOCK_V == 64 || BLOCK_V == 128, "BLOCK_V must be 64 or 128"),
        require(!WARPGROUPS || ((BLOCK_T == 64 || (BLOCK_T == 128 && DCP_SIZE == 1)) && BLOCK_V == 128), "WARPGROUPS takes 64 tokens × 128 columns, or 128 tokens at DCP_SIZE 1 (a warpgroup MMA is 64 rows tall and reads W_UV 64 columns at a time; three parts of 128 tokens spill)"),
    )]
    pub fn mla_combine_v_up<
        T,
        const DCP_SIZE: i32,
        const BLOCK_T: i32,
        const LAT_CHUNK: i32,
        const STAGES: i32,
        const CUR_FROM_KV: bool = false,
        const BLOCK_V: i32 = 128,
        const WARPGROUPS: bool = false,
    >(
        recv_out: *const T,
        recv_lse: *const f32,
        send_out: *const T,
        send_lse: *const f32,
        cur_rows: *const T,
        cur_lse: *const f32,
        w_uv: *const T,
        y: *mut T,
        num_tokens: i32,
        heads_per_rank: i32,
        own_part: i32,
        chunk_stride_out: i64,
        chunk_stride_lse: i64,
        lse_offset: i64,
    ) {
        let n = program_id(1);
        let toks = program_id(0) * BLOCK_T + arange::<BLOCK_T>();
        let ok = toks < num_tokens;
        let row = (n * num_tokens + toks).cast::<i64>();
        let cur_row = (toks * heads_per_rank + n).cast::<i64>();
        // The parts: this rank's current chunk, then what ranks 0 and 1 sent (their rows of
        // chunk p start `p · chunk_stride_out` in, of the send buffer for the own part).
        let out_0 = select(own_part == 0, send_out, recv_out);
        let lse_0_at = select(own_part == 0, send_lse, recv_lse);
        let out_1 = select(own_part == 1, send_out, recv_out);
        let lse_1_at = select(own_part == 1, send_lse, recv_lse);
        let lse_cur = load(cur_lse + cur_row, ok, f32::NEG_INFINITY);
        let lse_0 = load(lse_0_at + lse_offset + row, ok, f32::NEG_INFINITY);
        let mut lse_1 = full([BLOCK_T], f32::NEG_INFINITY);
        if DCP_SIZE > 1 {
            lse_1 = load(
                lse_1_at + chunk_stride_lse + lse_offset + row,
                ok,
                f32::NEG_INFINITY,
            );
        }
        let m_raw = max(
            finite_or(lse_cur, f32::NEG_INFINITY),
            finite_or(lse_0, f32::NEG_INFINITY),
        );
        let m = merge_max(max(m_raw, finite_or(lse_1, f32::NEG_INFINITY)));
        let mut rows_cur = cur_rows + cur_row * 512;
        if CUR_FROM_KV {
            rows_cur = cur_rows + toks.cast::<i64>() * 576;
        }
        let rows_0 = out_0 + row * 512;
        let rows_1 = out_1 + chunk_stride_out + row * 512;
        let w_n = w_uv + n.cast::<i64>() * 65536;
        let dv = program_id(2) * BLOCK_V + arange::<BLOCK_V>();
        let mut y_cur = zeros::<f32>([BLOCK_T, BLOCK_V]);
        let mut y_0 = zeros::<f32>([BLOCK_T, BLOCK_V]);
        let mut y_1 = zeros::<f32>([BLOCK_T, BLOCK_V]);
        for c in 0..512 / LAT_CHUNK {
            let cols = c * LAT_CHUNK + arange::<LAT_CHUNK>();
            let w_rows = load(w_n + (cols * 128).unsqueeze(1) + dv.unsqueeze(0));
            y_cur = dot(row_columns(rows_cur, cols, ok), w_rows, y_cur);
            y_0 = dot(row_columns(rows_0, cols, ok), w_rows, y_0);
            if DCP_SIZE > 1 {
                y_1 = dot(row_columns(rows_1, cols, ok), w_rows, y_1);
            }
        }
        let (a_cur, w_cur) = weighted_rows(y_cur, lse_cur, m);
        let (a_0, w_0) = weighted_rows(y_0, lse_0, m);
        let mut acc = a_cur + a_0;
        let mut den = w_cur + w_0;
        if DCP_SIZE > 1 {
            let (a_1, w_1) = weighted_rows(y_1, lse_1, m);
            acc = acc + a_1;
            den = den + w_1;
        }
        store(
            y + (cur_row * 128).unsqueeze(1) + dv.unsqueeze(0),
            normalized_rows(acc, den).cast::<T>(),
            ok.unsqueeze(1),
        );
    }

    /// V-up fallback: `y[t, n, :] = x[t, n, :] · W_UV[n]` for `x [T, N, 512]`, `W_UV [N, 512, 128]`,
    /// `y [T, N·128]`. Grid (cdiv(T, BLOCK_T), N). The op uses one cuBLAS strided-batched GEMM.
    #[kernel(num_warps = 4, require(BLOCK_T >= 16, "BLOCK_T must be >= 16"))]
    pub fn mla_v_up<T, const BLOCK_T: i32>(
        x: *const T,
        w_uv: *const T,
        y: *mut T,
        num_tokens: i32,
        heads_per_rank: i32,
    ) {
        let n = program_id(1);
        let toks = program_id(0) * BLOCK_T + arange::<BLOCK_T>();
        let ok = toks < num_tokens;
        let dl = arange::<512>();
        let dv = arange::<128>();
        let x_rows = (toks * heads_per_rank + n).cast::<i64>() * 512;
        let xt = load(
            x + x_rows.unsqueeze(1) + dl.unsqueeze(0),
            ok.unsqueeze(1),
            0.0,
        );
        let w = load(w_uv + n.cast::<i64>() * 65536 + (dl * 128).unsqueeze(1) + dv.unsqueeze(0));
        let yt = dot(xt, w);
        let y_rows = (toks * heads_per_rank + n).cast::<i64>() * 128;
        store(
            y + y_rows.unsqueeze(1) + dv.unsqueeze(0),
            yt.cast::<T>(),
            ok.unsqueeze(1),
        );
    }
}
