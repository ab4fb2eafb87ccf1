//! The NCCL collectives of MLA-DCP decode (spec `mla_dcp.md` §9.3): the history exchange (an
//! all-to-all of raw bytes built from grouped send/recv), the Q all-gather, and a single-GPU
//! simulation of the exchange for tests. The AG+RS parity mode lives in `ag_rs.rs`.
//!
//! cudarc's `Group` calls `group_end().unwrap()` in `Drop`, so an NCCL error would panic there;
//! this module calls `group_start`/`group_end` itself and returns every failure as an
//! [`ExchangeError`]. Two usage shapes are supported:
//! - one process (or thread) per GPU: the `*_rank` functions, one call per rank;
//! - one thread driving every GPU of a `Comm::from_devices` set: the `*_single_process` functions,
//!   which wrap all ranks' calls in one outer group as NCCL requires.

use super::act_dtype::ActDtype;
use super::chunk_layout::ChunkLayout;
use super::cuda_source::CudaSourceError;
use cudarc::driver::{
    CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, DriverError,
};
use cudarc::nccl::result::{group_end, group_start, NcclError};
use cudarc::nccl::{Comm, NcclType};
use std::sync::Arc;

/// Errors of the exchange: geometry, buffers that do not fit the layout, NCCL / driver failures.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// A dimension of the exchange layout is 0.
    #[error("exchange dimension `{name}` is 0; ranks, heads and latent width must be at least 1")]
    ZeroDim {
        /// Name of the dimension.
        name: &'static str,
    },
    /// A buffer size of the layout overflows `usize`.
    #[error(
        "exchange buffer size overflows usize for D={ranks}, N={heads}, T={tokens}, L={latent}"
    )]
    Overflow {
        /// Ranks D.
        ranks: usize,
        /// Heads per rank N.
        heads: usize,
        /// Tokens T.
        tokens: usize,
        /// Latent width L.
        latent: usize,
    },
    /// The communicator's world size is not the layout's D.
    #[error("the communicator has {world} ranks but the layout is for D={ranks}")]
    WorldSizeMismatch {
        /// The communicator's world size.
        world: usize,
        /// The layout's D.
        ranks: usize,
    },
    /// A rank is not below D.
    #[error("rank {rank} is out of range for D={ranks}")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The layout's D.
        ranks: usize,
    },
    /// A per-rank list has the wrong length.
    #[error("{what}: got {got} entries, expected one per rank ({expected})")]
    RankCount {
        /// What the list holds.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The layout's D.
        expected: usize,
    },
    /// A buffer is shorter than the layout needs.
    #[error("buffer `{buffer}` of rank {rank} holds {got} elements but needs at least {needed}")]
    BufferTooSmall {
        /// Name of the buffer.
        buffer: &'static str,
        /// The rank it belongs to.
        rank: usize,
        /// Elements it holds.
        got: usize,
        /// Elements the layout needs.
        needed: usize,
    },
    /// A buffer lives on another device than its communicator or stream.
    #[error("buffer `{buffer}` of rank {rank} lives on device {got} but its communicator/stream is on device {expected}")]
    WrongDevice {
        /// Name of the buffer.
        buffer: &'static str,
        /// The rank it belongs to.
        rank: usize,
        /// Its device ordinal.
        got: usize,
        /// The communicator's / stream's device ordinal.
        expected: usize,
    },
    /// A host buffer has the wrong number of elements.
    #[error("host {what} has {got} elements, expected {expected}")]
    HostLength {
        /// Name of the host buffer.
        what: &'static str,
        /// Elements it has.
        got: usize,
        /// Elements expected.
        expected: usize,
    },
    /// The data's activation dtype is not the layout's.
    #[error("the layout is for {layout} activations but the data is {got}")]
    DtypeMismatch {
        /// The layout's dtype.
        layout: ActDtype,
        /// The data's dtype.
        got: ActDtype,
    },
    /// An NCCL call failed.
    #[error("NCCL failed during {during} (rank {rank:?}): {code}")]
    Nccl {
        /// What the exchange was doing.
        during: &'static str,
        /// The rank that failed, when known.
        rank: Option<usize>,
        /// The NCCL error code.
        code: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What the exchange was doing.
        during: &'static str,
        /// The driver error.
        source: DriverError,
    },
    /// Compiling or loading the hand-written CUDA plumbing kernels failed.
    #[error(transparent)]
    Source(#[from] CudaSourceError),
}

