//! Loads the BPF object into the kernel, configures it, attaches its
//! programs and hands out its maps.
//!
//! Everything kernel-facing goes through [`Probe`]: the rest of the daemon
//! only sees typed maps. Dropping the probe (and the maps taken from it)
//! detaches every program and frees every map: nothing is pinned, so nothing
//! outlives the process, even after SIGKILL.

mod config_builder;
mod features;
mod gpu_probes;
mod open_files;
pub mod privileges;
mod reopens;
mod target_maps;
pub mod targets;

use std::os::fd::OwnedFd;
use std::time::Duration;

use aya::{
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, PerCpuHashMap, PerCpuValues, RingBuf},
    programs::{BtfTracePoint, ProgramError},
    Btf, Ebpf, EbpfLoader,
};
use sonic_probe_common::{
    constants::{MAX_STATS_SLOTS, MAX_THREAD_TIME_SLOTS},
    ext_key,
    syscalls::NR_SYSCALLS,
    ErrorKey, ExtKey, FileKey, InflightWait, OpenFile, ProbeConfig, SharedStruct, StatsKey, SyscallStats,
    ThreadClock, ThreadState, ThreadTimeKey, ThreadTimes,
};
use sonic_probe_ebpf::{maps, ProgramGroup, Variant, PROGRAMS};

