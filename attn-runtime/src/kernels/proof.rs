//! The proof kernels of the compiler foundation, written in the DSL: a row softmax, a tiled
//! matmul with `dot`, and a flash-attention forward with online softmax. They exercise the
//! whole pipeline (specialize → passes → CPU executor / CUDA) and are the smallest programs
//! whose GPU parity and speed say something about the compiler.

use attn_dsl_macros::module;

#[module]
pub mod proof {
    /// Softmax of each row of `x [n_rows, n_cols]` (row stride `stride`), one program per row;
    /// `BLOCK >= n_cols`. Masked lanes read -inf so they vanish from the max and the sum.
    #[kernel(num_warps = 4, require(BLOCK >= 16, "BLOCK must be at least 16"))]
    pub fn softmax<T, const BLOCK: i32>(x: *const T, out: *mut T, n_cols: i32, stride: i32) {
        let row = program_id(0);
        let cols = arange::<BLOCK>();
        let ok = cols < n_cols;
        let v = load(x + row * stride + cols, ok, f32::NEG_INFINITY.cast::<T>()).cast::<f32>();
        let e = exp(v - v.max(0));
        store(out + row * stride + cols, (e / e.sum(0)).cast::<T>(), ok);
    }

    /// `c [m, n] = a [m, k] · b [k, n]` (row-major), f32 accumulation and output; tails masked.
    #[kernel(num_warps = 4, require(BLOCK_K % 16 == 0, "BLOCK_K must be a multiple of 16"))]
    pub fn matmul<T, const BLOCK_M: i32, const BLOCK_N: i32, const BLOCK_K: i32>(
        a: *const T,
        b: *const T,
        c: *mut f32,
        m: i32,
        n: i32,
        k: i32,
    ) {
        let rows = program_id(0) * BLOCK_M + arange::<BLOCK_M>();
        let cols = program_id(1) * BLOCK_N + arange::<BLOCK_N>();
        let ks = arange::<BLOCK_K>();
        let mut acc = zeros::<f32>([BLOCK_M, BLOCK_N]);
        for k0 in (0..k).step_by(BLOCK_K) {
            let kk = k0 + ks;
            let a_ok = (rows.unsqueeze(1) < m) & (kk.unsqueeze(0) < k);
            let b_ok = (kk.unsqueeze(1) < k) & (cols.unsqueeze(0) < n);
            let a_tile = load(a + rows.unsqueeze(1) * k + kk.unsqueeze(0), a_ok, 0.0);
            let b_tile = load(b + kk.unsqueeze(1) * n + cols.unsqueeze(0), b_ok, 0.0);
            acc = dot(a_tile, b_tile, acc);
        }
        let ok = (rows.unsqueeze(1) < m) & (cols.unsqueeze(0) < n);
        store(c + rows.unsqueeze(1) * n + cols.unsqueeze(0), acc, ok);
    }

    /// Flash-attention forward: `q [heads, q_len, D]`, `k, v [heads, kv_len, D]`, one program
    /// per (query block, head). Causal masking is bottom-right aligned (query i sees keys
    /// `j <= i + kv_len - q_len`), so with `q_len > kv_len` the first rows see no key at all:
    /// they output 0, never NaN.
    #[kernel(
        num_warps = 4,
        fast_math = true,
        require(HEAD_DIM % 16 == 0, "HEAD_DIM must be a multiple of 16"),
        require(BLOCK_M >= 16 && BLOCK_N >= 16, "BLOCK_M and BLOCK_N must be at least 16"),
    )]
    pub fn flash_attention<
        T,
        const BLOCK_M: i32,
        const BLOCK_N: i32,
        const HEAD_DIM: i32,
        const CAUSAL: bool,
    >(
        q: *const T,
        k: *const T,
        v: *const T,
        out: *mut T,
        q_len: i32,
        kv_len: i32,
        sm_scale: f32,
    ) {
        let block = program_id(0);
        let head = program_id(1);
        let rows = block * BLOCK_M + arange::<BLOCK_M>();
        let row_ok = rows < q_len;
        let d = arange::<HEAD_DIM>();
        let q_head = q + head * q_len * HEAD_DIM;
        let kv_head = head * kv_len * HEAD_DIM;
        let q_tile = load(
            q_head + rows.unsqueeze(1) * HEAD_DIM + d.unsqueeze(0),
            row_ok.unsqueeze(1),
            0.0,
        );
        let shift = kv_len - q_len;
        let mut hi = kv_len;
        if CAUSAL {
            hi = min(kv_len, max(0, block * BLOCK_M + BLOCK_M + shift));
        }
        let mut m_i = full([BLOCK_M], f32::NEG_INFINITY);
        let mut l_i = zeros::<f32>([BLOCK_M]);
        let mut acc = zeros::<f32>([BLOCK_M, HEAD_DIM]);
        for start in (0..hi).step_by(BLOCK_N) {
            let cols = start + arange::<BLOCK_N>();
            let col_ok = cols < kv_len;
            let k_tile = load(
                k + kv_head + cols.unsqueeze(0) * HEAD_DIM + d.unsqueeze(1),
                col_ok.unsqueeze(0),
                0.0,
            );
            let mut visible = col_ok.unsqueeze(0) & row_ok.unsqueeze(1);
            if CAUSAL {
                visible = visible & (cols.unsqueeze(0) <= rows.unsqueeze(1) + shift);
            }
            let s = select(visible, dot(q_tile, k_tile) * sm_scale, f32::NEG_INFINITY);
            let m_raw = max(m_i, s.max(1));
            // A row with nothing visible yet keeps max -inf; subtract 0 instead of -inf.
            let m_new = select(m_raw == f32::NEG_INFINITY, 0.0, m_raw);
            let p = exp(s - m_new.unsqueeze(1));
            let alpha = exp(m_i - m_new);
            l_i = l_i * alpha + p.sum(1);
            let v_tile = load(
                v + kv_head + cols.unsqueeze(1) * HEAD_DIM + d.unsqueeze(0),
                col_ok.unsqueeze(1),
                0.0,
            );
            acc = dot(p.cast::<T>(), v_tile, acc * alpha.unsqueeze(1));
            m_i = m_raw;
        }
        let o = acc / select(l_i > 0.0, l_i, 1.0).unsqueeze(1);
        store(
            out + head * q_len * HEAD_DIM + rows.unsqueeze(1) * HEAD_DIM + d.unsqueeze(0),
            o.cast::<T>(),
            row_ok.unsqueeze(1),
        );
    }
}
