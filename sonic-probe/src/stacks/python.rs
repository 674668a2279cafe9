//! Python frames of a stalled process, read from the interpreter's memory
//! without stopping it: py-spy as a library in non-blocking mode (no
//! ptrace, no SIGSTOP; the target keeps serving while it is read). A
//! non-blocking read of a running thread can be torn, but the threads this
//! is for are blocked on a lock, and their frames do not move.

use std::{collections::HashMap, path::Path, sync::mpsc, time::Duration};

use py_spy::config::LockingStrategy;

use super::frame::{alive, CaptureError, Frame, FrameKind};

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
        let result = std::panic::catch_unwind(|| read(pid)).unwrap_or_else(|_| {
            Err(CaptureError::Other(format!("process {pid}: the Python reader panicked")))
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
    let mut stacks = HashMap::new();
    for trace in traces {
        // os_thread_id is missing only where py-spy cannot map Python
        // threads to OS threads; the pthread id is no tid, so skip it.
        let Some(tid) = trace.os_thread_id.and_then(|t| u32::try_from(t).ok()) else {
            continue;
        };
        stacks.insert(tid, trace.frames.iter().map(frame).collect());
    }
    Ok(stacks)
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
    fn gone_pid() {
        assert!(matches!(python_stacks(u32::MAX), Err(CaptureError::Gone(_))));
    }
}