pub(crate) fn nccl_err(
    during: &'static str,
    rank: Option<usize>,
) -> impl FnOnce(NcclError) -> ExchangeError {
    // NcclError's Debug prints only "NcclError"; the code's Debug names the ncclResult_t.
    move |e| ExchangeError::Nccl {
        during,
        rank,
        code: format!("{:?}", e.0),
    }
}

pub(crate) fn driver_err(during: &'static str) -> impl FnOnce(DriverError) -> ExchangeError {
    move |source| ExchangeError::Driver { during, source }
}

/// An open NCCL group. [`NcclGroup::end`] reports `group_end`'s result; dropping an unended group
/// (on an early error return) closes it and discards the second error, never panicking.
pub(crate) struct NcclGroup {
    open: bool,
    during: &'static str,
}

impl NcclGroup {
    pub(crate) fn start(during: &'static str) -> Result<Self, ExchangeError> {
        group_start().map_err(nccl_err(during, None))?;
        Ok(NcclGroup { open: true, during })
    }

    pub(crate) fn end(mut self) -> Result<(), ExchangeError> {
        self.open = false;
        group_end().map(|_| ()).map_err(nccl_err(self.during, None))
    }
}

impl Drop for NcclGroup {
    fn drop(&mut self) {
        if self.open {
            let _ = group_end();
        }
    }
}

/// Re-records the cudarc read/write events of `read` and `write` on `stream` after the group has
/// been launched. cudarc records them when each send/recv is *queued* inside the group, i.e. before
/// `group_end` enqueues the NCCL kernel; touching the buffers again here makes the events cover it.
pub(crate) fn mark_used_after_group<A, B, R: DevicePtr<A>, W: DevicePtrMut<B>>(
    stream: &CudaStream,
    read: &R,
    write: &mut W,
) {
    let (_, read_guard) = read.device_ptr(stream);
    drop(read_guard);
    let (_, write_guard) = write.device_ptr_mut(stream);
    drop(write_guard);
}

/// What happens to the chunk a rank "sends to itself".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfChunk {
    /// Device-to-device copy of `send[r]` into `recv[r]` on the communicator's stream.
    Copy,
    /// Leave `recv[r]` untouched: the combine reads the own partial from `send[r]` directly.
    Skip,
    /// Send/recv to self through NCCL like any other peer.
    Nccl,
}

fn check_device(
    buffer: &'static str,
    rank: usize,
    got: usize,
    expected: usize,
) -> Result<(), ExchangeError> {
    if got == expected {
        Ok(())
    } else {
        Err(ExchangeError::WrongDevice {
            buffer,
            rank,
            got,
            expected,
        })
    }
}

fn check_len(
    buffer: &'static str,
    rank: usize,
    got: usize,
    needed: usize,
) -> Result<(), ExchangeError> {
    if got >= needed {
        Ok(())
    } else {
        Err(ExchangeError::BufferTooSmall {
            buffer,
            rank,
            got,
            needed,
        })
    }
}

fn check_comm(comm: &Comm, ranks: usize) -> Result<(), ExchangeError> {
    if comm.world_size() != ranks {
        return Err(ExchangeError::WorldSizeMismatch {
            world: comm.world_size(),
            ranks,
        });
    }
    Ok(())
}

