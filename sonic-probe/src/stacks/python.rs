//! Python frames of a stalled process, read from the interpreter's memory
//! without stopping it: py-spy as a library in non-blocking mode (no
//! ptrace, no SIGSTOP; the target keeps serving while it is read). A
//! non-blocking read of a running thread can be torn, but the threads this
//! is for are blocked on a lock, and their frames do not move.

use std::{collections::HashMap, path::Path, sync::mpsc, time::Duration};

use py_spy::config::LockingStrategy;

use super::frame::{alive, read_memory, CaptureError, Frame, FrameKind};

/// How long a capture may take (finding the interpreter in a large process
/// included) before it is given up.
pub const PYTHON_TIMEOUT: Duration = Duration::from_secs(1);

/// Python frames of every thread of `pid`, innermost first, by OS thread id
/// (tid). Does not stop the process (py-spy non-blocking mode). Returns
/// within ~1 s ([`PYTHON_TIMEOUT`]) or errors.
pub fn python_stacks(pid: u32) -> Result<HashMap<u32, Vec<Frame>>, CaptureError> {
    if !alive(pid) {
        return Err(CaptureError::Gone(pid));
    }
    // py-spy has no deadline of its own; the read runs on a helper thread
    // that is abandoned (it finishes on its own) if it takes too long.
    let (tx, rx) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new().name("sp-pystack".into()).spawn(move || {
        let result = std::panic::catch_unwind(|| read(pid)).unwrap_or_else(|p| {
            Err(CaptureError::Other(format!(
                "process {pid}: the Python reader panicked: {}",
                super::frame::panic_message(&*p)
            )))
        });
        let _ = tx.send(result);
    });
    if let Err(e) = spawned {
        return Err(CaptureError::Other(format!("cannot start the Python reader thread: {e}")));
    }
    match rx.recv_timeout(PYTHON_TIMEOUT) {
        Ok(result) => result,
        Err(_) if !alive(pid) => Err(CaptureError::Gone(pid)),
        Err(_) => Err(CaptureError::Other(format!(
            "process {pid}: Python stacks not read within {PYTHON_TIMEOUT:?}"
        ))),
    }
}

fn config() -> py_spy::Config {
    py_spy::Config {
        blocking: LockingStrategy::NonBlocking,
        native: false,
        gil_only: false,
        subprocesses: false,
        include_idle: true,
        dump_locals: 0,
        ..Default::default()
    }
}

fn read(pid: u32) -> Result<HashMap<u32, Vec<Frame>>, CaptureError> {
    let Ok(raw_pid) = py_spy::Pid::try_from(pid) else {
        return Err(CaptureError::Gone(pid));
    };
    let mut spy = py_spy::PythonSpy::new(raw_pid, &config()).map_err(|e| classify(pid, &e))?;
    let traces = spy.get_stack_traces().map_err(|e| classify(pid, &e))?;
    // Python 3.11+ records each thread's tid; before, py-spy finds it only
    // by stopping the process, so the pthread handles are mapped here.
    let unmapped: Vec<u64> =
        traces.iter().filter(|t| t.os_thread_id.is_none()).map(|t| t.thread_id).collect();
    let tids = if unmapped.is_empty() { HashMap::new() } else { tids_of_pthreads(pid, &unmapped) };
    let mut stacks = HashMap::new();
    for trace in traces {
        let tid = trace.os_thread_id.or_else(|| tids.get(&trace.thread_id).map(|&t| u64::from(t)));
        let Some(tid) = tid.and_then(|t| u32::try_from(t).ok()) else {
            tracing::debug!(pid, thread = trace.thread_id, "no OS thread id for a Python thread");
            continue;
        };
        stacks.insert(tid, trace.frames.iter().map(frame).collect());
    }
    Ok(stacks)
}

/// Bytes of a thread descriptor searched for its tid.
const PTHREAD_SCAN: usize = 1024;
/// Where glibc (x86_64) keeps the tid in `struct pthread`; preferred when
/// more than one offset fits.
const GLIBC_TID_OFFSET: usize = 0x2d0;

/// Maps pthread handles (Python's thread ids: `pthread_self()`, the address
/// of the thread descriptor on glibc and musl) to tids, without stopping
/// the process: the descriptor holds the tid at an offset that depends on
/// the C library, so the offset is the one where every handle holds a
/// distinct tid of the process.
fn tids_of_pthreads(pid: u32, handles: &[u64]) -> HashMap<u64, u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    let tids: Vec<u32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    let descriptors: Vec<(u64, Vec<u8>)> =
        handles.iter().filter_map(|&h| Some((h, read_memory(pid, h, PTHREAD_SCAN).ok()?))).collect();
    match_tids(&descriptors, &tids)
}

