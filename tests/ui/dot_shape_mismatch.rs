// `dot` of two tiles whose inner dimensions differ: both shapes are reported.
use attn_dsl_macros::{instantiate, module};

#[module]
mod mm {
    #[kernel]
    pub fn mm<const M: i32, const N: i32, const K: i32>(a: *const f32, b: *const f32, c: *mut f32) {
        let rows = arange::<M>().unsqueeze(1);
        let cols_k = arange::<K>().unsqueeze(0);
        let ta = load(a + rows * K + cols_k);
        let tb = load(b + rows * K + cols_k);
        let acc = dot(ta, tb);
        store(c + rows * N + arange::<N>().unsqueeze(0), acc);
    }
}

instantiate!(Mm = mm::mm { M = 16, N = 16, K = 32 });

fn main() {}
