//! D ranks of one decode step simulated on one GPU (spec §9.5): the ranks' contexts share
//! one main stream and the history exchange is a device-to-device copy (`simulate_a2a`), so
//! the multi-rank op runs and is tested without NCCL or a second GPU.

use super::super::exchange::simulate_a2a;
use super::config::ExchangeMode;
use super::{
    same_stream, DecodeBuffers, DecodeElem, LaunchReport, Mark, MlaDcpContext, MlaDcpDecodeArgs,
    MlaError, Stage,
};

/// Checks that `ctxs` are the D ranks of one simulated step, in rank order, on one main
/// stream; returns rank 0's context.
fn check_simulated<E: DecodeElem>(
    ctxs: &[MlaDcpContext<E>],
    args_len: Option<usize>,
) -> Result<&MlaDcpContext<E>, MlaError> {
    let Some(first) = ctxs.first() else {
        return Err(MlaError::RankCount {
            what: "contexts",
            got: 0,
            expected: 0,
        });
    };
    let d = first.config.layout.dcp_size as usize;
    if ctxs.len() != d || d == 0 {
        return Err(MlaError::RankCount {
            what: "contexts",
            got: ctxs.len(),
            expected: d,
        });
    }
    if let Some(n) = args_len.filter(|&n| n != d) {
        return Err(MlaError::RankCount {
            what: "argument sets",
            got: n,
            expected: d,
        });
    }
    for (index, c) in ctxs.iter().enumerate() {
        if c.config.exchange != ExchangeMode::Simulated {
            return Err(MlaError::Mismatch {
                what: "the exchange mode (all must be Simulated)",
            });
        }
        if c.config.dcp_rank as usize != index {
            return Err(MlaError::RankOrder {
                index,
                got: c.config.dcp_rank,
            });
        }
        if c.config.layout != first.config.layout
            || c.config.heads_per_rank != first.config.heads_per_rank
        {
            return Err(MlaError::Mismatch {
                what: "the DCP layout or heads_per_rank",
            });
        }
        if !same_stream(c.main_stream(), first.main_stream()) {
            return Err(MlaError::SharedStream { index });
        }
    }
    Ok(first)
}

/// The simulated A2A over all D contexts: `recv_r[src] = send_src[r]` on the shared main stream.
pub fn simulated_exchange<E: DecodeElem>(ctxs: &mut [MlaDcpContext<E>]) -> Result<(), MlaError> {
    let first = check_simulated(ctxs, None)?;
    let chunk = first.state("simulated exchange")?.chunk;
    let main = first.main_stream().clone();
    for c in ctxs.iter() {
        if c.stage != Stage::HistoryDone || c.state("simulated exchange")?.chunk != chunk {
            return Err(MlaError::StageOrder {
                stage: "simulated_exchange",
                why: "every rank must have enqueued the history of the same step",
            });
        }
    }
    let total = chunk.total_bytes();
    first.delay_exchange(&main)?;
    let mut sends = Vec::with_capacity(ctxs.len());
    let mut recvs = Vec::with_capacity(ctxs.len());
    for c in ctxs.iter_mut() {
        let DecodeBuffers {
            hist_send,
            hist_recv,
            ..
        } = &mut c.bufs;
        sends.push(hist_send.slice(0..total));
        recvs.push(hist_recv.slice_mut(0..total));
    }
    simulate_a2a(&main, &chunk, &sends, &mut recvs)?;
    drop(recvs);
    drop(sends);
    for c in ctxs.iter_mut() {
        c.mark(Mark::Exchanged, &main)?;
        c.stage = Stage::Exchanged;
    }
    Ok(())
}

/// One decode step of D ranks simulated on one GPU (spec §9.5): `ctxs[r]` and `args[r]` are
/// rank r's (Simulated mode, one shared main stream, rank order). Each rank's result is its
/// context's [`MlaDcpContext::output`].
pub fn simulated_decode<E: DecodeElem>(
    ctxs: &mut [MlaDcpContext<E>],
    args: &[MlaDcpDecodeArgs<'_, E>],
) -> Result<Vec<LaunchReport>, MlaError> {
    check_simulated(ctxs, Some(args.len()))?;
    // All ranks first: a later rank's module loads must not land inside an earlier rank's
    // fork/join window (see `prepare_call`).
    for (c, a) in ctxs.iter_mut().zip(args) {
        c.prepare_call(a)?;
    }
    let reports = ctxs
        .iter_mut()
        .zip(args)
        .map(|(c, a)| c.enqueue_prepared(a))
        .collect::<Result<Vec<_>, _>>()?;
    simulated_exchange(ctxs)?;
    for (c, a) in ctxs.iter_mut().zip(args) {
        c.enqueue_after_exchange(a)?;
    }
    Ok(reports)
}
