//! The candle integration's host side (feature `candle`, no GPU): every tensor contract of
//! unified attention and MLA decode is checked before anything touches device memory, each
//! violation is a typed error naming the tensor, and the typed error survives the mapping
//! into `candle_core::Error` (also through candle's context wrappers). Tensors that pass
//! every check but live on the CPU are refused with `NeedsCuda`, which shows each check
//! above is the one that fired.

#![cfg(feature = "candle")]

use attn_runtime::candle::{
    check_mla, check_unified, op_error, CandleMmRanges, CandleOpError, HostMeta, TensorError,
    UnifiedCall,
};
use candle_core::{Context, DType, Device, Tensor};

/// A decode-shaped problem: 3 sequences, q [3, 8, 64], caches [20, 16, 2, 64].
struct Problem {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu: Tensor,
    cu_host: Vec<i32>,
    seq: Tensor,
    seq_host: Vec<i32>,
    table: Tensor,
    table_host: Vec<i32>,
}

fn rand(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::rand(-1f32, 1f32, shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .expect("random tensor")
}

fn ints(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, &Device::Cpu).expect("i32 tensor")
}

impl Problem {
    fn new() -> Self {
        let cu_host = vec![0, 1, 2, 3];
        let seq_host = vec![17, 40, 3];
        let table_host: Vec<i32> = (0..12).rev().collect();
        Problem {
            q: rand(&[3, 8, 64], DType::BF16),
            k: rand(&[20, 16, 2, 64], DType::BF16),
            v: rand(&[20, 16, 2, 64], DType::BF16),
            cu: ints(&cu_host, &[4]),
            seq: ints(&seq_host, &[3]),
            table: ints(&table_host, &[3, 4]),
            cu_host,
            seq_host,
            table_host,
        }
    }

    fn call(&self) -> UnifiedCall<'_> {
        UnifiedCall::new(
            HostMeta {
                device: &self.cu,
                host: &self.cu_host,
            },
            HostMeta {
                device: &self.seq,
                host: &self.seq_host,
            },
            HostMeta {
                device: &self.table,
                host: &self.table_host,
            },
        )
    }
}

/// The tensor and the kind of error a check reported.
fn tensor_error(r: Result<impl std::fmt::Debug, CandleOpError>) -> (&'static str, TensorError) {
    match r {
        Err(CandleOpError::Tensor { tensor, error, .. }) => (tensor, error),
        other => panic!("expected a tensor error, got {other:?}"),
    }
}

#[test]
fn valid_cpu_tensors_pass_every_check_and_need_cuda() {
    let p = Problem::new();
    let r = check_unified(&p.q, &p.k, &p.v, &p.call());
    assert!(
        matches!(r, Err(CandleOpError::NeedsCuda { tensor: "q", .. })),
        "{r:?}"
    );
}

