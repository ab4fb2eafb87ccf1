//! Runs a host [`Problem`] on the GPU: inputs uploaded, outputs allocated NaN-poisoned,
//! one launch, outputs downloaded.

use crate::launch::{CudaKernelHandle, KernelArg, LaunchError};
use crate::problem::{HostBuffer, Problem, ProblemArg};
use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use half::{bf16, f16};
use std::sync::Arc;

/// A device copy of one host buffer, typed.
enum DeviceData {
    Bf16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
    F32(CudaSlice<f32>),
    I32(CudaSlice<i32>),
    I64(CudaSlice<i64>),
    Bool(CudaSlice<bool>),
}

impl DeviceData {
    fn upload(stream: &Arc<CudaStream>, b: &HostBuffer) -> Result<Self, DriverError> {
        Ok(match b {
            HostBuffer::Bf16(v) => DeviceData::Bf16(stream.clone_htod(v)?),
            HostBuffer::F16(v) => DeviceData::F16(stream.clone_htod(v)?),
            HostBuffer::F32(v) => DeviceData::F32(stream.clone_htod(v)?),
            HostBuffer::I32(v) => DeviceData::I32(stream.clone_htod(v)?),
            HostBuffer::I64(v) => DeviceData::I64(stream.clone_htod(v)?),
            HostBuffer::Bool(v) => DeviceData::Bool(stream.clone_htod(v)?),
        })
    }

    fn download(&self, stream: &Arc<CudaStream>) -> Result<HostBuffer, DriverError> {
        Ok(match self {
            DeviceData::Bf16(s) => HostBuffer::Bf16(stream.clone_dtoh(s)?),
            DeviceData::F16(s) => HostBuffer::F16(stream.clone_dtoh(s)?),
            DeviceData::F32(s) => HostBuffer::F32(stream.clone_dtoh(s)?),
            DeviceData::I32(s) => HostBuffer::I32(stream.clone_dtoh(s)?),
            DeviceData::I64(s) => HostBuffer::I64(stream.clone_dtoh(s)?),
            DeviceData::Bool(s) => HostBuffer::Bool(stream.clone_dtoh(s)?),
        })
    }

    fn as_input(&self) -> KernelArg<'_> {
        match self {
            DeviceData::Bf16(s) => KernelArg::input(s.as_view()),
            DeviceData::F16(s) => KernelArg::input(s.as_view()),
            DeviceData::F32(s) => KernelArg::input(s.as_view()),
            DeviceData::I32(s) => KernelArg::input(s.as_view()),
            DeviceData::I64(s) => KernelArg::input(s.as_view()),
            DeviceData::Bool(s) => KernelArg::input(s.as_view()),
        }
    }

    fn as_output(&mut self) -> KernelArg<'_> {
        match self {
            DeviceData::Bf16(s) => KernelArg::output(s.as_view_mut()),
            DeviceData::F16(s) => KernelArg::output(s.as_view_mut()),
            DeviceData::F32(s) => KernelArg::output(s.as_view_mut()),
            DeviceData::I32(s) => KernelArg::output(s.as_view_mut()),
            DeviceData::I64(s) => KernelArg::output(s.as_view_mut()),
            DeviceData::Bool(s) => KernelArg::output(s.as_view_mut()),
        }
    }
}

/// The problem's buffers on the device, reusable across timed launches.
pub struct DeviceProblem {
    /// One entry per argument: `Some` for buffers, `None` for scalars.
    data: Vec<Option<DeviceData>>,
    problem: Problem,
}

impl DeviceProblem {
    /// Uploads inputs and allocates NaN-poisoned outputs.
    pub fn upload(stream: &Arc<CudaStream>, problem: &Problem) -> Result<Self, LaunchError> {
        let up = LaunchError::driver("uploading problem buffers");
        let data = problem
            .args
            .iter()
            .map(|a| match a {
                ProblemArg::Input(b) => DeviceData::upload(stream, b).map(Some),
                ProblemArg::Output { elem, len } => {
                    DeviceData::upload(stream, &HostBuffer::poisoned(*elem, *len)).map(Some)
                }
                ProblemArg::Scalar(_) => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(up)?;
        Ok(DeviceProblem {
            data,
            problem: problem.clone(),
        })
    }

    /// One launch of `kernel` over the problem's grid.
    pub fn launch(
        &mut self,
        stream: &Arc<CudaStream>,
        kernel: &CudaKernelHandle,
    ) -> Result<(), LaunchError> {
        let args = self
            .data
            .iter_mut()
            .zip(&self.problem.args)
            .map(|(d, a)| match (d, a) {
                (Some(d), ProblemArg::Output { .. }) => d.as_output(),
                (Some(d), _) => d.as_input(),
                (None, ProblemArg::Scalar(s)) => KernelArg::Scalar(*s),
                (None, _) => KernelArg::Scalar(attn_dsl::kernel::ScalarArg::I32(0)),
            })
            .collect();
        kernel.launch(stream, self.problem.grid, args)
    }

    /// Downloads the outputs, in argument order.
    pub fn outputs(&self, stream: &Arc<CudaStream>) -> Result<Vec<HostBuffer>, LaunchError> {
        self.problem
            .output_indices()
            .into_iter()
            .filter_map(|i| self.data[i].as_ref())
            .map(|d| {
                d.download(stream)
                    .map_err(LaunchError::driver("downloading outputs"))
            })
            .collect()
    }
}

/// Uploads, launches once, downloads the outputs.
pub fn run_on_gpu(
    stream: &Arc<CudaStream>,
    kernel: &CudaKernelHandle,
    problem: &Problem,
) -> Result<Vec<HostBuffer>, LaunchError> {
    let mut dev = DeviceProblem::upload(stream, problem)?;
    dev.launch(stream, kernel)?;
    dev.outputs(stream)
}
