//! Raw ring buffer bytes -> [`Event`], checking sizes before reading.
//!
//! Kinds are fixed numbers (sonic-probe-common); an unknown kind, a record
//! shorter than its kind's structure, an unknown syscall index or a path
//! length beyond the capture size (or an unknown GPU api) is a decode error (counted, never a
//! panic), so a mismatched program can't make the daemon misread memory.

use sonic_probe_common::{
    gpu_apis::gpu_api, syscalls, EventHeader, GpuWaitEvent, ProcessEvent, SharedStruct, SyscallEvent,
    SyscallPathEvent, EVENT_FILE_CLOSE, EVENT_GPU_WAIT, EVENT_PROCESS_EXEC, EVENT_PROCESS_EXIT,
    EVENT_PROCESS_FORK, EVENT_SYSCALL, EVENT_SYSCALL_PATH, PATH_CAP,
};

use super::{Call, Event, FileClosed, GpuWaitEnd, ProcessChange, ProcessKind};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than an event header")]
    Short(usize),
    #[error("event kind {kind} needs {need} bytes, the record has {got}")]
    Truncated { kind: u32, need: usize, got: usize },
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    #[error("unknown syscall index {0}")]
    UnknownSyscall(u16),
    #[error("path length {0} exceeds the capture size")]
    BadPathLength(u16),
    #[error("unknown GPU api {0}")]
    UnknownGpuApi(u32),
}

/// Copies a `T` out of the front of `buf` after checking its length.
fn read<T: SharedStruct>(buf: &[u8], kind: u32) -> Result<T, DecodeError> {
    let need = core::mem::size_of::<T>();
    if buf.len() < need {
        return Err(DecodeError::Truncated { kind, need, got: buf.len() });
    }
    // SAFETY: length checked above; T is plain old data (integers and
    // arrays of integers), valid for any bit pattern; read_unaligned makes
    // no alignment assumption.
    Ok(unsafe { core::ptr::read_unaligned(buf.as_ptr().cast::<T>()) })
}

fn check_syscall(ev: &SyscallEvent) -> Result<(), DecodeError> {
    syscalls::by_index(ev.syscall).map(|_| ()).ok_or(DecodeError::UnknownSyscall(ev.syscall))
}

