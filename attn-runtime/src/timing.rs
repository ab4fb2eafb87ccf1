//! GPU timing with CUDA events (device clocks, not host clocks), for benches and `attn bench`.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, DriverError};
use std::sync::Arc;

/// A start/stop event pair on one stream.
pub struct EventTimer {
    start: CudaEvent,
    stop: CudaEvent,
}

impl EventTimer {
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self, DriverError> {
        let ctx = stream.context();
        Ok(EventTimer {
            start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            stop: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        })
    }

    pub fn start(&self, stream: &CudaStream) -> Result<(), DriverError> {
        self.start.record(stream)
    }

    pub fn stop(&self, stream: &CudaStream) -> Result<(), DriverError> {
        self.stop.record(stream)
    }

    /// Milliseconds between the two events (waits for the stop event).
    pub fn elapsed_ms(&self) -> Result<f32, DriverError> {
        self.stop.synchronize()?;
        self.start.elapsed_ms(&self.stop)
    }
}

/// Times `iters` back-to-back runs of `f` on `stream`; returns per-run milliseconds
/// (each run bracketed by its own events, so the median is meaningful).
pub fn time_runs<E: From<DriverError>>(
    stream: &Arc<CudaStream>,
    iters: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<Vec<f64>, E> {
    let timers = (0..iters)
        .map(|_| EventTimer::new(stream))
        .collect::<Result<Vec<_>, _>>()?;
    for t in &timers {
        t.start(stream)?;
        f()?;
        t.stop(stream)?;
    }
    timers
        .iter()
        .map(|t| t.elapsed_ms().map(|ms| ms as f64).map_err(E::from))
        .collect()
}
