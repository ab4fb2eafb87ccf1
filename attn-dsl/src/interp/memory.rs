//! Kernel arguments bound to host memory, and the masked, bounds-checked `Load`/`Store`
//! that read and write them.
//!
//! A pointer is (argument index, element offset). A lane whose mask is false never
//! touches memory, so an out-of-range address under a false mask is fine; an active
//! lane outside `0..len` is [`ExecError::OutOfBounds`], naming the DSL line, the
//! parameter and the offset: the CPU executor doubles as a memory sanitizer for CI.
//! Lanes of one `Store` are written in row-major order, so when several active lanes
//! hit one address the last lane wins.

use super::cpu_backend::CpuArg;
use super::error::{malformed, Access, ExecError};
use super::host_slice::{HostSlice, HostSliceMut};
use super::numerics::round_float;
use super::tile::{Ptr, TileData};
use crate::ir::{Function, Loc, ParamKind, ScalarType};
use crate::kernel::ScalarArg;

/// Where an access happens, for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    pub loc: Loc,
    pub program: [u32; 3],
}

enum Bound<'a> {
    Read(HostSlice<'a>),
    Write(HostSliceMut<'a>),
    Scalar,
}

/// The kernel's arguments, indexed like `Function::params`.
pub(crate) struct Memory<'a> {
    bufs: Vec<Bound<'a>>,
    names: Vec<String>,
    /// Bytes moved by active lanes (statistics).
    pub bytes_loaded: u64,
    pub bytes_stored: u64,
}

