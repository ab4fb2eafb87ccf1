//! Fork/join orchestration of one MLA-DCP decode layer (spec `mla_dcp.md` §9.4):
//!
//! 1. main (S0): absorb + RoPE + cur_kv → [`ForkJoin::fork`] records **E_q** and the side stream
//!    waits on it;
//! 2. side (S1): current-chunk attention → [`ForkJoin::join`] records **current_attn_done** and the
//!    main stream waits on it;
//! 3. main: all-gather(q) → history attention → A2A, then (after the join) combine → V-up.
//!
//! The events are created once with timing disabled and re-recorded every layer. WAR safety across
//! layers holds because E_q of layer L+1 is recorded on S0 after the combine of layer L.
//!
//! [`JoinMode::SkipJoinUnsafe`] leaves the main stream's wait out. It exists only so a test can show
//! the race that the join prevents; never use it in an op.

use super::cuda_source::{self, CudaSourceError};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// Errors of the stream orchestration (driver failures, NVRTC for the spin kernel).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What was being done.
        during: &'static str,
        /// The driver error.
        source: DriverError,
    },
    /// Compiling or loading the spin kernel failed.
    #[error(transparent)]
    Source(#[from] CudaSourceError),
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> StreamError {
    move |source| StreamError::Driver { during, source }
}

/// Whether [`ForkJoin::join`] makes the main stream wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinMode {
    /// The correct orchestration.
    Join,
    /// Records current_attn_done but does not wait on it: a deliberate race for the ordering test.
    SkipJoinUnsafe,
}

/// The main and side streams of a decode layer and the two events that order them.
#[derive(Debug)]
pub struct ForkJoin {
    main: Arc<CudaStream>,
    side: Arc<CudaStream>,
    e_q: CudaEvent,
    current_attn_done: CudaEvent,
    mode: JoinMode,
}

impl ForkJoin {
    /// Creates the side stream (non-blocking, same device, the device's greatest priority)
    /// and the events (timing disabled).
    ///
    /// The priority: the current part is little work beside the history, which fills every
    /// SM for several waves; at equal priority the block scheduler dispatches the history's
    /// waiting programs first, and a current part launched behind them finished after the
    /// history (H200, L1 step, 2026-12-02: side stream `[38, 442]` µs against the history's
    /// end at 422), holding up the combine.
    pub fn new(main: Arc<CudaStream>) -> Result<Self, StreamError> {
        let ctx = main.context().clone();
        let (_, greatest) = cudarc::driver::result::stream::get_priority_range()
            .map_err(driver("querying the stream priority range"))?;
        let side = ctx
            .new_stream_with_priority(greatest)
            .map_err(driver("creating the side stream"))?;
        let e_q = ctx.new_event(None).map_err(driver("creating event E_q"))?;
        let current_attn_done = ctx
            .new_event(None)
            .map_err(driver("creating event current_attn_done"))?;
        Ok(ForkJoin {
            main,
            side,
            e_q,
            current_attn_done,
            mode: JoinMode::Join,
        })
    }

    /// Sets the join mode ([`JoinMode::SkipJoinUnsafe`] only for the race demonstration).
    pub fn with_join_mode(mut self, mode: JoinMode) -> Self {
        self.mode = mode;
        self
    }

    /// How the side stream is joined back.
    pub fn mode(&self) -> JoinMode {
        self.mode
    }

    /// S0: the stream of the critical path (history, exchange, combine, V-up).
    pub fn main(&self) -> &Arc<CudaStream> {
        &self.main
    }

    /// S1: the stream of the current-chunk attention.
    pub fn side(&self) -> &Arc<CudaStream> {
        &self.side
    }

    /// E_q: q_loc and cur_kv are ready on S0; the side stream may start.
    pub fn e_q(&self) -> &CudaEvent {
        &self.e_q
    }

    /// current_attn_done: cur_out and cur_lse are ready on S1.
    pub fn current_attn_done(&self) -> &CudaEvent {
        &self.current_attn_done
    }

    /// Records E_q on the main stream and makes the side stream wait on it.
    pub fn fork(&self) -> Result<(), StreamError> {
        self.e_q
            .record(&self.main)
            .map_err(driver("recording E_q on the main stream"))?;
        self.side
            .wait(&self.e_q)
            .map_err(driver("making the side stream wait on E_q"))
    }

    /// Records current_attn_done on the side stream and (in [`JoinMode::Join`]) makes the main
    /// stream wait on it.
    pub fn join(&self) -> Result<(), StreamError> {
        self.current_attn_done
            .record(&self.side)
            .map_err(driver("recording current_attn_done on the side stream"))?;
        match self.mode {
            JoinMode::Join => self
                .main
                .wait(&self.current_attn_done)
                .map_err(driver("making the main stream wait on current_attn_done")),
            JoinMode::SkipJoinUnsafe => Ok(()),
        }
    }
}

/// CUDA source of the spin-delay kernel: one thread busy-waits for `cycles` SM clocks.
pub const SPIN_SOURCE: &str = r#"
extern "C" __global__ void spin_delay(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"#;

/// A kernel that keeps a stream busy, to widen race windows in ordering tests.
#[derive(Debug)]
pub struct SpinKernel {
    func: CudaFunction,
}

impl SpinKernel {
    /// Compiles the spin kernel for `stream`'s device.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, StreamError> {
        let module = cuda_source::load_module(stream.context(), "spin_delay", SPIN_SOURCE)?;
        let func = cuda_source::load_function(&module, "spin_delay")?;
        Ok(SpinKernel { func })
    }

    /// Enqueues a spin of `cycles` SM clock cycles on `stream` (one block of one thread).
    pub fn launch(&self, stream: &Arc<CudaStream>, cycles: i64) -> Result<(), StreamError> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.func);
        launch.arg(&cycles);
        // SAFETY: the kernel takes one `long long` and touches no memory.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("launching the spin-delay kernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::ag_rs::lse_correction_source;
    use super::super::cuda_source::compile_for_arch;
    use super::super::vup::vup_fallback_source;
    use super::*;

    /// NVRTC must be loadable (scripts/nvrtc-env); no GPU is needed.
    #[test]
    fn plumbing_kernels_compile_for_sm80_and_sm90() {
        for arch in ["sm_80", "sm_90"] {
            for (name, src) in [
                ("spin_delay", SPIN_SOURCE.to_string()),
                ("vup_fallback", vup_fallback_source()),
                ("lse_correction", lse_correction_source()),
            ] {
                let ptx = compile_for_arch(name, &src, arch).unwrap_or_else(|e| panic!("{e}"));
                assert!(!ptx.to_src().is_empty(), "{name} for {arch}: empty PTX");
            }
        }
    }
}