#[test]
fn bad_unified_tensors_are_typed_errors_naming_the_tensor() {
    let p = Problem::new();
    let q2 = rand(&[3, 512], DType::BF16);
    let (t, e) = tensor_error(check_unified(&q2, &p.k, &p.v, &p.call()));
    assert_eq!(t, "q");
    assert!(matches!(e, TensorError::Rank { rank: 3, .. }), "{e}");

    let q64 = rand(&[3, 8, 64], DType::F64);
    let (t, e) = tensor_error(check_unified(&q64, &p.k, &p.v, &p.call()));
    assert_eq!(t, "q");
    assert!(
        matches!(
            e,
            TensorError::DType {
                got: DType::F64,
                ..
            }
        ),
        "{e}"
    );

    // [3, 64, 8] transposed to [3, 8, 64]: the head dimension has stride 8.
    let qt = rand(&[3, 64, 8], DType::BF16)
        .transpose(1, 2)
        .expect("transpose");
    let (t, e) = tensor_error(check_unified(&qt, &p.k, &p.v, &p.call()));
    assert_eq!(t, "q");
    assert!(matches!(e, TensorError::Strides { .. }), "{e}");

    let kt = rand(&[20, 2, 16, 64], DType::BF16)
        .transpose(1, 2)
        .expect("transpose");
    let (t, e) = tensor_error(check_unified(&p.q, &kt, &p.v, &p.call()));
    assert_eq!(t, "k_cache");
    assert!(matches!(e, TensorError::Strides { .. }), "{e}");

    let kf16 = rand(&[20, 16, 2, 64], DType::F16);
    let (t, e) = tensor_error(check_unified(&p.q, &kf16, &p.v, &p.call()));
    assert_eq!(t, "k_cache");
    assert!(
        matches!(
            e,
            TensorError::DType {
                got: DType::F16,
                ..
            }
        ),
        "{e}"
    );

    let v_short = rand(&[19, 16, 2, 64], DType::BF16);
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &v_short, &p.call()));
    assert_eq!(t, "v_cache");
    assert!(
        matches!(
            e,
            TensorError::Extent {
                dim: "num_blocks",
                got: 19,
                expected: 20,
                ..
            }
        ),
        "{e}"
    );

    let k96 = rand(&[20, 16, 2, 96], DType::BF16);
    let v96 = rand(&[20, 16, 2, 96], DType::BF16);
    let (t, e) = tensor_error(check_unified(&p.q, &k96, &v96, &p.call()));
    assert_eq!(t, "k_cache");
    assert!(
        matches!(
            e,
            TensorError::Extent {
                dim: "head size",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn bad_metadata_and_extras_are_typed_errors() {
    let p = Problem::new();
    let cu_u32 = Tensor::from_slice(&[0u32, 1, 2, 3], 4, &Device::Cpu).expect("u32");
    let call = UnifiedCall {
        cu_seqlens_q: HostMeta {
            device: &cu_u32,
            host: &p.cu_host,
        },
        ..p.call()
    };
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &p.v, &call));
    assert_eq!(t, "cu_seqlens_q");
    assert!(
        matches!(
            e,
            TensorError::DType {
                got: DType::U32,
                ..
            }
        ),
        "{e}"
    );

    let short_host = [17, 40];
    let call = UnifiedCall {
        seq_lens: HostMeta {
            device: &p.seq,
            host: &short_host,
        },
        ..p.call()
    };
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &p.v, &call));
    assert_eq!(t, "seq_lens");
    assert_eq!(e, TensorError::HostCopy { device: 3, host: 2 });

    let table_t = ints(&p.table_host, &[4, 3]).t().expect("transpose");
    let call = UnifiedCall {
        block_table: HostMeta {
            device: &table_t,
            host: &p.table_host,
        },
        ..p.call()
    };
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &p.v, &call));
    assert_eq!(t, "block_table");
    assert!(matches!(e, TensorError::Strides { .. }), "{e}");

    let sinks = rand(&[7], DType::F32);
    let call = UnifiedCall {
        sinks: Some(&sinks),
        ..p.call()
    };
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &p.v, &call));
    assert_eq!(t, "sinks");
    assert!(
        matches!(
            e,
            TensorError::Extent {
                got: 7,
                expected: 8,
                ..
            }
        ),
        "{e}"
    );

    let ranges_host = vec![0i32; 3 * 2 * 3];
    let ranges = ints(&ranges_host, &[3, 2, 3]);
    let call = UnifiedCall {
        mm_prefix_ranges: CandleMmRanges::PerSequence(HostMeta {
            device: &ranges,
            host: &ranges_host,
        }),
        ..p.call()
    };
    let (t, e) = tensor_error(check_unified(&p.q, &p.k, &p.v, &call));
    assert_eq!(t, "mm_prefix_ranges");
    assert!(
        matches!(
            e,
            TensorError::Extent {
                dim: "pair",
                got: 3,
                ..
            }
        ),
        "{e}"
    );

    // The same extras, well formed: only the CPU device is left to refuse.
    let sinks = rand(&[8], DType::F32);
    let ranges_host = vec![0i32; 3 * 2 * 2];
    let ranges = ints(&ranges_host, &[3, 2, 2]);
    let call = UnifiedCall {
        sinks: Some(&sinks),
        mm_prefix_ranges: CandleMmRanges::PerSequence(HostMeta {
            device: &ranges,
            host: &ranges_host,
        }),
        ..p.call()
    };
    let r = check_unified(&p.q, &p.k, &p.v, &call);
    assert!(matches!(r, Err(CandleOpError::NeedsCuda { .. })), "{r:?}");
}

