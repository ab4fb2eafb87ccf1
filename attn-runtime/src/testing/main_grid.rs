//! The spec's §7.1 main grid, reduced, as every parity suite runs it (the executor's, the
//! simulated GPU code's): a mixed prefill/decode batch and a pure-decode one, each with
//! sliding window none / 64 and softcap none / 50.

use crate::reference::unified_attention::AttentionOptions;

/// §7.1 `[(1,1328), (5,18), (129,463)]`, reduced.
pub const MIXED: &[(usize, usize)] = &[(1, 328), (5, 18), (29, 163)];
/// §7.1 `[(1,523), (1,37), (1,2011)]`, reduced.
pub const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 211)];

/// The grid's batches: `("mixed", MIXED)`, `("decode", DECODE)`.
pub const BATCHES: [(&str, &[(usize, usize)]); 2] = [("mixed", MIXED), ("decode", DECODE)];

/// The grid's mask options with their label (`SW 64 softcap Some(50.0)`).
pub fn options() -> impl Iterator<Item = (String, AttentionOptions<'static>)> {
    [0, 64].into_iter().flat_map(|window| {
        [None, Some(50.0)].into_iter().map(move |softcap| {
            let options = AttentionOptions {
                sliding_window: window,
                softcap,
                ..Default::default()
            };
            (format!("SW {window} softcap {softcap:?}"), options)
        })
    })
}
