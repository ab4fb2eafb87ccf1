// Adding an f32 tile to an i32 tile without a cast.
use attn_dsl_macros::{instantiate, module};

#[module]
mod mix {
    #[kernel]
    pub fn mix<const BLOCK: i32>(x: *const f32, idx: *const i32, out: *mut f32) {
        let offs = arange::<BLOCK>();
        let v = load(x + offs) + load(idx + offs);
        store(out + offs, v);
    }
}

instantiate!(Mix = mix::mix { BLOCK = 64 });

fn main() {}
