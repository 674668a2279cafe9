//! What the kernel side and the user side of sonic-probe agree on.
//!
//! This crate is the one source of truth for every structure and number that
//! crosses between the BPF programs (C, in `sonic-probe-ebpf`) and the daemon
//! (Rust, in `sonic-probe`): event layouts, map keys and values, flag bits and
//! the table of traced system calls. The C side never declares them: its
//! header is generated from here by [`header::generate`], with size and offset
//! asserts, so the two views cannot drift apart.

pub mod buckets;
pub mod cgen;
pub mod comm;
pub mod constants;
pub mod file_classes;
pub mod gpu_apis;
pub mod header;
pub mod layout;
pub mod syscalls;

pub use buckets::*;
pub use cgen::SharedStruct;
pub use comm::*;
pub use constants::*;
pub use file_classes::*;
pub use layout::*;
