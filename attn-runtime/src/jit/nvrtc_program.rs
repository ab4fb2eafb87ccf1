//! A safe owner of one `nvrtcProgram` created with in-memory headers.
//!
//! cudarc's `compile_ptx_with_opts` takes no headers and returns PTX only; the runtime
//! needs the prelude as an in-memory header and a cubin, so it talks to NVRTC's C API
//! through `cudarc::nvrtc::sys` here, in one place, with every call checked.

use super::JitError;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, c_int, CStr, CString};

/// An NVRTC program; destroyed on drop.
pub(crate) struct NvrtcProgram {
    prog: sys::nvrtcProgram,
    /// NVRTC keeps pointers into these until the program is destroyed.
    _keep: Vec<CString>,
}

impl NvrtcProgram {
    /// Creates a program named `name` from `source` with `headers` as `(include name, text)`.
    pub(crate) fn new(
        name: &str,
        entry: &str,
        source: &str,
        headers: &[(&str, &str)],
    ) -> Result<Self, JitError> {
        ensure_loaded()?;
        let cstr = |s: &str| {
            CString::new(s).map_err(|e| JitError::NulInSource {
                entry: entry.to_string(),
                offset: e.nul_position(),
            })
        };
        let src = cstr(source)?;
        let prog_name = cstr(name)?;
        let contents = headers
            .iter()
            .map(|(_, t)| cstr(t))
            .collect::<Result<Vec<_>, _>>()?;
        let names = headers
            .iter()
            .map(|(n, _)| cstr(n))
            .collect::<Result<Vec<_>, _>>()?;
        let content_ptrs: Vec<*const c_char> = contents.iter().map(|c| c.as_ptr()).collect();
        let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer is a live NUL-terminated string kept in `_keep` below.
        let rc = unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                prog_name.as_ptr(),
                headers.len() as c_int,
                content_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        };
        check("nvrtcCreateProgram", rc)?;
        let mut keep = vec![src, prog_name];
        keep.extend(contents);
        keep.extend(names);
        Ok(NvrtcProgram { prog, _keep: keep })
    }

    /// Compiles with `options`; `Ok(false)` means a compile error (read the log).
    pub(crate) fn compile(&self, options: &[String]) -> Result<bool, JitError> {
        let opts = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| JitError::Nvrtc {
                call: "nvrtcCompileProgram",
                message: format!("option with NUL: {e}"),
            })?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: `self.prog` is live; option strings outlive the call.
        let rc = unsafe { sys::nvrtcCompileProgram(self.prog, ptrs.len() as c_int, ptrs.as_ptr()) };
        match rc {
            sys::nvrtcResult::NVRTC_SUCCESS => Ok(true),
            sys::nvrtcResult::NVRTC_ERROR_COMPILATION => Ok(false),
            other => check("nvrtcCompileProgram", other).map(|_| false),
        }
    }

    /// The compile log (warnings, errors, `-Xptxas -v` statistics).
    pub(crate) fn log(&self) -> Result<String, JitError> {
        let bytes = self.fetch(
            "nvrtcGetProgramLog",
            |p, n| unsafe { sys::nvrtcGetProgramLogSize(p, n) },
            |p, b| unsafe { sys::nvrtcGetProgramLog(p, b) },
        )?;
        Ok(text_until_nul(&bytes))
    }

    /// The cubin (only when compiled for a real `sm_XY` arch).
    pub(crate) fn cubin(&self) -> Result<Vec<u8>, JitError> {
        self.fetch(
            "nvrtcGetCUBIN",
            |p, n| unsafe { sys::nvrtcGetCUBINSize(p, n) },
            |p, b| unsafe { sys::nvrtcGetCUBIN(p, b) },
        )
    }

    /// The PTX text.
    pub(crate) fn ptx(&self) -> Result<String, JitError> {
        let bytes = self.fetch(
            "nvrtcGetPTX",
            |p, n| unsafe { sys::nvrtcGetPTXSize(p, n) },
            |p, b| unsafe { sys::nvrtcGetPTX(p, b) },
        )?;
        Ok(text_until_nul(&bytes))
    }

    fn fetch(
        &self,
        call: &'static str,
        size: impl Fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult,
        get: impl Fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult,
    ) -> Result<Vec<u8>, JitError> {
        let mut n = 0usize;
        check(call, size(self.prog, &mut n))?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            check(call, get(self.prog, buf.as_mut_ptr().cast()))?;
        }
        Ok(buf)
    }
}

impl Drop for NvrtcProgram {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed exactly once.
        unsafe {
            let _ = sys::nvrtcDestroyProgram(&mut self.prog);
        }
    }
}

/// Fails with [`JitError::NvrtcUnavailable`] instead of cudarc's panic when the library is missing.
#[cfg(feature = "dynamic-loading")]
pub(crate) fn ensure_loaded() -> Result<(), JitError> {
    // SAFETY: only probes the dynamic loader.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(JitError::NvrtcUnavailable)
    }
}

/// Linked builds (`candle-cuda`): the loader resolved libnvrtc before `main`, so it is there.
#[cfg(not(feature = "dynamic-loading"))]
pub(crate) fn ensure_loaded() -> Result<(), JitError> {
    Ok(())
}

/// NVRTC's `(major, minor)` version.
pub fn nvrtc_version() -> Result<(i32, i32), JitError> {
    ensure_loaded()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    check("nvrtcVersion", unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}

/// The real architectures (`sm_XY` numbers) this NVRTC can produce cubins for.
pub fn supported_archs() -> Result<Vec<u32>, JitError> {
    ensure_loaded()?;
    let mut n: c_int = 0;
    // SAFETY: writes one int, then `n` ints.
    check("nvrtcGetNumSupportedArchs", unsafe {
        sys::nvrtcGetNumSupportedArchs(&mut n)
    })?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    if n > 0 {
        check("nvrtcGetSupportedArchs", unsafe {
            sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
        })?;
    }
    Ok(archs.into_iter().map(|a| a as u32).collect())
}

fn check(call: &'static str, rc: sys::nvrtcResult) -> Result<(), JitError> {
    if rc == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: NVRTC returns a static string for every result code.
    let message = unsafe {
        let p = sys::nvrtcGetErrorString(rc);
        if p.is_null() {
            format!("{rc:?}")
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Err(JitError::Nvrtc { call, message })
}

fn text_until_nul(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
