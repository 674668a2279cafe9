//! The two kinds of failure a command can end with, and their exit codes.
//!
//! Bad input (a flag value, a pid that does not exist, a cgroup that is not
//! one) exits 2 like a usage error; anything that fails while running (BPF
//! load, a port in use, missing privileges) exits 1. Either way the user gets
//! one line, and nothing is left attached: the probe is only attached after
//! every input has been checked, and it detaches when dropped.

use std::process::ExitCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user asked for something that cannot be: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Something failed while running: exit 1.
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
}

impl Error {
    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_) => ExitCode::from(2),
            Error::Runtime(_) => ExitCode::from(1),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
