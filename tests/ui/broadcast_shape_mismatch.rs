// Adding tiles of shapes [16] and [32]: both shapes are reported.
use attn_dsl_macros::{instantiate, module};

#[module]
mod add {
    #[kernel]
    pub fn add<const A: i32, const B: i32>(x: *const f32, out: *mut f32) {
        let offs = arange::<A>() + arange::<B>();
        store(out + offs, load(x + offs));
    }
}

instantiate!(Add = add::add { A = 16, B = 32 });

fn main() {}