fn check_a2a_buffers(
    comm: &Comm,
    layout: &ChunkLayout,
    send: &CudaView<u8>,
    recv: &CudaViewMut<u8>,
) -> Result<(), ExchangeError> {
    check_comm(comm, layout.ranks)?;
    let rank = comm.rank();
    let dev = comm.ordinal();
    check_device("hist_send", rank, send.stream().context().ordinal(), dev)?;
    check_device("hist_recv", rank, recv.stream().context().ordinal(), dev)?;
    check_len("hist_send", rank, send.len(), layout.total_bytes())?;
    check_len("hist_recv", rank, recv.len(), layout.total_bytes())
}

/// Queues rank `comm.rank()`'s sends/recvs (inside a group opened by the caller).
fn queue_a2a(
    comm: &Comm,
    layout: &ChunkLayout,
    send: &CudaView<u8>,
    recv: &mut CudaViewMut<u8>,
    self_chunk: SelfChunk,
) -> Result<(), ExchangeError> {
    let me = comm.rank();
    let bytes = layout.chunk_bytes();
    if bytes == 0 {
        return Ok(());
    }
    for peer in 0..layout.ranks {
        let range = layout.chunk_offset(peer)..layout.chunk_offset(peer) + bytes;
        if peer == me && self_chunk != SelfChunk::Nccl {
            if self_chunk == SelfChunk::Copy {
                let src = send.slice(range.clone());
                let mut dst = recv.slice_mut(range);
                comm.stream()
                    .memcpy_dtod(&src, &mut dst)
                    .map_err(driver_err("copying the self chunk of the history exchange"))?;
            }
            continue;
        }
        let peer_i32 = peer as i32;
        comm.send(&send.slice(range.clone()), peer_i32)
            .map_err(nccl_err("ncclSend of a history chunk", Some(me)))?;
        comm.recv(&mut recv.slice_mut(range), peer_i32)
            .map_err(nccl_err("ncclRecv of a history chunk", Some(me)))?;
    }
    Ok(())
}

/// The history A2A for one rank (one process or thread per GPU): `recv[p] = send_p[me]` for every
/// peer p, on the communicator's stream. Every rank of the communicator must call it.
pub fn a2a_rank(
    comm: &Comm,
    layout: &ChunkLayout,
    send: &CudaView<u8>,
    recv: &mut CudaViewMut<u8>,
    self_chunk: SelfChunk,
) -> Result<(), ExchangeError> {
    check_a2a_buffers(comm, layout, send, recv)?;
    let group = NcclGroup::start("the history all-to-all")?;
    queue_a2a(comm, layout, send, recv, self_chunk)?;
    group.end()?;
    mark_used_after_group(&comm.stream(), send, recv);
    Ok(())
}

/// The history A2A for all ranks of a `Comm::from_devices` set, driven from one thread.
pub fn a2a_single_process(
    comms: &[Comm],
    layout: &ChunkLayout,
    sends: &[CudaView<u8>],
    recvs: &mut [CudaViewMut<u8>],
    self_chunk: SelfChunk,
) -> Result<(), ExchangeError> {
    check_rank_count("hist_send buffers", sends.len(), comms.len())?;
    check_rank_count("hist_recv buffers", recvs.len(), comms.len())?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter()) {
        check_a2a_buffers(comm, layout, send, recv)?;
    }
    let group = NcclGroup::start("the history all-to-all (all ranks)")?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter_mut()) {
        queue_a2a(comm, layout, send, recv, self_chunk)?;
    }
    group.end()?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter_mut()) {
        mark_used_after_group(&comm.stream(), send, recv);
    }
    Ok(())
}

pub(crate) fn check_rank_count(
    what: &'static str,
    got: usize,
    expected: usize,
) -> Result<(), ExchangeError> {
    if got == expected {
        Ok(())
    } else {
        Err(ExchangeError::RankCount {
            what,
            got,
            expected,
        })
    }
}