pub fn decode(buf: &[u8]) -> Result<Event, DecodeError> {
    if buf.len() < core::mem::size_of::<EventHeader>() {
        return Err(DecodeError::Short(buf.len()));
    }
    let kind = u32::from_ne_bytes(buf[..4].try_into().expect("4 bytes"));
    match kind {
        EVENT_SYSCALL => {
            let raw: SyscallEvent = read(buf, kind)?;
            check_syscall(&raw)?;
            Ok(Event::Call(Call { raw, path: None }))
        }
        EVENT_SYSCALL_PATH => {
            let ev: SyscallPathEvent = read(buf, kind)?;
            check_syscall(&ev.call)?;
            let len = usize::from(ev.call.path_len);
            if len >= PATH_CAP {
                return Err(DecodeError::BadPathLength(ev.call.path_len));
            }
            Ok(Event::Call(Call { raw: ev.call, path: Some(ev.path[..len].to_vec()) }))
        }
        EVENT_PROCESS_EXEC | EVENT_PROCESS_FORK | EVENT_PROCESS_EXIT => {
            let raw: ProcessEvent = read(buf, kind)?;
            let kind = match kind {
                EVENT_PROCESS_EXEC => ProcessKind::Exec,
                EVENT_PROCESS_FORK => ProcessKind::Fork,
                _ => ProcessKind::Exit,
            };
            Ok(Event::Process(ProcessChange { kind, raw }))
        }
        EVENT_FILE_CLOSE => Ok(Event::FileClosed(FileClosed { raw: read(buf, kind)? })),
        EVENT_GPU_WAIT => {
            let raw: GpuWaitEvent = read(buf, kind)?;
            gpu_api(raw.api).ok_or(DecodeError::UnknownGpuApi(raw.api))?;
            Ok(Event::GpuWait(GpuWaitEnd { raw }))
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_probe_common::{comm_bytes, syscalls::OPENAT, FileCloseEvent, EMIT_PATH};

    fn openat(path: &str) -> SyscallPathEvent {
        let mut ev = SyscallPathEvent::zeroed();
        ev.call.header =
            EventHeader { kind: EVENT_SYSCALL_PATH, tgid: 7, tid: 8, cpu: 1, time_ns: 99, cgroup: 0 };
        ev.call.syscall = OPENAT;
        ev.call.reasons = EMIT_PATH;
        ev.call.ret = -2;
        ev.call.process_comm = comm_bytes("python3");
        ev.call.path_len = path.len() as u16;
        ev.path[..path.len()].copy_from_slice(path.as_bytes());
        ev
    }

    #[test]
    fn decodes_a_path_event() {
        let Event::Call(c) = decode(openat("/models/x.pth").as_bytes()).unwrap() else {
            panic!("not a call")
        };
        assert_eq!(c.path_lossy().as_deref(), Some("/models/x.pth"));
        assert_eq!((c.tgid(), c.tid(), c.errno()), (7, 8, Some(2)));
        assert_eq!(c.syscall().name, "openat");
        assert_eq!(c.process_name(), "python3");
    }

    #[test]
    fn decodes_process_events() {
        let mut ev = ProcessEvent::zeroed();
        ev.header.kind = EVENT_PROCESS_EXIT;
        ev.header.tgid = 42;
        ev.exit_code = 256;
        ev.comm = comm_bytes("dd");
        let Event::Process(p) = decode(ev.as_bytes()).unwrap() else { panic!() };
        assert_eq!((p.kind, p.tgid(), p.name()), (ProcessKind::Exit, 42, "dd".to_string()));
    }

    #[test]
    fn decodes_file_close_events() {
        let mut ev = FileCloseEvent::zeroed();
        ev.header.kind = EVENT_FILE_CLOSE;
        ev.header.tgid = 5;
        ev.fd = 9;
        ev.file.small_reads = 64;
        let Event::FileClosed(f) = decode(ev.as_bytes()).unwrap() else { panic!() };
        assert_eq!((f.tgid(), f.fd(), f.raw.file.small_reads), (5, 9, 64));
        assert!(decode(&ev.as_bytes()[..30]).is_err());
    }

    #[test]
    fn decodes_gpu_waits_of_known_apis_only() {
        let mut ev = GpuWaitEvent::zeroed();
        ev.header.kind = EVENT_GPU_WAIT;
        ev.header.tgid = 5;
        ev.header.tid = 6;
        ev.api = 2;
        ev.duration_ns = 1_500_000_000;
        ev.thread_comm = comm_bytes("infer");
        ev.process_comm = comm_bytes("python3");
        let Event::GpuWait(g) = decode(ev.as_bytes()).unwrap() else { panic!() };
        assert_eq!((g.tgid(), g.tid(), g.api()), (5, 6, "cudaStreamSynchronize"));
        assert_eq!((g.thread_name().as_str(), g.process_name().as_str()), ("infer", "python3"));
        assert_eq!(g.duration(), std::time::Duration::from_millis(1500));
        assert!(matches!(decode(&ev.as_bytes()[..79]), Err(DecodeError::Truncated { need: 80, .. })));
        ev.api = 0;
        assert_eq!(decode(ev.as_bytes()), Err(DecodeError::UnknownGpuApi(0)));
    }

    #[test]
    fn rejects_short_unknown_and_inconsistent_records() {
        assert_eq!(decode(&[0u8; 10]), Err(DecodeError::Short(10)));
        let full = openat("/x").as_bytes().to_vec();
        assert!(matches!(decode(&full[..200]), Err(DecodeError::Truncated { kind: EVENT_SYSCALL_PATH, .. })));
        let mut unknown = full.clone();
        unknown[..4].copy_from_slice(&77u32.to_ne_bytes());
        assert_eq!(decode(&unknown), Err(DecodeError::UnknownKind(77)));
        let mut bad = openat("/x");
        bad.call.path_len = PATH_CAP as u16;
        assert_eq!(decode(bad.as_bytes()), Err(DecodeError::BadPathLength(PATH_CAP as u16)));
        let mut bad = openat("/x");
        bad.call.syscall = 999;
        assert_eq!(decode(bad.as_bytes()), Err(DecodeError::UnknownSyscall(999)));
    }

    #[test]
    fn any_prefix_of_any_record_is_safe() {
        let full = openat("/models/lip_decoder.pth").as_bytes().to_vec();
        for n in 0..full.len() {
            let _ = decode(&full[..n]);
        }
    }
}
