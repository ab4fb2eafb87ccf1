//! Why a step could not be captured or replayed.

use cudarc::driver::DriverError;

/// Errors of CUDA-graph capture and replay; each names what to change.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error(
        "the stream is the context's legacy default stream, which CUDA cannot capture; run \
         the op on a stream from CudaContext::new_stream"
    )]
    LegacyStream,
    #[error(
        "the context tracks buffer uses with events (it has several streams), and a captured \
         launch would wait on events recorded outside the capture; order streams yourself and \
         call `unsafe {{ ctx.disable_event_tracking() }}` before capturing"
    )]
    EventTracking,
    #[error("the stream is already capturing a graph; end that capture first")]
    AlreadyCapturing,
    #[error("the capture recorded no work, so there is no graph to replay")]
    Empty,
    #[error(
        "a step cannot be captured while it would {what}; run the step once outside capture \
         (or precompile) so that it is in steady state"
    )]
    NotSteadyState { what: &'static str },
    #[error(
        "replay arguments differ from the captured step: {what} (captured {captured}, now \
         {now}); capture a new graph for them"
    )]
    ReplayMismatch {
        what: String,
        captured: String,
        now: String,
    },
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        during: &'static str,
        #[source]
        source: DriverError,
    },
}

impl GraphError {
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> GraphError {
        move |source| GraphError::Driver { during, source }
    }
}
