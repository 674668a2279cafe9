//! TEMPORARY (merged with the classification branch).
pub mod classify;
pub mod docker;
pub mod pods;
pub mod resolver;

pub use resolver::{WorkloadFrom, WorkloadSettings, Workloads};
