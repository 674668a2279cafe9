//! Stacks of a stalled process, read from user space without stopping it.
//!
//! A futex stall says *that* a request thread waited on a lock for seconds;
//! the stacks say *where*: which Python function waits ([`python`], read
//! from the interpreter's memory the way py-spy does in non-blocking mode)
//! and which native code path it is blocked in ([`native`], unwound from the
//! registers the kernel saved at syscall entry and the thread's stack
//! memory, or a sample of a running thread: [`sample`]), for the waiting
//! thread and the threads that may hold its lock ([`threads`]). None of it
//! stops the process: an inference service stays in production while it
//! is being diagnosed.
pub mod capture;
pub mod frame;
pub mod native;
pub mod python;
pub mod sample;
pub mod threads;
pub use frame::{CaptureError, Frame, FrameKind, Regs};
pub use native::{native_stack, native_stacks, Start};
pub use python::python_stacks;
