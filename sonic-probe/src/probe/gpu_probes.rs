//! The uprobes on CUDA's waiting calls (bpf/gpu_wait.h): loaded with the
//! rest of the object, attached per library file as the daemon finds the
//! libraries its targets map (gpu::libraries), to perf events the GPU
//! probe helper opens (gpu::helper: the uprobe PMU needs CAP_SYS_ADMIN,
//! which the daemon does not keep), detached with the probe (it owns the
//! perf events).
//!
//! Unlike the tracepoints, a failure here is not the daemon's: a kernel
//! that refuses the programs leaves GPU waits unavailable (said once, in
//! the log and in sonic_probe_gpu_libraries_total), and a library that
//! cannot be attached is that library's failure.

use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::Path,
};

use aya::{
    maps::{HashMap, MapData},
    programs::UProbe,
};
use sonic_probe_common::{
    gpu_apis::{gpu_enter_program, GPU_APIS, GPU_EXIT_PROGRAM},
    GpuWaitKey, GpuWaitStats, GpuWaiting, SharedStruct,
};
use sonic_probe_ebpf::maps;

use super::{map_err, take, Probe, ProbeError};
use crate::gpu::{
    helper::{HelperError, PerfHelper},
    symbols::WaitingCall,
};

/// PERF_EVENT_IOC_SET_BPF (_IOW('$', 8, __u32)) and PERF_EVENT_IOC_ENABLE
/// (_IO('$', 0)).
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// What failed in attaching one probe.
#[derive(Debug, thiserror::Error)]
pub enum AttachCause {
    #[error(transparent)]
    Helper(HelperError),
    #[error("{0}")]
    Program(String),
    #[error("{0}: {1}")]
    Ioctl(&'static str, std::io::Error),
}

/// Why one library's probes could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum GpuAttachError {
    #[error("GPU waits are unavailable: {0}")]
    Unavailable(String),
    #[error("cannot attach {program} at {symbol} (file offset {offset:#x})")]
    Attach {
        program: String,
        symbol: String,
        offset: u64,
        #[source]
        source: AttachCause,
    },
}

impl Probe {
    /// Loads (verifies) the GPU programs: one entry program per api and the
    /// return program. Err: the kernel refused one (GPU waits unavailable).
    pub fn load_gpu_programs(&mut self) -> Result<(), ProbeError> {
        let names = GPU_APIS.iter().map(|a| gpu_enter_program(a.id)).chain([GPU_EXIT_PROGRAM.to_string()]);
        for name in names {
            let err = |source| ProbeError::Uprobe { name: name.clone(), source };
            let prog: &mut UProbe = self
                .ebpf
                .program_mut(&name)
                .ok_or(ProbeError::MissingProgram(name.clone()))?
                .try_into()
                .map_err(err)?;
            prog.load().map_err(err)?;
        }
        self.gpu_loaded = true;
        Ok(())
    }

    /// Attaches the entry and return probes at each of `calls` in the
    /// library file at `path` (any process that maps it hits them): the
    /// helper opens each probe's perf event, this attaches the program to
    /// it. On a failure the probes made for it are closed again.
    pub fn attach_gpu_library(
        &mut self,
        helper: &PerfHelper,
        path: &Path,
        calls: &[WaitingCall],
    ) -> Result<usize, GpuAttachError> {
        if !self.gpu_loaded {
            return Err(GpuAttachError::Unavailable("the GPU programs are not loaded".into()));
        }
        let mut events: Vec<OwnedFd> = Vec::new();
        for call in calls {
            for (program, ret) in [(gpu_enter_program(call.api), false), (GPU_EXIT_PROGRAM.to_string(), true)]
            {
                let fail = |source| GpuAttachError::Attach {
                    program: program.clone(),
                    symbol: call.symbol.clone(),
                    offset: call.file_offset,
                    source,
                };
                let event = helper
                    .open_uprobe(path, call.file_offset, ret)
                    .map_err(|e| fail(AttachCause::Helper(e)))?;
                let prog_fd = match self.ebpf.program(&program).map(|p| p.fd()) {
                    Some(Ok(fd)) => fd.as_fd().as_raw_fd(),
                    Some(Err(e)) => return Err(fail(AttachCause::Program(e.to_string()))),
                    None => return Err(fail(AttachCause::Program("not in the object".into()))),
                };
                // SAFETY: ioctls on a perf event descriptor we own, with a
                // program descriptor the probe holds.
                if unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog_fd) } < 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(fail(AttachCause::Ioctl("PERF_EVENT_IOC_SET_BPF", e)));
                }
                // SAFETY: as above.
                if unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) } < 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(fail(AttachCause::Ioctl("PERF_EVENT_IOC_ENABLE", e)));
                }
                events.push(event);
            }
        }
        let n = events.len();
        self.gpu_events.extend(events);
        Ok(n)
    }

    /// Uprobes attached now (entry and return probes, all libraries).
    pub fn gpu_links(&self) -> usize {
        self.gpu_events.len()
    }

    /// The GPU waits map, with each api's overflow entry made (call once).
    pub fn take_gpu_waits(&mut self) -> Result<HashMap<MapData, GpuWaitKey, GpuWaitStats>, ProbeError> {
        let mut map: HashMap<MapData, GpuWaitKey, GpuWaitStats> =
            HashMap::try_from(take(&mut self.ebpf, maps::GPU_WAITS)?).map_err(map_err(maps::GPU_WAITS))?;
        for a in GPU_APIS {
            let key = GpuWaitKey { api: a.id, ..GpuWaitKey::zeroed() };
            map.insert(key, GpuWaitStats::zeroed(), 0).map_err(map_err(maps::GPU_WAITS))?;
        }
        Ok(map)
    }

    /// The GPU waits in progress (gpu_waiting, filled only while
    /// probe_config.inflight_waits is set; call once).
    pub fn take_gpu_waiting(&mut self) -> Result<HashMap<MapData, u32, GpuWaiting>, ProbeError> {
        HashMap::try_from(take(&mut self.ebpf, maps::GPU_WAITING)?).map_err(map_err(maps::GPU_WAITING))
    }
}
