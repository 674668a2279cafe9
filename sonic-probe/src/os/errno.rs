//! errno numbers as names (ENOENT) and descriptions, as strace prints them.
//!
//! The kernel-internal restart codes (ERESTARTSYS, ...) are included: the
//! sys_exit tracepoint sees them before signal handling turns them into
//! EINTR or a restart, exactly as strace does.

use nix::errno::Errno;

/// Kernel-internal codes (include/linux/errno.h) that user space never sees
/// but a syscall-exit tracer does.
const KERNEL_INTERNAL: &[(u16, &str, &str)] = &[
    (512, "ERESTARTSYS", "To be restarted if SA_RESTART is set"),
    (513, "ERESTARTNOINTR", "To be restarted"),
    (514, "ERESTARTNOHAND", "To be restarted if no handler"),
    (515, "ENOIOCTLCMD", "No ioctl command"),
    (516, "ERESTART_RESTARTBLOCK", "Interrupted by signal"),
    (517, "EPROBE_DEFER", "Driver requests probe retry"),
    (518, "EOPENSTALE", "Open found a stale dentry"),
    (519, "ENOPARAM", "Parameter not supported"),
];

/// The symbolic name of a positive errno value, e.g. "ENOENT"; unknown
/// values are "E" followed by the number.
pub fn name(errno: u16) -> String {
    if let Some((_, n, _)) = KERNEL_INTERNAL.iter().find(|(v, _, _)| *v == errno) {
        return (*n).to_string();
    }
    match Errno::from_raw(i32::from(errno)) {
        Errno::UnknownErrno => format!("E{errno}"),
        e => format!("{e:?}"),
    }
}

/// The description strace prints after the name: the C library's
/// strerror text ("No such file or directory").
pub fn description(errno: u16) -> String {
    if let Some((_, _, d)) = KERNEL_INTERNAL.iter().find(|(v, _, _)| *v == errno) {
        return (*d).to_string();
    }
    let mut buf = [0u8; 128];
    // SAFETY: strerror_r writes at most buf.len() bytes, NUL terminated.
    let rc = unsafe { libc::strerror_r(i32::from(errno), buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {errno}");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name(2), "ENOENT");
        assert_eq!(name(13), "EACCES");
        assert_eq!(name(12), "ENOMEM");
        assert_eq!(name(11), "EAGAIN");
        assert_eq!(name(110), "ETIMEDOUT");
        assert_eq!(name(512), "ERESTARTSYS");
        assert_eq!(name(4000), "E4000");
    }

    #[test]
    fn descriptions() {
        assert_eq!(description(2), "No such file or directory");
        assert_eq!(description(9), "Bad file descriptor");
        assert_eq!(description(11), "Resource temporarily unavailable");
        assert_eq!(description(512), "To be restarted if SA_RESTART is set");
    }
}