impl<'a> Memory<'a> {
    /// Checks `args` against the kernel's parameters (count, pointer vs scalar, `*const`
    /// vs `*mut`, dtype) before anything runs, and returns the memory plus the value of
    /// each parameter's entry-block argument.
    pub(crate) fn bind(
        f: &Function,
        args: Vec<CpuArg<'a>>,
    ) -> Result<(Self, Vec<TileData>), ExecError> {
        if args.len() != f.params.len() {
            return Err(ExecError::ArgCount {
                kernel: f.name.clone(),
                expected: f.params.len(),
                got: args.len(),
            });
        }
        let mut bufs = Vec::with_capacity(args.len());
        let mut entry = Vec::with_capacity(args.len());
        for (index, (param, arg)) in f.params.iter().zip(args).enumerate() {
            let mismatch = |expected: String, arg: &CpuArg<'_>| ExecError::ArgMismatch {
                index,
                name: param.name.clone(),
                expected,
                got: arg.describe(),
            };
            let (bound, value) = match (param.kind, arg) {
                (_, CpuArg::Unsupported { type_name }) => {
                    return Err(ExecError::UnsupportedHostType { index, type_name })
                }
                (
                    ParamKind::Ptr {
                        elem,
                        mutable: false,
                    },
                    CpuArg::In(s),
                ) if s.dtype() == elem => (Bound::Read(s), param_ptr(index)),
                (
                    ParamKind::Ptr {
                        elem,
                        mutable: true,
                    },
                    CpuArg::Out(s),
                ) if s.dtype() == elem => (Bound::Write(s), param_ptr(index)),
                (ParamKind::Ptr { elem, mutable }, arg) => {
                    let q = if mutable { "*mut" } else { "*const" };
                    return Err(mismatch(format!("a {q} {elem} buffer"), &arg));
                }
                (ParamKind::Scalar(ty), CpuArg::Scalar(v)) => match scalar_value(ty, v) {
                    Some(value) => (Bound::Scalar, value),
                    None => return Err(mismatch(format!("a {ty} scalar"), &CpuArg::Scalar(v))),
                },
                (ParamKind::Scalar(ty), arg) => {
                    return Err(mismatch(format!("a {ty} scalar"), &arg))
                }
            };
            bufs.push(bound);
            entry.push(value);
        }
        let names = f.params.iter().map(|p| p.name.clone()).collect();
        Ok((
            Memory {
                bufs,
                names,
                bytes_loaded: 0,
                bytes_stored: 0,
            },
            entry,
        ))
    }

    /// Reads the active lanes of `ptrs` (pointee `elem`); inactive lanes get `other`
    /// (zero / false when absent).
    pub(crate) fn load(
        &mut self,
        ptrs: &[Ptr],
        mask: Option<&[bool]>,
        other: Option<&TileData>,
        elem: ScalarType,
        site: Site,
    ) -> Result<TileData, ExecError> {
        check_lanes(
            ptrs.len(),
            mask.map(<[bool]>::len),
            other.map(TileData::len),
            site,
        )?;
        let data = match elem {
            ScalarType::Bf16 | ScalarType::F16 | ScalarType::F32 => {
                let other = other
                    .map(|o| o.floats().map_err(|e| e.at(site.loc)))
                    .transpose()?;
                TileData::Float(self.load_lanes(ptrs, mask, other, 0.0, site, |s, i| s.float(i))?)
            }
            ScalarType::I32 | ScalarType::I64 => {
                let other = other
                    .map(|o| o.ints().map_err(|e| e.at(site.loc)))
                    .transpose()?;
                TileData::Int(self.load_lanes(ptrs, mask, other, 0, site, |s, i| s.int(i))?)
            }
            ScalarType::Bool => {
                let other = other
                    .map(|o| o.bools().map_err(|e| e.at(site.loc)))
                    .transpose()?;
                TileData::Bool(self.load_lanes(ptrs, mask, other, false, site, |s, i| s.bool(i))?)
            }
        };
        let active = mask.map_or(ptrs.len(), |m| m.iter().filter(|&&b| b).count());
        self.bytes_loaded += (active * elem.size_bytes()) as u64;
        Ok(data)
    }

    fn load_lanes<T: Copy>(
        &self,
        ptrs: &[Ptr],
        mask: Option<&[bool]>,
        other: Option<&[T]>,
        zero: T,
        site: Site,
        read: impl Fn(&HostSlice<'_>, usize) -> Option<T>,
    ) -> Result<Vec<T>, ExecError> {
        let mut out = Vec::with_capacity(ptrs.len());
        for (lane, &p) in ptrs.iter().enumerate() {
            if mask.is_some_and(|m| !m[lane]) {
                out.push(other.map_or(zero, |o| o[lane]));
                continue;
            }
            let (buf, i) = self.resolve_read(p, site)?;
            out.push(read(&buf, i).ok_or_else(|| self.dtype_mismatch(p, site))?);
        }
        Ok(out)
    }

    /// Writes the active lanes of `value` (pointee `elem`) through `ptrs`.
    pub(crate) fn store(
        &mut self,
        ptrs: &[Ptr],
        value: &TileData,
        mask: Option<&[bool]>,
        elem: ScalarType,
        site: Site,
    ) -> Result<(), ExecError> {
        check_lanes(ptrs.len(), mask.map(<[bool]>::len), Some(value.len()), site)?;
        match value {
            TileData::Float(v) => {
                // Round again in case a producer left extra precision; exact otherwise.
                let w = |s: &mut HostSliceMut<'_>, i, x: f64| s.set_float(i, round_float(elem, x));
                self.store_lanes(ptrs, v, mask, site, w)?
            }
            TileData::Int(v) => self.store_lanes(ptrs, v, mask, site, HostSliceMut::set_int)?,
            TileData::Bool(v) => self.store_lanes(ptrs, v, mask, site, HostSliceMut::set_bool)?,
            TileData::Ptr(_) => return Err(malformed("cannot store pointers").at(site.loc)),
        }
        let active = mask.map_or(ptrs.len(), |m| m.iter().filter(|&&b| b).count());
        self.bytes_stored += (active * elem.size_bytes()) as u64;
        Ok(())
    }

    fn store_lanes<T: Copy>(
        &mut self,
        ptrs: &[Ptr],
        vals: &[T],
        mask: Option<&[bool]>,
        site: Site,
        write: impl Fn(&mut HostSliceMut<'a>, usize, T) -> bool,
    ) -> Result<(), ExecError> {
        for (lane, (&p, &v)) in ptrs.iter().zip(vals).enumerate() {
            if mask.is_some_and(|m| !m[lane]) {
                continue;
            }
            let i = self.check_bounds(p, Access::Store, site)?;
            let written = match &mut self.bufs[p.arg as usize] {
                Bound::Write(buf) => write(buf, i, v),
                _ => {
                    let param = self.names[p.arg as usize].clone();
                    return Err(ExecError::StoreToReadOnly {
                        line: site.loc.line,
                        col: site.loc.col,
                        param,
                    });
                }
            };
            if !written {
                return Err(self.dtype_mismatch(p, site));
            }
        }
        Ok(())
    }

    fn resolve_read(&self, p: Ptr, site: Site) -> Result<(HostSlice<'_>, usize), ExecError> {
        let i = self.check_bounds(p, Access::Load, site)?;
        match &self.bufs[p.arg as usize] {
            Bound::Read(s) => Ok((*s, i)),
            Bound::Write(s) => Ok((s.as_slice(), i)),
            Bound::Scalar => Err(self.dtype_mismatch(p, site)),
        }
    }

    /// The element index of `p` if it lies inside its buffer.
    fn check_bounds(&self, p: Ptr, access: Access, site: Site) -> Result<usize, ExecError> {
        let len = match self.bufs.get(p.arg as usize) {
            Some(Bound::Read(s)) => s.len(),
            Some(Bound::Write(s)) => s.len(),
            _ => return Err(self.dtype_mismatch(p, site)),
        };
        match usize::try_from(p.off) {
            Ok(i) if i < len => Ok(i),
            _ => Err(ExecError::OutOfBounds {
                line: site.loc.line,
                col: site.loc.col,
                access,
                param: self.names[p.arg as usize].clone(),
                offset: p.off,
                len,
                program: site.program,
            }),
        }
    }

    fn dtype_mismatch(&self, p: Ptr, site: Site) -> ExecError {
        let name = self.names.get(p.arg as usize).map_or("?", String::as_str);
        ExecError::Malformed {
            line: site.loc.line,
            col: site.loc.col,
            msg: format!(
                "pointer into argument {} (`{name}`) used with another element type",
                p.arg
            ),
        }
    }
}

fn param_ptr(index: usize) -> TileData {
    TileData::Ptr(vec![Ptr {
        arg: index as u32,
        off: 0,
    }])
}

/// The entry value of a scalar parameter of type `ty`, if `v` fits it. bf16/f16 scalars
/// arrive as `f32` (the widest `ScalarArg` float) and are rounded.
fn scalar_value(ty: ScalarType, v: ScalarArg) -> Option<TileData> {
    Some(match (ty, v) {
        (ScalarType::I32, ScalarArg::I32(x)) => TileData::Int(vec![x as i64]),
        (ScalarType::I64, ScalarArg::I64(x)) => TileData::Int(vec![x]),
        (ScalarType::Bool, ScalarArg::Bool(b)) => TileData::Bool(vec![b]),
        (t, ScalarArg::F32(x)) if t.is_float() => TileData::Float(vec![round_float(t, x as f64)]),
        _ => return None,
    })
}

/// Pointers, mask and other/value of one access must have one lane each.
fn check_lanes(
    n: usize,
    mask: Option<usize>,
    other: Option<usize>,
    site: Site,
) -> Result<(), ExecError> {
    for (what, len) in [("mask", mask), ("value", other)] {
        if let Some(len) = len.filter(|&l| l != n) {
            return Err(ExecError::Malformed {
                line: site.loc.line,
                col: site.loc.col,
                msg: format!("{n} pointers but {len} {what} lanes"),
            });
        }
    }
    Ok(())
}
