// `match` is Rust, not DSL: rejected when the module is defined.
use attn_dsl_macros::module;

#[module]
mod pick {
    #[kernel]
    pub fn pick<const BLOCK: i32>(out: *mut f32, mode: i32) {
        let offs = arange::<BLOCK>();
        let v = match mode {
            0 => 1.0,
            _ => 2.0,
        };
        store(out + offs, full([BLOCK], v));
    }
}

fn main() {}
