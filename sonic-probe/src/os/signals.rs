//! The signals that end a command (SIGINT, SIGTERM), for the daemon and for
//! trace mode alike: a leaf, so both can wait on them without importing
//! each other.

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};

use crate::error::Result;

/// SIGINT and SIGTERM, handled from the moment this is made.
pub struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub fn new() -> Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// The next signal (cancel-safe: usable in a select loop).
    pub async fn wait_ref(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
