//! Events from the ring buffer: what they are ([`Event`]), how raw bytes
//! become one ([`decode`]), and the task that drains the ring ([`reader`]).
//!
//! Counts never come from here (the kernel keeps them exactly, see
//! `stats/`); events carry what needs per-call handling: paths, slow
//! calls, errors, large mappings, long GPU waits, strace mode, and process
//! lifecycle.

mod decode;
pub mod reader;

use std::time::Duration;

use sonic_probe_common::{
    comm_str, gpu_apis, syscalls, FileCloseEvent, GpuWaitEvent, ProcessEvent, SyscallEvent,
    EMIT_PATH_UNREADABLE, EMIT_SHORT, EVENT_FILE_CLOSE, EVENT_GPU_WAIT, EVENT_PROCESS_EXEC,
    EVENT_PROCESS_EXIT, EVENT_PROCESS_FORK, EVENT_SYSCALL, EVENT_SYSCALL_PATH,
};

use crate::os::sockaddr::SockAddr;

pub use decode::{decode, DecodeError};

/// One decoded ring buffer record.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Call(Call),
    Process(ProcessChange),
    FileClosed(FileClosed),
    GpuWait(GpuWaitEnd),
}

impl Event {
    /// The header every event starts with.
    pub fn header(&self) -> &sonic_probe_common::EventHeader {
        match self {
            Event::Call(c) => &c.raw.header,
            Event::Process(p) => &p.raw.header,
            Event::FileClosed(f) => &f.raw.header,
            Event::GpuWait(g) => &g.raw.header,
        }
    }

    /// The process it is of.
    pub fn tgid(&self) -> u32 {
        self.header().tgid
    }
}

/// A GPU wait (one of CUDA's waiting calls, bpf/gpu_wait.h) of at least
/// the kernel's slow-call threshold ended; header.time_ns is its entry.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuWaitEnd {
    pub raw: GpuWaitEvent,
}

impl GpuWaitEnd {
    pub fn tgid(&self) -> u32 {
        self.raw.header.tgid
    }
    pub fn tid(&self) -> u32 {
        self.raw.header.tid
    }
    /// The call's documented name (decode checks the id).
    pub fn api(&self) -> &'static str {
        gpu_apis::gpu_api(self.raw.api).map_or("?", |a| a.name)
    }
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.raw.duration_ns)
    }
    pub fn process_name(&self) -> String {
        comm_str(&self.raw.process_comm)
    }
    pub fn thread_name(&self) -> String {
        comm_str(&self.raw.thread_comm)
    }
}

/// A regular file opened while watched was closed, with what was read
/// through it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileClosed {
    pub raw: FileCloseEvent,
}

impl FileClosed {
    pub fn tgid(&self) -> u32 {
        self.raw.header.tgid
    }
    pub fn fd(&self) -> u32 {
        self.raw.fd
    }
}

/// A traced call that was sent to user space.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub raw: SyscallEvent,
    /// The path read at entry (openat), raw bytes without NUL.
    pub path: Option<Vec<u8>>,
}

impl Call {
    pub fn tgid(&self) -> u32 {
        self.raw.header.tgid
    }
    pub fn tid(&self) -> u32 {
        self.raw.header.tid
    }
    pub fn syscall(&self) -> &'static syscalls::Syscall {
        syscalls::by_index(self.raw.syscall).expect("decode checks the index")
    }
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.raw.duration_ns)
    }
    /// The positive errno if the call failed.
    pub fn errno(&self) -> Option<u16> {
        (-4095..0).contains(&self.raw.ret).then(|| (-self.raw.ret) as u16)
    }
    pub fn process_name(&self) -> String {
        comm_str(&self.raw.process_comm)
    }
    pub fn thread_name(&self) -> String {
        comm_str(&self.raw.thread_comm)
    }
    /// Futex waits: the waking thread's name, when the kernel saw the wake.
    pub fn waker_name(&self) -> Option<String> {
        (self.raw.waker_tid != 0).then(|| comm_str(&self.raw.waker_comm))
    }
    pub fn path_lossy(&self) -> Option<String> {
        self.path.as_ref().map(|p| String::from_utf8_lossy(p).into_owned())
    }
    /// The socket address the call was given (its row's addr_arg), when
    /// it was read.
    pub fn address(&self) -> Option<SockAddr> {
        self.syscall().addr_arg?;
        if self.has_reason(EMIT_PATH_UNREADABLE) {
            return None;
        }
        SockAddr::parse(self.path.as_deref()?)
    }
    /// What the call worked on, in words: its socket address, else its path.
    pub fn target(&self) -> Option<String> {
        match self.syscall().addr_arg {
            Some(_) => self.address().map(|a| a.to_string()),
            None => self.path_lossy(),
        }
    }
    /// The positive errno if the call failed: as [`Call::errno`], less the
    /// row's errno of a call under way (connect's EINPROGRESS).
    pub fn failure(&self) -> Option<u16> {
        self.errno().filter(|&e| Some(e) != self.syscall().in_progress_errno)
    }
    /// A write to a regular file that wrote fewer bytes than it asked,
    /// without an error (EMIT_SHORT: the disk filling up).
    pub fn is_short(&self) -> bool {
        self.has_reason(EMIT_SHORT)
    }
    pub fn has_reason(&self, bit: u16) -> bool {
        self.raw.reasons & bit != 0
    }
}

/// What happened to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessKind {
    Exec,
    Fork,
    Exit,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessChange {
    pub kind: ProcessKind,
    pub raw: ProcessEvent,
}

impl ProcessChange {
    pub fn tgid(&self) -> u32 {
        self.raw.header.tgid
    }
    pub fn name(&self) -> String {
        comm_str(&self.raw.comm)
    }
}

/// Event kinds as labels of sonic_probe_events_total, by kind number.
pub const KIND_LABELS: &[(u32, &str)] = &[
    (EVENT_SYSCALL, "syscall"),
    (EVENT_SYSCALL_PATH, "syscall_path"),
    (EVENT_PROCESS_EXEC, "process_exec"),
    (EVENT_PROCESS_FORK, "process_fork"),
    (EVENT_PROCESS_EXIT, "process_exit"),
    (EVENT_FILE_CLOSE, "file_close"),
    (EVENT_GPU_WAIT, "gpu_wait"),
];

impl Event {
    /// The EVENT_* kind number it was decoded from.
    pub fn kind(&self) -> u32 {
        match self {
            Event::Call(c) if c.path.is_some() => EVENT_SYSCALL_PATH,
            Event::Call(_) => EVENT_SYSCALL,
            Event::Process(p) => match p.kind {
                ProcessKind::Exec => EVENT_PROCESS_EXEC,
                ProcessKind::Fork => EVENT_PROCESS_FORK,
                ProcessKind::Exit => EVENT_PROCESS_EXIT,
            },
            Event::FileClosed(_) => EVENT_FILE_CLOSE,
            Event::GpuWait(_) => EVENT_GPU_WAIT,
        }
    }
}
