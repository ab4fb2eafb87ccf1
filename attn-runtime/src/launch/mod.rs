//! Typed and untyped kernel launches (DESIGN §3.6): a [`Cuda`] backend for `instantiate!`
//! argument structs, [`launch`] / [`TypedKernel`] for compile-time kernels,
//! [`CudaKernelHandle`] for run-time specializations, host-side validation first.

mod args;
mod device;
mod eager;
mod error;
mod grid;
mod loaded;
mod slot;
mod tensor_map;
mod validate;

pub use args::{Cuda, DeviceBuffer, KernelArg};
pub use device::{ensure_driver, CudaDevice};
pub use eager::ensure_function_loaded;
pub use error::LaunchError;
pub use grid::Grid;
pub use loaded::{process_cache, LoadedKernel};
pub use slot::{launch, CudaKernelHandle, KernelSlot, TypedKernel};
pub use tensor_map::{
    check_map_spec, encode_maps, encode_tiled, tiled_map_inputs, tiled_map_inputs_from_args,
    MapArg, TensorMapSpec, TiledMapInputs,
};
pub use validate::{
    scalar_type, validate_alignment, validate_args, validate_config, ArgSummary, DeviceLimits,
    LaunchSpec, ParamSpec, BUFFER_ALIGN, DEFAULT_SHARED_LIMIT,
};
