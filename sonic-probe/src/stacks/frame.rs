//! The vocabulary shared by the stack readers: one frame of a stack (Python
//! or native), the registers an unwind starts from, and why a capture is
//! missing or partial. Frames are serialized into findings, so their field
//! names are part of the JSON contract; how a frame reads in a line of
//! `sonic-probe findings` is here too.

/// Which reader produced a frame.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    Python,
    Native,
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    /// Function name (demangled for native frames); `??` when unknown.
    pub function: String,
    /// Source file, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Line in `file`, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// ELF object (basename) for native frames; Python module (file stem)
    /// for Python frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub kind: FrameKind,
}

/// User registers of a thread blocked in a system call, as the kernel saved
/// them at syscall entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// Why a capture is missing or partial; `as_label()` is the `result` label
/// of sonic_probe_stack_captures_total.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CaptureError {
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("not a Python process (or a Python version not supported: {0})")]
    NoPython(String),
    #[error("cannot read process {pid} memory: {cause}")]
    Unreadable { pid: u32, cause: String },
    #[error("{0}")]
    Other(String),
}

impl CaptureError {
    /// The `result` label value of sonic_probe_stack_captures_total.
    pub fn as_label(&self) -> &'static str {
        match self {
            CaptureError::Gone(_) => "gone",
            CaptureError::NoPython(_) => "no_python",
            CaptureError::Unreadable { .. } => "unreadable",
            CaptureError::Other(_) => "error",
        }
    }
}

/// Whether `pid` still exists (a zombie counts as gone: its memory is).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the last ')' (comm may contain parentheses).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Classifies an I/O error met while reading process `pid`.
pub(crate) fn io_error(pid: u32, what: &str, err: &std::io::Error) -> CaptureError {
    if !alive(pid) || err.raw_os_error() == Some(libc::ESRCH) {
        return CaptureError::Gone(pid);
    }
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EFAULT) | Some(libc::EIO) => {
            CaptureError::Unreadable { pid, cause: format!("{what}: {err}") }
        }
        _ => CaptureError::Other(format!("process {pid}: {what}: {err}")),
    }
}

/// Copies `len` bytes at `addr` of process `pid` (short reads are returned
/// short; an unreadable first page is an error).
pub(crate) fn read_memory(pid: u32, addr: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: len };
    let raw = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: `local` points to `len` writable bytes owned by `buf`, which
    // outlives the call; the remote range is only read by the kernel.
    let n = unsafe { libc::process_vm_readv(raw, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    if buf.len() < len.min(8) {
        return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buf)
}

/// What a caught panic said (its payload, when it is a message), for the
/// capture's note: a reader that trips on a target's memory says where.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Frames of the machinery a wait goes through rather than of the
/// program's own code: Python's threading module, the C library, the way
/// Python calls C (ctypes, libffi), and the CUDA libraries (a GPU wait's
/// finding names the call already; the line that made it is the news).
fn is_machinery(f: &Frame) -> bool {
    let file = base(f.file.as_deref().unwrap_or(""));
    let module = base(f.module.as_deref().unwrap_or(""));
    file == "threading.py"
        || [
            "libc.so",
            "libc-",
            "libpthread",
            "ld-linux",
            "libffi.so",
            "_ctypes.",
            "libcudart.so",
            "libcuda.so",
        ]
        .iter()
        .any(|m| module.starts_with(m))
        || (f.kind == FrameKind::Native && f.function.starts_with("__"))
}

/// A native frame of the Python interpreter itself (its binary or
/// libpython): where a Python thread's native stack meets its Python
/// frames.
pub fn is_interpreter(f: &Frame) -> bool {
    let module = base(f.module.as_deref().unwrap_or(""));
    f.kind == FrameKind::Native && (module.starts_with("python") || module.starts_with("libpython"))
}

/// The innermost frame of the program's own code (stacks are innermost
/// first), else the innermost frame.
pub fn meaningful_frame(stack: &[Frame]) -> Option<&Frame> {
    stack.iter().find(|f| !is_machinery(f)).or_else(|| stack.first())
}

/// `infer() at server.py:88`.
pub fn short_frame(f: &Frame) -> String {
    let file = f.file.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
    let module = f.module.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
    match (file, f.line, module) {
        (Some(file), Some(line), _) => format!("{}() at {file}:{line}", f.function),
        (Some(file), None, _) => format!("{}() in {file}", f.function),
        (None, _, Some(m)) => format!("{}() in {m}", f.function),
        (None, _, None) => format!("{}()", f.function),
    }
}

/// A frame on a line of its own (`--stacks`).
pub fn long_frame(f: &Frame) -> String {
    let kind = match f.kind {
        FrameKind::Python => "py",
        FrameKind::Native => "native",
    };
    let mut s = format!("{kind:<6} {}", f.function);
    match (&f.file, f.line) {
        (Some(file), Some(line)) => s.push_str(&format!("  {file}:{line}")),
        (Some(file), None) => s.push_str(&format!("  {file}")),
        _ => {}
    }
    if let Some(m) = &f.module {
        if f.kind == FrameKind::Native {
            s.push_str(&format!("  ({m})"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(CaptureError::Gone(1).as_label(), "gone");
        assert_eq!(CaptureError::NoPython("x".into()).as_label(), "no_python");
        assert_eq!(CaptureError::Unreadable { pid: 1, cause: "x".into() }.as_label(), "unreadable");
        assert_eq!(CaptureError::Other("x".into()).as_label(), "error");
    }

    #[test]
    fn frame_json_skips_unknowns() {
        let f = Frame {
            function: "infer".into(),
            file: None,
            line: Some(3),
            module: None,
            kind: FrameKind::Python,
        };
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"{"function":"infer","line":3,"kind":"python"}"#);
        assert_eq!(serde_json::from_str::<Frame>(&json).unwrap(), f);
    }

    #[test]
    fn self_is_alive() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }
}
