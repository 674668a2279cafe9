//! What the operating system says, in the words strace and operators use:
//! errno and futex operation names, the little read from /proc and /sys,
//! and the signals that end a command. Leaves: they import nothing of the
//! daemon, and every room above may use them.

pub mod errno;
pub mod futex;
pub mod procfs;
pub mod signals;
