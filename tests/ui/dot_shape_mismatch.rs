// `dot` of [M, K] = [16, 32] by [M, N] = [16, 16]: inner dimensions differ, both shapes are reported.
use attn_dsl_macros::{instantiate, module};

#[module]
mod mm {
    #[kernel]
    pub fn mm<const M: i32, const N: i32, const K: i32>(a: *const f32, b: *const f32, c: *mut f32) {
        let rows = arange::<M>().unsqueeze(1);
        let cols_k = arange::<K>().unsqueeze(0);
        let ta = load(a + rows * K + cols_k);
        let cols_n = arange::<N>().unsqueeze(0);
        let tb = load(b + rows * N + cols_n);
        let acc = dot(ta, tb);
        store(c + rows * N + cols_n, acc);
    }
}

instantiate!(Mm = mm::mm { M = 16, N = 16, K = 32 });

fn main() {}
