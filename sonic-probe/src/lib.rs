//! sonic-probe: watches running services' system calls through eBPF and
//! exports what it sees as Prometheus metrics.
//!
//! Follow one call from the kernel to its Prometheus line:
//! `sonic-probe-ebpf/bpf/sonic_probe.bpf.c` counts it in `syscall_stats`
//! (layout in `sonic-probe-common`), [`probe`] loads the programs and hands
//! out the maps, [`stats`] reads and folds them, [`metrics`] turns them into
//! metric families, [`http`] serves them. Calls that need per-event handling
//! arrive through [`events`].

pub mod capabilities;
pub mod capture;
pub mod cli;
pub mod client;
pub mod config;
pub mod config_file;
pub mod daemon;
pub mod dispatch;
pub mod errno;
pub mod error;
pub mod events;
pub mod findings;
pub mod futex;
pub mod http;
pub mod labels;
pub mod logging;
pub mod metrics;
pub mod options;
pub mod privileges;
pub mod probe;
pub mod procfs;
pub mod signals;
pub mod stacks;
pub mod stats;
pub mod targets;
pub mod trace;
pub mod units;
pub mod web_config;
pub mod workloads;