/// The pure part of [`tids_of_pthreads`]: `descriptors` are (handle, bytes
/// at the handle), `tids` the process's threads.
fn match_tids(descriptors: &[(u64, Vec<u8>)], tids: &[u32]) -> HashMap<u64, u32> {
    let tid_at = |bytes: &[u8], off: usize| -> Option<u32> {
        let word = u32::from_ne_bytes(bytes.get(off..off + 4)?.try_into().ok()?);
        tids.contains(&word).then_some(word)
    };
    let fits = |off: usize| -> Option<HashMap<u64, u32>> {
        let map: HashMap<u64, u32> =
            descriptors.iter().map(|(h, bytes)| Some((*h, tid_at(bytes, off)?))).collect::<Option<_>>()?;
        let distinct: std::collections::HashSet<u32> = map.values().copied().collect();
        (!map.is_empty() && distinct.len() == map.len()).then_some(map)
    };
    fits(GLIBC_TID_OFFSET).or_else(|| (0..PTHREAD_SCAN).step_by(4).find_map(fits)).unwrap_or_default()
}

fn frame(f: &py_spy::Frame) -> Frame {
    let file = (!f.filename.is_empty()).then(|| f.filename.clone());
    let module = Path::new(&f.filename)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty());
    Frame {
        function: f.name.clone(),
        file,
        line: u32::try_from(f.line).ok().filter(|&l| l > 0),
        module,
        kind: FrameKind::Python,
    }
}

/// Sorts a py-spy error: the process went away, its memory could not be
/// read (permissions), or it is no Python py-spy understands.
fn classify(pid: u32, err: &anyhow::Error) -> CaptureError {
    if !alive(pid) {
        return CaptureError::Gone(pid);
    }
    let text = format!("{err:#}");
    let denied = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| code == libc::EPERM || code == libc::EACCES)
    }) || text.contains("Permission denied")
        || text.contains("Operation not permitted");
    if denied {
        return CaptureError::Unreadable { pid, cause: text };
    }
    CaptureError::NoPython(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_mapping() {
        let f = py_spy::Frame {
            name: "infer".into(),
            filename: "/srv/app/service.py".into(),
            module: None,
            short_filename: None,
            line: 12,
            locals: None,
            is_entry: false,
            is_shim_entry: false,
        };
        let got = frame(&f);
        assert_eq!(got.function, "infer");
        assert_eq!(got.file.as_deref(), Some("/srv/app/service.py"));
        assert_eq!(got.line, Some(12));
        assert_eq!(got.module.as_deref(), Some("service"));
        assert_eq!(got.kind, FrameKind::Python);
        let unknown = frame(&py_spy::Frame { line: 0, filename: String::new(), ..f });
        assert_eq!((unknown.file, unknown.line, unknown.module), (None, None, None));
    }

    #[test]
    fn pthread_tids() {
        let mut a = vec![0u8; PTHREAD_SCAN];
        let mut b = vec![0u8; PTHREAD_SCAN];
        // A decoy: both descriptors hold tid 10 at 0x10 (not distinct).
        a[0x10..0x14].copy_from_slice(&10u32.to_ne_bytes());
        b[0x10..0x14].copy_from_slice(&10u32.to_ne_bytes());
        a[0x40..0x44].copy_from_slice(&10u32.to_ne_bytes());
        b[0x40..0x44].copy_from_slice(&11u32.to_ne_bytes());
        let got = match_tids(&[(0xa000, a.clone()), (0xb000, b.clone())], &[10, 11]);
        assert_eq!(got, HashMap::from([(0xa000, 10), (0xb000, 11)]));
        // glibc's offset wins when it fits.
        a[GLIBC_TID_OFFSET..GLIBC_TID_OFFSET + 4].copy_from_slice(&11u32.to_ne_bytes());
        b[GLIBC_TID_OFFSET..GLIBC_TID_OFFSET + 4].copy_from_slice(&10u32.to_ne_bytes());
        let got = match_tids(&[(0xa000, a), (0xb000, b)], &[10, 11]);
        assert_eq!(got, HashMap::from([(0xa000, 11), (0xb000, 10)]));
        assert!(match_tids(&[(0xa000, vec![0; 8])], &[10]).is_empty());
    }

    #[test]
    fn own_pthread_tid() {
        // SAFETY: pthread_self and gettid have no preconditions.
        let (handle, tid) = unsafe { (libc::pthread_self() as u64, libc::gettid() as u32) };
        let got = tids_of_pthreads(std::process::id(), &[handle]);
        assert_eq!(got.get(&handle), Some(&tid));
    }

    #[test]
    fn gone_pid() {
        assert!(matches!(python_stacks(u32::MAX), Err(CaptureError::Gone(_))));
    }
}
