//! Function code on the device before the first launch. Under CUDA's lazy loading (the
//! default since 12.2) a function may be loaded at its first launch, and loading may
//! synchronize the whole context; a launch that does so inside a fork/join window makes one
//! stream wait for the other (it serialized the MLA-DCP side stream). Loading at load time
//! keeps every such wait out of the launch path.

use cudarc::driver::sys::{self, CUfunctionLoadingState};
use cudarc::driver::{CudaFunction, DriverError};

/// Loads `func`'s code now if the driver deferred it (a no-op when it is already loaded).
pub fn ensure_function_loaded(func: &CudaFunction) -> Result<(), DriverError> {
    let mut state = CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_UNLOADED;
    // SAFETY: `func` is a live function handle of a loaded module; `state` is written once.
    unsafe { sys::cuFuncIsLoaded(&mut state, func.cu_function()) }.result()?;
    if state == CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_LOADED {
        return Ok(());
    }
    // SAFETY: as above; cuFuncLoad only loads the function's code into its context.
    unsafe { sys::cuFuncLoad(func.cu_function()) }.result()
}
