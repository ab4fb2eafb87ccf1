// A call of a function that is neither a DSL builtin nor a #[device] fn of the module.
use attn_dsl_macros::{instantiate, module};

#[module]
mod act {
    #[kernel]
    pub fn act<const BLOCK: i32>(x: *const f32, out: *mut f32) {
        let offs = arange::<BLOCK>();
        store(out + offs, gelu(load(x + offs)));
    }
}

instantiate!(Act = act::act { BLOCK = 64 });

fn main() {}
