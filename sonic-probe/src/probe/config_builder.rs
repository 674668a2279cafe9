//! The programs' settings (`ProbeConfig`, their `config` map), built in one
//! place for every command.
//!
//! Every command starts from the same part: our own process (never
//! traced), the CPUs, the GPU drivers' device majors, and nothing traced or
//! sent. `run` and `trace` then say, in their own terms (a duration, a
//! fraction of the ring, a switch), what they want the kernel to do;
//! [`ProbeConfigBuilder`] turns that into the fields the programs read.

use std::time::Duration;

use sonic_probe_common::{ProbeConfig, SharedStruct};

/// Builds a [`ProbeConfig`]; see the module comment.
#[derive(Debug, Clone)]
#[must_use]
pub struct ProbeConfigBuilder {
    config: ProbeConfig,
}

impl Default for ProbeConfigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeConfigBuilder {
    /// What every command fills in alike; nothing traced, nothing sent.
    pub fn new() -> Self {
        ProbeConfigBuilder {
            config: ProbeConfig {
                self_tgid: std::process::id(),
                nr_cpus: aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1),
                gpu_majors: crate::os::procfs::gpu_majors(),
                ..ProbeConfig::zeroed()
            },
        }
    }

    /// Which processes are traced: FILTER_* flags (0: the whole host) and
    /// one bit per cgroup level holding a target cgroup.
    pub fn targets(mut self, filter_flags: u32, cgroup_levels: u32) -> Self {
        self.config.filter_flags = filter_flags;
        self.config.cgroup_levels = cgroup_levels;
        self
    }

    /// The system calls traced at all (bit per syscall index).
    pub fn syscalls(mut self, mask: u32) -> Self {
        self.config.syscall_mask = mask;
        self
    }

    /// System calls of which every call is sent as an event (strace mode).
    pub fn every_call_of(mut self, mask: u32) -> Self {
        self.config.trace_mask = mask;
        self
    }

    /// System calls of which failed calls are sent as events.
    pub fn failed_calls_of(mut self, mask: u32) -> Self {
        self.config.error_event_mask = mask;
        self
    }

    /// System calls whose failures are counted (and sent, as
    /// [`Self::failed_calls_of`] says) even when they are not traced.
    pub fn failures_always_of(mut self, mask: u32) -> Self {
        self.config.error_only_mask = mask;
        self
    }

    /// Every call with a path argument is sent with its path.
    pub fn with_paths(mut self) -> Self {
        self.config.path_events = 1;
        self
    }

    /// A read-only open of a regular file within `window` of the last sent
    /// open of that file by that process is counted in the reopens map,
    /// not sent (files.h). Off unless called: every open is sent.
    pub fn count_reopens(mut self, window: Duration) -> Self {
        self.config.reopen_coalesce_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Calls lasting at least `threshold` are sent as events.
    pub fn slow_calls(mut self, threshold: Duration) -> Self {
        self.config.slow_call_ns = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Calls of a syscall with large_events whose size argument is at
    /// least `bytes` are sent as events.
    pub fn large_calls(mut self, bytes: u64) -> Self {
        self.config.large_size = bytes;
        self
    }

    /// Calls of a syscall with count_small whose size argument is below
    /// `bytes` are counted as small.
    pub fn small_calls(mut self, bytes: u64) -> Self {
        self.config.small_size = bytes;
        self
    }

    /// User space is woken when `1/fraction` of the ring (`ringbuf_bytes`)
    /// holds events; until then it polls.
    pub fn wakeup_at(mut self, ringbuf_bytes: u32, fraction: u32) -> Self {
        self.config.wakeup_bytes = u64::from(ringbuf_bytes / fraction.max(1));
        self
    }

    /// Statistics are kept per cgroup too (the `workload` label).
    pub fn workload_cgroups(mut self, on: bool) -> Self {
        self.config.workload_cgroups = u32::from(on);
        self
    }

    /// Futex waits in progress are entered in futex_waiting (stack
    /// captures): 0, INFLIGHT_MAIN_THREADS or INFLIGHT_ALL_THREADS.
    pub fn inflight_waits(mut self, which: u32) -> Self {
        self.config.inflight_waits = which;
        self
    }

    /// The scheduler programs account where each watched thread's time
    /// goes (thread_time.h), reading a blocked thread's call from the top
    /// of its kernel stack where the kernel has no bpf_task_pt_regs.
    pub fn thread_time(mut self, on: bool) -> Self {
        self.config.thread_time = u32::from(on);
        self.config.thread_stack_size = kernel_stack_size();
        self
    }

    pub fn build(self) -> ProbeConfig {
        self.config
    }
}

/// THREAD_SIZE of the running x86_64 kernel: 16 KiB, twice that with
/// KASAN (its config, where /boot has it, says).
fn kernel_stack_size() -> u32 {
    let release = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned());
    let kasan = release
        .ok()
        .and_then(|r| std::fs::read_to_string(format!("/boot/config-{r}")).ok())
        .is_some_and(|c| c.lines().any(|l| l == "CONFIG_KASAN=y"));
    if kasan {
        32 << 10
    } else {
        16 << 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_starts_from_the_same_part() {
        let c = ProbeConfigBuilder::new().build();
        assert_eq!(c.self_tgid, std::process::id());
        assert!(c.nr_cpus >= 1);
        assert_eq!(
            (c.filter_flags, c.trace_mask, c.error_event_mask, c.path_events, c.slow_call_ns, c.wakeup_bytes),
            (0, 0, 0, 0, 0, 0),
            "nothing traced, nothing sent"
        );
        assert_eq!(c.reopen_coalesce_ns, 0, "every open sent");
    }

    #[test]
    fn settings_in_their_own_units() {
        let c = ProbeConfigBuilder::new()
            .targets(1, 0b100)
            .slow_calls(Duration::from_millis(5))
            .wakeup_at(1 << 20, 8)
            .workload_cgroups(true)
            .with_paths()
            .count_reopens(Duration::from_secs(1))
            .build();
        assert_eq!((c.filter_flags, c.cgroup_levels), (1, 0b100));
        assert_eq!(c.slow_call_ns, 5_000_000);
        assert_eq!(c.wakeup_bytes, 1 << 17);
        assert_eq!((c.workload_cgroups, c.path_events), (1, 1));
        assert_eq!(c.reopen_coalesce_ns, 1_000_000_000);
        assert_eq!(ProbeConfigBuilder::new().slow_calls(Duration::MAX).build().slow_call_ns, u64::MAX);
    }
}
