//! The GPU side seen from the CPU: the time a thread spends inside CUDA's
//! waiting calls (sonic-probe-common's gpu_apis table), through uprobes on
//! the libraries the watched processes map.
//!
//! [`symbols`]: which waiting calls a library file exports, and where (the
//! file offsets a uprobe is attached at). [`libraries`]: which files get
//! the probes (those the watched processes map), attached once each.
//! [`helper`]: the process that keeps CAP_SYS_ADMIN to open uprobes.
//! [`waits`]: the kernel's counts, read at scrape time (metrics::gpu).

pub mod helper;
pub mod libraries;
pub mod symbols;
pub mod waits;
