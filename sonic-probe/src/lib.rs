//! sonic-probe: watches running services' system calls through eBPF and
//! exports what it sees as Prometheus metrics.
//!
//! The folders are the design. The commands, each on top of what it uses:
//! [`run`] (the daemon: start, reload, capabilities, `check-config`),
//! [`trace`] (strace's output from BPF), [`client`] (`sonic-probe
//! findings`), chosen by [`dispatch`]. What they read their input with:
//! [`config`] (the command line, every option, the config file, units).
//! The subsystems they are built of: [`probe`] (the BPF programs loaded,
//! configured, attached; targets), [`events`] (the ring buffer decoded),
//! [`stats`] (the kernel's counts read at scrape time), [`threads`] (where
//! each watched thread's time goes, from the scheduler), [`gpu`] (CUDA's
//! waiting calls in the libraries processes map), [`findings`] (the
//! detectors: events in, findings out), [`metrics`] (everything presented
//! as Prometheus families), [`workloads`] (cgroup to unit, pod, container),
//! [`stacks`] (a stalled process's Python and native stacks), [`web`] (the
//! HTTP endpoint, TLS and basic auth). Below them all: [`os`] (errno and
//! futex names, /proc, signals), [`error`] and [`logging`].
//!
//! Follow one call from the kernel to its Prometheus line:
//! `sonic-probe-ebpf/bpf/sonic_probe.bpf.c` counts it in `syscall_stats`
//! (layout in `sonic-probe-common`), [`probe`] loads the programs and hands
//! out the maps, [`stats`] reads and folds them, [`metrics`] turns them into
//! metric families, [`web`] serves them. Calls that need per-event handling
//! arrive through [`events`] and reach [`findings`].

pub mod client;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod events;
pub mod findings;
pub mod gpu;
pub mod logging;
pub mod metrics;
pub mod os;
pub mod probe;
pub mod run;
pub mod stacks;
pub mod stats;
pub mod threads;
pub mod top;
pub mod trace;
pub mod web;
pub mod workloads;