pub use config_builder::ProbeConfigBuilder;
pub use features::{Fallbacks, KernelFeatures, FALLBACK_ENV};
pub use gpu_probes::{AttachCause, GpuAttachError};
pub use open_files::OpenFiles;
pub use reopens::ReopenCounts;
pub use target_maps::TargetMaps;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "the kernel lacks the BPF feature {0}, which sonic-probe cannot do without (see README, \
         supported kernels)"
    )]
    MissingFeature(&'static str),
    #[error("{0}")]
    BadFallback(String),
    #[error(
        "cannot create the BPF maps: this kernel charges them to the locked-memory limit \
         (RLIMIT_MEMLOCK, {kib} KiB here), which could not be raised: run with LimitMEMLOCK=infinity \
         (systemd), `ulimit -l unlimited`, or CAP_SYS_RESOURCE"
    )]
    Memlock {
        kib: u64,
        #[source]
        source: Box<ProbeError>,
    },
    #[error(
        "kernel BTF is not available at /sys/kernel/btf/vmlinux: sonic-probe needs a kernel \
         built with CONFIG_DEBUG_INFO_BTF=y, or a BTF file given with --btf (see README, supported kernels)"
    )]
    Btf(#[source] aya::BtfError),
    #[error("cannot read the kernel BTF from {0}")]
    BtfFile(std::path::PathBuf, #[source] aya::BtfError),
    #[error("cannot load the BPF object")]
    Load(#[source] aya::EbpfError),
    #[error("BPF program {name} (tracepoint {tracepoint})")]
    Program {
        name: &'static str,
        tracepoint: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("BPF program {name} (uprobe)")]
    Uprobe {
        name: String,
        #[source]
        source: ProgramError,
    },
    #[error("the BPF object has no program {0}")]
    MissingProgram(String),
    #[error("BPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
    #[error("the BPF object has no {0}")]
    Missing(&'static str),
    #[error("cannot enable BPF run-time statistics")]
    Stats(#[source] aya::sys::SyscallError),
    #[error("cannot count the CPUs ({0})")]
    Cpus(String),
}

/// A probe failure ends a command as a runtime failure (exit 1).
impl From<ProbeError> for crate::error::Error {
    fn from(e: ProbeError) -> Self {
        crate::error::Error::Runtime(e.into())
    }
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK (64 KiB by
/// default before 5.16): raise it while we may (root or CAP_SYS_RESOURCE;
/// the systemd unit sets LimitMEMLOCK=infinity).
fn raise_memlock_limit() {
    use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};
    if let Err(e) = setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY) {
        tracing::debug!("cannot raise RLIMIT_MEMLOCK: {e}");
    }
}

/// A map the kernel refused with EPERM while the locked-memory limit is
/// finite: say what to change rather than only "Operation not permitted".
fn memlock_hint(e: ProbeError) -> ProbeError {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let limited = getrlimit(Resource::RLIMIT_MEMLOCK).is_ok_and(|(soft, _)| soft != RLIM_INFINITY);
    if limited && features::is_permission_error(&e) {
        let kib = getrlimit(Resource::RLIMIT_MEMLOCK).map(|(soft, _)| soft / 1024).unwrap_or(0);
        return ProbeError::Memlock { kib, source: Box::new(e) };
    }
    e
}

fn map_err(name: &'static str) -> impl FnOnce(MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

/// The kernel counts of one program (when BPF statistics are on).
#[derive(Debug, Clone)]
pub struct ProgramStats {
    pub name: &'static str,
    pub run_time: Duration,
    pub run_count: u64,
}

/// The loaded (and, after [`Probe::attach`], attached) BPF programs.
pub struct Probe {
    ebpf: Ebpf,
    features: KernelFeatures,
    variant: Variant,
    config: Array<MapData, ProbeConfig>,
    attached: Vec<&'static str>,
    /// The groups attach was asked for.
    wanted: Vec<ProgramGroup>,
    stats_fd: Option<OwnedFd>,
    /// The GPU programs loaded (gpu_probes.rs); else why not.
    gpu_loaded: bool,
    gpu_error: Option<String>,
    /// The perf events of the uprobes attach_gpu_library attached
    /// (closing one detaches its program).
    gpu_events: Vec<OwnedFd>,
}

impl Probe {
    /// Asks the kernel which features it has, then loads the variant of
    /// the object that fits and every program (verifying them) without
    /// attaching. `btf`: a BTF file to use instead of the running kernel's.
    pub fn load(ringbuf_bytes: u32, btf: Option<&std::path::Path>) -> Result<Self, ProbeError> {
        let fallbacks = Fallbacks::from_env()?;
        raise_memlock_limit();
        let btf = match btf {
            Some(path) => Btf::parse_file(path, aya::Endianness::default())
                .map_err(|e| ProbeError::BtfFile(path.to_path_buf(), e))?,
            None => Btf::from_sys_fs().map_err(ProbeError::Btf)?,
        };
        let features = KernelFeatures::probe(&btf).map_err(memlock_hint)?;
        let variant = features.choose(fallbacks)?;
        let object = variant.object().ok_or(ProbeError::Missing("variant object"))?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            // Task storage (per-thread state) has no aya wrapper; only the
            // kernel side uses it.
            .allow_unsupported_maps()
            .map_max_entries(maps::EVENTS, ringbuf_bytes)
            .map_max_entries(maps::STATS_SLOTS, stats_slots(nr_cpus()?))
            .map_max_entries(maps::THREAD_TIME_SLOTS, thread_time_slots(nr_cpus()?))
            .load(object)
            .map_err(|e| memlock_hint(ProbeError::Load(e)))?;
        for spec in PROGRAMS {
            let err = |source| ProbeError::Program { name: spec.name, tracepoint: spec.tracepoint, source };
            let prog: &mut BtfTracePoint =
                ebpf.program_mut(spec.name).ok_or(ProbeError::Missing(spec.name))?.try_into().map_err(err)?;
            prog.load(spec.tracepoint, &btf).map_err(err)?;
        }
        let config = Array::try_from(take(&mut ebpf, maps::CONFIG)?).map_err(map_err(maps::CONFIG))?;
        let mut probe = Probe {
            ebpf,
            features,
            variant,
            config,
            attached: Vec::new(),
            wanted: Vec::new(),
            stats_fd: None,
            gpu_loaded: false,
            gpu_error: None,
            gpu_events: Vec::new(),
        };
        // GPU waits are a part the daemon can do without: a kernel that
        // refuses them leaves the rest running.
        if let Err(e) = probe.load_gpu_programs() {
            probe.gpu_error = Some(crate::logging::causes_line(&e));
        }
        Ok(probe)
    }

    /// Why GPU waits are unavailable (the kernel refused the uprobe
    /// programs), or None.
    pub fn gpu_error(&self) -> Option<&str> {
        self.gpu_error.as_deref()
    }

    /// What the kernel accepted.
    pub fn features(&self) -> &KernelFeatures {
        &self.features
    }

    /// The variant of the programs loaded.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Threads with entry state, where that is a hash keyed by thread id
    /// (None with task storage, which the kernel frees with each task).
    pub fn thread_state_entries(&self) -> Option<usize> {
        self.per_thread_entries::<ThreadState>(maps::THREAD_STATES)
    }

    /// Threads with a scheduler clock, where that is a hash keyed by
    /// thread id (None with task storage).
    pub fn thread_clock_entries(&self) -> Option<usize> {
        self.per_thread_entries::<ThreadClock>(maps::THREAD_CLOCKS)
    }

    /// Entries of a per-thread map of value `V`: a hash keyed by thread id
    /// with entry_state=thread_map, task storage (None) otherwise.
    fn per_thread_entries<V: aya::Pod>(&self, name: &str) -> Option<usize> {
        if self.variant.task_storage {
            return None;
        }
        let map: HashMap<&MapData, u32, V> = HashMap::try_from(self.ebpf.map(name)?).ok()?;
        Some(map.keys().filter(Result::is_ok).count())
    }

    /// Whether a map can be read now, with the calling thread's current
    /// capabilities (see daemon::drop_capabilities).
    pub fn maps_readable(&self) -> bool {
        self.config.get(&0, 0).is_ok()
    }

    /// One line for logs and check-config: the kernel's features and the
    /// variant of each piece in use.
    pub fn describe_kernel(&self) -> String {
        let pieces: Vec<String> = self.variant.pieces().iter().map(|(p, v)| format!("{p}={v}")).collect();
        format!("kernel BPF features: {}; programs: {}", self.features.describe(), pieces.join(" "))
    }

    /// Writes the runtime settings (effective at once, also while attached).
    pub fn set_config(&mut self, cfg: &ProbeConfig) -> Result<(), ProbeError> {
        self.config.set(0, cfg, 0).map_err(map_err(maps::CONFIG))
    }

    /// The target maps (taken out of the object; call once).
    pub fn take_targets(&mut self) -> Result<TargetMaps, ProbeError> {
        TargetMaps::new(
            take(&mut self.ebpf, maps::TARGET_PROCESSES)?,
            take(&mut self.ebpf, maps::TARGET_THREADS)?,
            take(&mut self.ebpf, maps::TARGET_COMMS)?,
            take(&mut self.ebpf, maps::TARGET_CGROUPS)?,
        )
    }

    /// Attaches the programs of `group`, in [`PROGRAMS`] order.
    pub fn attach(&mut self, group: ProgramGroup) -> Result<(), ProbeError> {
        self.wanted.push(group);
        for spec in PROGRAMS.iter().filter(|s| s.group == group) {
            let err = |source| ProbeError::Program { name: spec.name, tracepoint: spec.tracepoint, source };
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(spec.name)
                .ok_or(ProbeError::Missing(spec.name))?
                .try_into()
                .map_err(err)?;
            prog.attach().map_err(err)?;
            self.attached.push(spec.name);
        }
        Ok(())
    }

    /// Programs of the groups attach was asked for: what should be
    /// attached when all is well.
    pub fn expected_programs(&self) -> usize {
        PROGRAMS.iter().filter(|p| self.wanted.contains(&p.group)).count()
    }

    /// Names of the attached programs.
    pub fn attached(&self) -> &[&'static str] {
        &self.attached
    }

    /// The ring buffer of per-call and lifecycle events (call once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, ProbeError> {
        RingBuf::try_from(take(&mut self.ebpf, maps::EVENTS)?).map_err(map_err(maps::EVENTS))
    }

    /// The aggregation maps, with their overflow entries created (call once).
    pub fn take_aggregates(&mut self) -> Result<Aggregates, ProbeError> {
        let index: HashMap<MapData, StatsKey, u32> =
            HashMap::try_from(take(&mut self.ebpf, maps::STATS_INDEX)?)
                .map_err(map_err(maps::STATS_INDEX))?;
        let slots: PerCpuArray<MapData, SyscallStats> =
            PerCpuArray::try_from(take(&mut self.ebpf, maps::STATS_SLOTS)?)
                .map_err(map_err(maps::STATS_SLOTS))?;
        let mut stats: PerCpuHashMap<MapData, StatsKey, SyscallStats> =
            PerCpuHashMap::try_from(take(&mut self.ebpf, maps::SYSCALL_STATS)?)
                .map_err(map_err(maps::SYSCALL_STATS))?;
        let mut errors: PerCpuHashMap<MapData, ErrorKey, u64> =
            PerCpuHashMap::try_from(take(&mut self.ebpf, maps::SYSCALL_ERRORS)?)
                .map_err(map_err(maps::SYSCALL_ERRORS))?;
        let counters =
            PerCpuArray::try_from(take(&mut self.ebpf, maps::COUNTERS)?).map_err(map_err(maps::COUNTERS))?;
        let cpus = nr_cpus()?;
        // The entries calls fall back to when a map is full or the kernel
        // cannot allocate (empty name): totals stay exact, exported as
        // comm="other".
        for syscall in 0..NR_SYSCALLS as u16 {
            let key = StatsKey { syscall, ..StatsKey::zeroed() };
            let zero = PerCpuValues::try_from(vec![SyscallStats::zeroed(); cpus])
                .map_err(|e| ProbeError::Cpus(e.to_string()))?;
            stats.insert(key, zero, 0).map_err(map_err(maps::SYSCALL_STATS))?;
            let key = ErrorKey { syscall, ..ErrorKey::zeroed() };
            let zero =
                PerCpuValues::try_from(vec![0u64; cpus]).map_err(|e| ProbeError::Cpus(e.to_string()))?;
            errors.insert(key, zero, 0).map_err(map_err(maps::SYSCALL_ERRORS))?;
        }
        Ok(Aggregates { index, slots, stats, errors, counters })
    }

    /// Where watched threads' time is counted (call once).
    pub fn take_thread_times(&mut self) -> Result<ThreadTimeMaps, ProbeError> {
        let index = HashMap::try_from(take(&mut self.ebpf, maps::THREAD_TIME_INDEX)?)
            .map_err(map_err(maps::THREAD_TIME_INDEX))?;
        let slots = PerCpuArray::try_from(take(&mut self.ebpf, maps::THREAD_TIME_SLOTS)?)
            .map_err(map_err(maps::THREAD_TIME_SLOTS))?;
        Ok(ThreadTimeMaps { index, slots })
    }

    /// Fills the extension -> file class table the programs classify files by.
    pub fn set_file_classes(&mut self, classes: &[(&str, u16)]) -> Result<(), ProbeError> {
        let mut map: HashMap<&mut MapData, ExtKey, u32> = HashMap::try_from(
            self.ebpf.map_mut(maps::FILE_CLASSES).ok_or(ProbeError::Missing(maps::FILE_CLASSES))?,
        )
        .map_err(map_err(maps::FILE_CLASSES))?;
        for (ext, class) in classes {
            map.insert(ext_key(ext), u32::from(*class), 0).map_err(map_err(maps::FILE_CLASSES))?;
        }
        Ok(())
    }

    /// The descriptor table of watched processes (call once).
    pub fn take_open_files(&mut self) -> Result<OpenFiles, ProbeError> {
        let map: HashMap<MapData, FileKey, OpenFile> =
            HashMap::try_from(take(&mut self.ebpf, maps::OPEN_FILES)?).map_err(map_err(maps::OPEN_FILES))?;
        let generation = Array::try_from(take(&mut self.ebpf, maps::FD_CLASS_GENERATION)?)
            .map_err(map_err(maps::FD_CLASS_GENERATION))?;
        Ok(OpenFiles::new(map, generation))
    }

    /// The kernel's count of repeated opens (call once).
    pub fn take_reopens(&mut self) -> Result<ReopenCounts, ProbeError> {
        let map = HashMap::try_from(take(&mut self.ebpf, maps::REOPENS)?).map_err(map_err(maps::REOPENS))?;
        Ok(ReopenCounts::new(map))
    }

    /// The futex waits in progress (futex_waiting, filled only while
    /// probe_config.inflight_waits is set; call once).
    pub fn take_futex_waiting(&mut self) -> Result<HashMap<MapData, u32, InflightWait>, ProbeError> {
        HashMap::try_from(take(&mut self.ebpf, maps::FUTEX_WAITING)?).map_err(map_err(maps::FUTEX_WAITING))
    }

    /// Turns on the kernel's BPF run-time statistics until the probe is dropped.
    pub fn enable_run_time_stats(&mut self) -> Result<(), ProbeError> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(ProbeError::Stats)?;
        self.stats_fd = Some(fd);
        Ok(())
    }

    /// Whether run-time statistics are being collected (by us or by sysctl).
    pub fn run_time_stats_enabled(&self) -> bool {
        self.stats_fd.is_some()
            || std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
    }

    /// Run time and count of every attached program, from the kernel.
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        self.attached
            .iter()
            .filter_map(|&name| {
                let info = self.ebpf.program(name)?.info().ok()?;
                Some(ProgramStats { name, run_time: info.run_time(), run_count: info.run_count() })
            })
            .collect()
    }
}

/// The maps the daemon reads at scrape time.
pub struct Aggregates {
    /// (name, workload, syscall, variant) -> its slot in `slots`.
    pub index: HashMap<MapData, StatsKey, u32>,
    /// slot -> per-CPU call statistics.
    pub slots: PerCpuArray<MapData, SyscallStats>,
    /// (name, workload, syscall, variant) -> per-CPU call statistics of the
    /// keys without a slot (and the overflow entries).
    pub stats: PerCpuHashMap<MapData, StatsKey, SyscallStats>,
    /// (process, name, syscall, errno) -> per-CPU error counts.
    pub errors: PerCpuHashMap<MapData, ErrorKey, u64>,
    /// COUNTER_* indices -> per-CPU counts.
    pub counters: PerCpuArray<MapData, u64>,
}

/// The maps of where watched threads' time goes, read at scrape time.
pub struct ThreadTimeMaps {
    /// (workload, process name, thread name) -> its slot in `slots`.
    pub index: HashMap<MapData, ThreadTimeKey, u32>,
    /// slot -> per-CPU nanoseconds per THREAD_* state; slot 0 the overflow.
    pub slots: PerCpuArray<MapData, ThreadTimes>,
}

/// Kernel memory thread_time_slots may take (a per-CPU array, allocated
/// whole at load: 80 bytes a slot per CPU).
pub const THREAD_TIME_MEMORY_BUDGET: usize = 8 << 20;

/// Slots of thread_time_slots on a machine of `cpus` CPUs: as many as the
/// budget allows, at most MAX_THREAD_TIME_SLOTS, at least 64. Names beyond
/// them count in the overflow slot (thread="other"), exactly.
pub fn thread_time_slots(cpus: usize) -> u32 {
    let fit = THREAD_TIME_MEMORY_BUDGET / (std::mem::size_of::<ThreadTimes>() * cpus.max(1));
    fit.clamp(64, MAX_THREAD_TIME_SLOTS as usize) as u32
}

/// Kernel memory the statistics slots may take: stats_slots is a per-CPU
/// array, allocated whole at load (424 bytes a slot per CPU).
pub const STATS_MEMORY_BUDGET: usize = 16 << 20;

/// Slots of stats_slots on a machine of `cpus` CPUs: as many as the budget
/// allows, at most MAX_STATS_SLOTS (each is one per-CPU allocation at load:
/// thousands of them stall the kernel's per-CPU allocator), at least 64.
/// Keys beyond them count in the per-CPU hash syscall_stats, exactly, one
/// hash lookup a call dearer.
pub fn stats_slots(cpus: usize) -> u32 {
    let fit = STATS_MEMORY_BUDGET / (std::mem::size_of::<SyscallStats>() * cpus.max(1));
    fit.clamp(64, MAX_STATS_SLOTS as usize) as u32
}

fn nr_cpus() -> Result<usize, ProbeError> {
    aya::util::nr_cpus().map_err(|(f, e)| ProbeError::Cpus(format!("{f}: {e}")))
}

fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, ProbeError> {
    ebpf.take_map(name).ok_or(ProbeError::Missing(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_slots_follow_the_memory_budget() {
        // Small machines get every slot; big ones what the budget pays for.
        assert_eq!(stats_slots(2), MAX_STATS_SLOTS);
        assert_eq!(stats_slots(128), (STATS_MEMORY_BUDGET / (424 * 128)) as u32);
        assert_eq!(stats_slots(100_000), 64);
        assert_eq!(stats_slots(0), MAX_STATS_SLOTS);
    }
}
