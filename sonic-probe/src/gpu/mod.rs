//! The GPU side seen from the CPU: the time a thread spends inside CUDA's
//! waiting calls (sonic-probe-common's gpu_apis table), through uprobes on
//! the libraries the watched processes map.
//!
//! [`symbols`]: which waiting calls a library file exports, and where (the
//! file offsets a uprobe is attached at).

pub mod symbols;
