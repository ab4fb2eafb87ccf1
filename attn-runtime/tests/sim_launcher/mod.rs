//! The simulator of emitted CUDA (attn-dsl's codegen tests: g++, one std::thread per CUDA
//! thread) as the ops' host launcher (`attn_runtime::ops::host_launch`): each launch of a CPU
//! run is emitted exactly as the GPU op emits it (its promises and tensor-core target) and
//! run on the simulator, on the run's own buffers, so the op's case machinery (plan,
//! poisoned outputs, later stages, the f64 reference) checks the GPU's code.

#![allow(dead_code)]

#[path = "../../../attn-dsl/tests/codegen_common/cpu_sim.rs"]
mod cpu_sim;

pub use cpu_sim::{have_gxx, Branch, Landing};

use attn_dsl::interp::CpuArg;
use attn_runtime::ops::host_launch::{run_launch, HostLaunch, HostLauncher};
use attn_runtime::ops::unified_attention::config::MmaKind;
use cpu_sim::SimArg;

/// Runs every launch on the simulator's `branch` of its source, or on `mma.sync` where the
/// source has no such branch (as the device does: a decode tile of 16 rows is `mma.sync`
/// code on sm_90a too), its copies landing as `landing` says.
#[derive(Debug)]
pub struct SimLauncher {
    pub branch: Branch,
    pub landing: Landing,
    /// Only this kernel's launches on the simulator, the others on the CPU executor (a
    /// kernel of many threads checked in a step whose other launches would take the
    /// simulator too long); every launch where `None`.
    pub only: Option<&'static str>,
}

impl SimLauncher {
    pub const fn new(branch: Branch, landing: Landing) -> Self {
        SimLauncher {
            branch,
            landing,
            only: None,
        }
    }

    /// Runs only `kernel`'s launches on the simulator.
    pub const fn only(kernel: &'static str, branch: Branch, landing: Landing) -> Self {
        SimLauncher {
            branch,
            landing,
            only: Some(kernel),
        }
    }
}

/// The launcher running the branch a device of `mma`'s target compiles (sm_90a's for a
/// warpgroup plan, `mma.sync` for an sm_80 one), copies landing as `landing` says.
pub fn for_target(mma: MmaKind, landing: Landing) -> &'static SimLauncher {
    static LAUNCHERS: [SimLauncher; 4] = [
        SimLauncher::new(Branch::Wgmma, Landing::Early),
        SimLauncher::new(Branch::Wgmma, Landing::Late),
        SimLauncher::new(Branch::MmaSync, Landing::Early),
        SimLauncher::new(Branch::MmaSync, Landing::Late),
    ];
    let branch = match mma {
        MmaKind::Warpgroup => 0,
        MmaKind::Sync => 2,
    };
    &LAUNCHERS[branch + usize::from(landing == Landing::Late)]
}

impl HostLauncher for SimLauncher {
    fn run(&self, l: HostLaunch<'_>, mut args: Vec<CpuArg<'_>>) -> Result<(), String> {
        if self
            .only
            .is_some_and(|name| !l.kernel.name.starts_with(name))
        {
            return run_launch(None, l, args)
                .map(|_| ())
                .map_err(|e| format!("{e:?}"));
        }
        let k = (l.cuda)()?;
        let branch = if self.branch.present(&k.source) {
            self.branch
        } else {
            Branch::MmaSync
        };
        let mut sim = args
            .iter()
            .map(|a| match a {
                CpuArg::In(s) => Ok(SimArg::Buf(s.to_buffer())),
                CpuArg::Out(s) => Ok(SimArg::Buf(s.as_slice().to_buffer())),
                CpuArg::Scalar(v) => Ok(SimArg::Scalar(*v)),
                CpuArg::Unsupported { type_name } => Err(format!("a {type_name} argument")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        cpu_sim::run_branch(&k, l.grid, &mut sim, branch, Some(self.landing))?;
        for (a, s) in args.iter_mut().zip(&sim) {
            if let (CpuArg::Out(out), SimArg::Buf(b)) = (a, s) {
                if !out.copy_from(b) {
                    return Err("the simulator returned a buffer of another shape".into());
                }
            }
        }
        Ok(())
    }
}