/// Single-GPU stand-in for the A2A: D virtual ranks' send buffers on one device,
/// `recv_r[src] = send_src[r]` for all r, src, as D² device-to-device copies on `stream`.
pub fn simulate_a2a(
    stream: &Arc<CudaStream>,
    layout: &ChunkLayout,
    sends: &[CudaView<u8>],
    recvs: &mut [CudaViewMut<u8>],
) -> Result<(), ExchangeError> {
    check_rank_count("simulated hist_send buffers", sends.len(), layout.ranks)?;
    check_rank_count("simulated hist_recv buffers", recvs.len(), layout.ranks)?;
    let dev = stream.context().ordinal();
    for (r, (send, recv)) in sends.iter().zip(recvs.iter()).enumerate() {
        check_device("hist_send", r, send.stream().context().ordinal(), dev)?;
        check_device("hist_recv", r, recv.stream().context().ordinal(), dev)?;
        check_len("hist_send", r, send.len(), layout.total_bytes())?;
        check_len("hist_recv", r, recv.len(), layout.total_bytes())?;
    }
    let bytes = layout.chunk_bytes();
    if bytes == 0 {
        return Ok(());
    }
    for (r, recv) in recvs.iter_mut().enumerate() {
        for (src, send) in sends.iter().enumerate() {
            let from = send.slice(layout.chunk_offset(r)..layout.chunk_offset(r) + bytes);
            let mut to = recv.slice_mut(layout.chunk_offset(src)..layout.chunk_offset(src) + bytes);
            stream.memcpy_dtod(&from, &mut to).map_err(driver_err(
                "copying a chunk of the simulated history exchange",
            ))?;
        }
    }
    Ok(())
}

fn check_gather<T>(
    comm: &Comm,
    send: &CudaView<T>,
    recv: &CudaViewMut<T>,
) -> Result<(), ExchangeError> {
    let rank = comm.rank();
    let dev = comm.ordinal();
    check_device(
        "all-gather send",
        rank,
        send.stream().context().ordinal(),
        dev,
    )?;
    check_device(
        "all-gather recv",
        rank,
        recv.stream().context().ordinal(),
        dev,
    )?;
    let needed =
        send.len()
            .checked_mul(comm.world_size())
            .ok_or(ExchangeError::BufferTooSmall {
                buffer: "all-gather recv",
                rank,
                got: recv.len(),
                needed: usize::MAX,
            })?;
    check_len("all-gather recv", rank, recv.len(), needed)
}

/// ncclAllGather of `send` (e.g. q_loc `[T, N, 576]`) into `recv` (q_all `[D, T, N, 576]`,
/// rank-major: gathered head p·N + h is `recv[p, t, h]`), on the communicator's stream.
pub fn all_gather_rank<T: NcclType>(
    comm: &Comm,
    send: &CudaView<T>,
    recv: &mut CudaViewMut<T>,
) -> Result<(), ExchangeError> {
    check_gather(comm, send, recv)?;
    comm.all_gather(send, recv)
        .map(|_| ())
        .map_err(nccl_err("ncclAllGather", Some(comm.rank())))
}

/// [`all_gather_rank`] for every rank of a `Comm::from_devices` set, from one thread.
pub fn all_gather_single_process<T: NcclType>(
    comms: &[Comm],
    sends: &[CudaView<T>],
    recvs: &mut [CudaViewMut<T>],
) -> Result<(), ExchangeError> {
    check_rank_count("all-gather send buffers", sends.len(), comms.len())?;
    check_rank_count("all-gather recv buffers", recvs.len(), comms.len())?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter()) {
        check_comm(comm, comms.len())?;
        check_gather(comm, send, recv)?;
    }
    let group = NcclGroup::start("the all-gather (all ranks)")?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter_mut()) {
        comm.all_gather(send, recv)
            .map_err(nccl_err("ncclAllGather", Some(comm.rank())))?;
    }
    group.end()?;
    for ((comm, send), recv) in comms.iter().zip(sends).zip(recvs.iter_mut()) {
        mark_used_after_group(&comm.stream(), send, recv);
    }
    Ok(())
}