#[test]
fn typed_errors_survive_the_mapping_into_candle_errors() {
    let p = Problem::new();
    let q2 = rand(&[3, 512], DType::BF16);
    let err = check_unified(&q2, &p.k, &p.v, &p.call()).expect_err("rank");
    let text = err.to_string();
    let candle: candle_core::Error = err.into();
    assert!(candle.to_string().contains(&text), "{candle}");
    let back = op_error(&candle).expect("the typed error is inside");
    assert!(
        matches!(
            back,
            CandleOpError::Tensor {
                tensor: "q",
                error: TensorError::Rank { .. },
                ..
            }
        ),
        "{back:?}"
    );
    // Through candle's context wrappers, as a model's code would add them.
    let wrapped = Err::<(), _>(candle)
        .context("layer 3 attention")
        .expect_err("err");
    assert!(matches!(
        op_error(&wrapped),
        Some(CandleOpError::Tensor { tensor: "q", .. })
    ));
    let twice = wrapped.context("block 7");
    assert!(matches!(
        op_error(&twice),
        Some(CandleOpError::Tensor { tensor: "q", .. })
    ));
    // A candle error of another origin is not ours.
    assert!(op_error(&candle_core::Error::Msg("other".into())).is_none());
}

#[test]
fn bad_mla_tensors_are_typed_errors() {
    let table_host: Vec<i32> = (0..6).collect();
    let table = ints(&table_host, &[2, 3]);
    let meta = HostMeta {
        device: &table,
        host: &table_host,
    };
    let q = rand(&[3, 4, 576], DType::BF16);
    let cur = rand(&[3, 576], DType::BF16);
    let cache = rand(&[6, 64, 576], DType::BF16);
    let w = rand(&[4, 512, 128], DType::BF16);
    let r = check_mla(&q, &cur, &cache, &meta, &w);
    assert!(
        matches!(
            r,
            Err(CandleOpError::NeedsCuda {
                tensor: "q_loc",
                ..
            })
        ),
        "{r:?}"
    );

    let q575 = rand(&[3, 4, 575], DType::BF16);
    let (t, e) = tensor_error(check_mla(&q575, &cur, &cache, &meta, &w));
    assert_eq!(t, "q_loc");
    assert!(
        matches!(
            e,
            TensorError::Extent {
                dim: "width",
                got: 575,
                ..
            }
        ),
        "{e}"
    );

    let cur2 = rand(&[2, 576], DType::BF16);
    let (t, e) = tensor_error(check_mla(&q, &cur2, &cache, &meta, &w));
    assert_eq!(t, "cur_kv");
    assert!(
        matches!(e, TensorError::Extent { dim: "tokens", .. }),
        "{e}"
    );

    let w5 = rand(&[5, 512, 128], DType::BF16);
    let (t, e) = tensor_error(check_mla(&q, &cur, &cache, &meta, &w5));
    assert_eq!(t, "w_uv");
    assert!(matches!(e, TensorError::Extent { dim: "heads", .. }), "{e}");

    let q32 = rand(&[3, 4, 576], DType::F32);
    let (t, e) = tensor_error(check_mla(&q32, &cur, &cache, &meta, &w));
    assert_eq!(t, "q_loc");
    assert!(
        matches!(
            e,
            TensorError::DType {
                got: DType::F32,
                ..
            }
        ),
        "{e}"
    );

    let table_f = rand(&[2, 3], DType::F32);
    let meta_f = HostMeta {
        device: &table_f,
        host: &table_host,
    };
    let (t, e) = tensor_error(check_mla(&q, &cur, &cache, &meta_f, &w));
    assert_eq!(t, "block_table");
    assert!(matches!(e, TensorError::DType { .. }), "{e}");
}
