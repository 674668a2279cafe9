//! Fuzzes `events::decode`, the one function that turns ring buffer bytes
//! (written by the BPF programs, trusted by nobody) into an `Event`.
//!
//! Beyond "no panic" (address sanitizer: no read outside the record), it
//! checks what the reader relies on: a decoded event has the kind of its
//! header, its structure fits in the record and is a byte-exact copy of
//! the record's front, bytes after the structure change nothing, any
//! shorter prefix is `Truncated`, and a path is exactly `path_len` bytes of
//! the record's path field. Every accessor the daemon calls on an event is
//! called too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonic_probe::events::{decode, DecodeError, Event};
use sonic_probe_common::{
    EventHeader, FileCloseEvent, GpuWaitEvent, ProcessEvent, SharedStruct, SyscallEvent,
    SyscallPathEvent, EVENT_FILE_CLOSE, EVENT_GPU_WAIT, EVENT_PROCESS_EXEC, EVENT_PROCESS_EXIT,
    EVENT_PROCESS_FORK, EVENT_SYSCALL, EVENT_SYSCALL_PATH, PATH_CAP,
};

fuzz_target!(|buf: &[u8]| {
    let result = decode(buf);
    if let Err(e) = &result {
        let _ = e.to_string();
    }
    if buf.len() < size_of::<EventHeader>() {
        assert_eq!(result, Err(DecodeError::Short(buf.len())));
        return;
    }
    let kind = u32::from_ne_bytes(buf[..4].try_into().unwrap());
    let Some(size) = size_of_kind(kind) else {
        assert_eq!(result, Err(DecodeError::UnknownKind(kind)));
        return;
    };
    if buf.len() < size {
        assert_eq!(result, Err(DecodeError::Truncated { kind, need: size, got: buf.len() }));
        return;
    }
    // Only the structure's bytes count: the ring pads records to 8 bytes.
    assert_eq!(decode(&buf[..size]), result, "bytes past the structure changed the result");
    assert_eq!(decode(&buf[..size - 1]), Err(DecodeError::Truncated { kind, need: size, got: size - 1 }));
    let Ok(event) = result else { return };
    assert_eq!(event.kind(), kind);
    let front = &buf[..size];
    match &event {
        Event::Call(c) => {
            assert_eq!(c.raw.as_bytes(), &front[..size_of::<SyscallEvent>()]);
            let _ = (c.syscall().name, c.tgid(), c.tid(), c.duration(), c.errno(), c.has_reason(1));
            let _ = (c.process_name(), c.thread_name(), c.waker_name(), c.path_lossy());
            if let Some(path) = &c.path {
                let len = usize::from(c.raw.path_len);
                assert!(len < PATH_CAP && path.len() == len);
                let at = size_of::<SyscallEvent>();
                assert_eq!(path.as_slice(), &front[at..at + len]);
            }
            if let Some(errno) = c.errno() {
                assert!((1..4096).contains(&errno));
            }
        }
        Event::Process(p) => {
            assert_eq!(p.raw.as_bytes(), front);
            let _ = (p.tgid(), p.name());
        }
        Event::FileClosed(f) => {
            assert_eq!(f.raw.as_bytes(), front);
            let _ = (f.tgid(), f.fd());
        }
        Event::GpuWait(g) => {
            assert_eq!(g.raw.as_bytes(), front);
            let _ = (g.tgid(), g.tid(), g.api(), g.duration(), g.thread_name(), g.process_name());
        }
    }
});

/// Size of the structure of an EVENT_* kind, None for an unknown kind.
fn size_of_kind(kind: u32) -> Option<usize> {
    Some(match kind {
        EVENT_SYSCALL => size_of::<SyscallEvent>(),
        EVENT_SYSCALL_PATH => size_of::<SyscallPathEvent>(),
        EVENT_PROCESS_EXEC | EVENT_PROCESS_FORK | EVENT_PROCESS_EXIT => size_of::<ProcessEvent>(),
        EVENT_FILE_CLOSE => size_of::<FileCloseEvent>(),
        EVENT_GPU_WAIT => size_of::<GpuWaitEvent>(),
        _ => return None,
    })
}

