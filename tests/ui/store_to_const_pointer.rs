// Storing through a `*const` parameter.
use attn_dsl_macros::{instantiate, module};

#[module]
mod inplace {
    #[kernel]
    pub fn inplace<const BLOCK: i32>(x: *const f32) {
        let offs = arange::<BLOCK>();
        store(x + offs, load(x + offs) * 2.0);
    }
}

instantiate!(InPlace = inplace::inplace { BLOCK = 64 });

fn main() {}
