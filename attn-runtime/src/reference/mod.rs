//! Dense f64 references of the flagship ops, written from the specs and independent of
//! the DSL kernels (DESIGN §4): every kernel's parity tests compare against these.

pub mod mla;
pub mod rounding;
pub mod softmax;
pub mod unified_attention;

pub use rounding::Dtype;
