//! Kernel arguments on the CUDA side and the [`Cuda`] backend of `instantiate!`'s typed
//! argument structs: `In<'a, T>` is a cudarc `CudaView`, `Out<'a, T>` a `CudaViewMut`, so
//! buffers from any cudarc-based code (candle and friends) pass straight in.

use super::validate::{scalar_type, ArgSummary};
use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::{Backend, DslType, ScalarArg};
use cudarc::driver::{
    sys::CUdeviceptr, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, SyncOnDrop,
};

/// The CUDA backend: typed device views in, one [`KernelArg`] per parameter out.
pub struct Cuda;

impl Backend for Cuda {
    type In<'a, T: DslType> = CudaView<'a, T>;
    type Out<'a, T: DslType> = CudaViewMut<'a, T>;
    type Arg<'a> = KernelArg<'a>;

    fn input<'a, T: DslType>(p: Self::In<'a, T>) -> Self::Arg<'a> {
        KernelArg::input(p)
    }
    fn output<'a, T: DslType>(p: Self::Out<'a, T>) -> Self::Arg<'a> {
        KernelArg::output(p)
    }
    fn scalar<'a>(v: ScalarArg) -> Self::Arg<'a> {
        KernelArg::Scalar(v)
    }
}

/// One launch argument: a device buffer (type-erased, element type kept) or a scalar.
pub enum KernelArg<'a> {
    Buffer(DeviceBuffer<'a>),
    Scalar(ScalarArg),
}

impl<'a> KernelArg<'a> {
    /// A read-only buffer (`*const T` parameter).
    pub fn input<T: DslType>(v: CudaView<'a, T>) -> Self {
        KernelArg::Buffer(DeviceBuffer {
            elem: T::TYPE,
            mutable: false,
            len: v.len(),
            view: Box::new(ReadView(v)),
        })
    }
    /// A writable buffer (`*mut T` parameter).
    pub fn output<T: DslType>(v: CudaViewMut<'a, T>) -> Self {
        KernelArg::Buffer(DeviceBuffer {
            elem: T::TYPE,
            mutable: true,
            len: v.len(),
            view: Box::new(WriteView(v)),
        })
    }
    pub fn summary(&self) -> ArgSummary {
        match self {
            KernelArg::Buffer(b) => ArgSummary::Buffer {
                elem: b.elem,
                mutable: b.mutable,
            },
            KernelArg::Scalar(v) => ArgSummary::Scalar(*v),
        }
    }
}

impl std::fmt::Debug for KernelArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelArg::Buffer(b) => {
                write!(f, "Buffer({} x {}, mutable: {})", b.len, b.elem, b.mutable)
            }
            KernelArg::Scalar(v) => write!(f, "Scalar({v:?}: {})", scalar_type(v)),
        }
    }
}

/// A device buffer whose element type is known only at run time.
pub struct DeviceBuffer<'a> {
    pub elem: ScalarType,
    pub mutable: bool,
    /// Length in elements.
    pub len: usize,
    view: Box<dyn RawDevicePtr + 'a>,
}

impl DeviceBuffer<'_> {
    /// The device address for a launch on `stream`; the guard orders the buffer's other
    /// uses against this launch (cudarc's event tracking) and must drop after the launch.
    pub(crate) fn device_ptr<'s>(
        &'s mut self,
        stream: &'s CudaStream,
    ) -> (CUdeviceptr, SyncOnDrop<'s>) {
        self.view.raw(stream)
    }
}

/// Type erasure over cudarc views.
trait RawDevicePtr {
    fn raw<'s>(&'s mut self, stream: &'s CudaStream) -> (CUdeviceptr, SyncOnDrop<'s>);
}

struct ReadView<'a, T>(CudaView<'a, T>);
struct WriteView<'a, T>(CudaViewMut<'a, T>);

impl<T> RawDevicePtr for ReadView<'_, T> {
    fn raw<'s>(&'s mut self, stream: &'s CudaStream) -> (CUdeviceptr, SyncOnDrop<'s>) {
        self.0.device_ptr(stream)
    }
}
impl<T> RawDevicePtr for WriteView<'_, T> {
    fn raw<'s>(&'s mut self, stream: &'s CudaStream) -> (CUdeviceptr, SyncOnDrop<'s>) {
        self.0.device_ptr_mut(stream)
    }
}

/// A scalar's bytes in an 8-byte slot (little-endian, low bytes first), so the driver
/// reads exactly `sizeof(param)` bytes from the slot's address.
pub(crate) fn scalar_slot(v: &ScalarArg) -> u64 {
    match *v {
        ScalarArg::I32(x) => x as u32 as u64,
        ScalarArg::I64(x) => x as u64,
        ScalarArg::F32(x) => x.to_bits() as u64,
        ScalarArg::Bool(b) => b as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_slots_hold_the_value_in_the_low_bytes() {
        let bytes = |v| scalar_slot(&v).to_le_bytes();
        assert_eq!(&bytes(ScalarArg::I32(-2))[..4], &(-2i32).to_le_bytes());
        assert_eq!(&bytes(ScalarArg::I32(-2))[4..], &[0, 0, 0, 0]);
        assert_eq!(bytes(ScalarArg::I64(-5)), (-5i64).to_le_bytes());
        assert_eq!(&bytes(ScalarArg::F32(1.5))[..4], &1.5f32.to_le_bytes());
        assert_eq!(bytes(ScalarArg::Bool(true))[0], 1);
    }
}
