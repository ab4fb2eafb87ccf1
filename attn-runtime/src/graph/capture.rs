//! Stream capture into a replayable graph, with the checks that keep a capture honest.

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaGraph, CudaStream, DriverError};

use super::GraphError;

/// A captured, instantiated step: [`StepGraph::launch`] replays it on the stream it was
/// captured on. The buffers it touches are fixed at capture; keep them alive and write new
/// inputs into them (on the same stream, or ordered before the replay) between replays.
pub struct StepGraph {
    graph: CudaGraph,
    stream: Arc<CudaStream>,
}

impl StepGraph {
    /// Enqueues one replay of the captured work on the capture stream.
    pub fn launch(&self) -> Result<(), GraphError> {
        self.graph
            .launch()
            .map_err(GraphError::driver("launching the graph"))
    }

    /// Uploads the graph's resources now, so the first replay pays no setup.
    pub fn upload(&self) -> Result<(), GraphError> {
        self.graph
            .upload()
            .map_err(GraphError::driver("uploading the graph"))
    }

    /// The stream the graph was captured on and replays on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl std::fmt::Debug for StepGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepGraph")
            .field("stream", &self.stream.cu_stream())
            .finish_non_exhaustive()
    }
}

/// Whether `stream` is inside a capture (an invalidated capture counts: it is still open).
pub fn is_capturing(stream: &CudaStream) -> Result<bool, DriverError> {
    Ok(stream.capture_status()? != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Captures the work `record` enqueues on `stream` (and on streams that join it through
/// events) and instantiates it. An error of `record` ends the capture, discards it and is
/// returned as is; a non-capturable operation inside it (a synchronization, a synchronous
/// allocation, a copy from pageable memory) makes the capture fail with a driver error.
///
/// The capture mode is thread-local: this thread's unsafe calls fail the capture, other
/// threads are not affected.
pub fn capture<E: From<GraphError>>(
    stream: &Arc<CudaStream>,
    record: impl FnOnce() -> Result<(), E>,
) -> Result<StepGraph, E> {
    check_capturable(stream)?;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(GraphError::driver("beginning the capture"))?;
    let open = OpenCapture {
        stream: Some(stream),
    };
    let recorded = record();
    let ended = open.end();
    recorded?;
    let graph = ended
        .map_err(GraphError::driver(
            "ending the capture (an operation inside it could not be captured)",
        ))?
        .ok_or(GraphError::Empty)?;
    Ok(StepGraph {
        graph,
        stream: stream.clone(),
    })
}

/// What must hold before a capture begins.
fn check_capturable(stream: &CudaStream) -> Result<(), GraphError> {
    if stream.cu_stream().is_null() {
        return Err(GraphError::LegacyStream);
    }
    // cudarc makes every launch wait on each buffer's last-use events when the context
    // has several streams; those waits on events recorded before the capture are illegal
    // inside it, and the events it would record inside could not be waited on after.
    if stream.context().is_managing_stream_synchronization() {
        return Err(GraphError::EventTracking);
    }
    if is_capturing(stream).map_err(GraphError::driver("querying the capture status"))? {
        return Err(GraphError::AlreadyCapturing);
    }
    Ok(())
}

/// Ends the capture exactly once, even when the recording closure panics (a stream left
/// capturing would make every later call on it fail).
struct OpenCapture<'s> {
    stream: Option<&'s Arc<CudaStream>>,
}

impl OpenCapture<'_> {
    fn end(mut self) -> Result<Option<CudaGraph>, DriverError> {
        match self.stream.take() {
            Some(s) => s.end_capture(CUgraphInstantiate_flags(0)),
            None => Ok(None),
        }
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = s.end_capture(CUgraphInstantiate_flags(0));
        }
    }
}
