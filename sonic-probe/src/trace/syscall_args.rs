//! System-call arguments as strace writes them: open flags, mmap protections
//! and flags, ioctl requests, futex operations, strings, errors.
//!
//! The tables follow strace 6.1's xlat files (open_mode_flags.in,
//! mmap_flags.in, mmap_prot.in, futex*.in) and its decoders (futex.c,
//! mem.c, open.c), so that `sonic-probe trace` lines can be compared with
//! strace's, character for character, except for the buffer contents we do
//! not capture.

use crate::os::errno;

/// Flags printed in table order; bits left over are printed in hex.
/// Multi-bit entries match only when all their bits are set.
fn flags(value: u64, table: &[(u64, &str)]) -> Vec<String> {
    let mut left = value;
    let mut out = Vec::new();
    for &(bits, name) in table {
        if bits != 0 && left & bits == bits {
            out.push(name.to_string());
            left &= !bits;
        }
    }
    if left != 0 {
        out.push(format!("{left:#x}"));
    }
    out
}

const OPEN_FLAGS: &[(u64, &str)] = &[
    (0o100, "O_CREAT"),
    (0o200, "O_EXCL"),
    (0o400, "O_NOCTTY"),
    (0o1000, "O_TRUNC"),
    (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"),
    (0o4010000, "O_SYNC"),
    (0o4000000, "__O_SYNC"),
    (0o10000, "O_DSYNC"),
    (0o40000, "O_DIRECT"),
    (0o100000, "O_LARGEFILE"),
    (0o400000, "O_NOFOLLOW"),
    (0o1000000, "O_NOATIME"),
    (0o2000000, "O_CLOEXEC"),
    (0o10000000, "O_PATH"),
    (0o20200000, "O_TMPFILE"),
    (0o20000000, "__O_TMPFILE"),
    (0o200000, "O_DIRECTORY"),
    (0o20000, "FASYNC"),
];

/// `O_RDONLY|O_CLOEXEC`.
pub fn open_flags(value: u64) -> String {
    let access = match value & 3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        2 => "O_RDWR",
        _ => "O_ACCMODE",
    };
    let mut parts = vec![access.to_string()];
    parts.extend(flags(value & !3, OPEN_FLAGS));
    parts.join("|")
}

/// Whether openat has (and strace prints) a mode argument.
pub fn open_has_mode(value: u64) -> bool {
    value & 0o100 != 0 || value & 0o20000000 != 0
}

/// `0644`, `000`.
pub fn mode(value: u64) -> String {
    if value == 0 {
        "000".into()
    } else {
        format!("0{:o}", value)
    }
}

const PROT: &[(u64, &str)] = &[
    (0x1, "PROT_READ"),
    (0x2, "PROT_WRITE"),
    (0x4, "PROT_EXEC"),
    (0x8, "PROT_SEM"),
    (0x01000000, "PROT_GROWSDOWN"),
    (0x02000000, "PROT_GROWSUP"),
];

/// `PROT_READ|PROT_WRITE`, `PROT_NONE`.
pub fn mmap_prot(value: u64) -> String {
    if value == 0 {
        return "PROT_NONE".into();
    }
    flags(value, PROT).join("|")
}

const MAP_FLAGS: &[(u64, &str)] = &[
    (0x10, "MAP_FIXED"),
    (0x20, "MAP_ANONYMOUS"),
    (0x40, "MAP_32BIT"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x10000, "MAP_NONBLOCK"),
    (0x100, "MAP_GROWSDOWN"),
    (0x800, "MAP_DENYWRITE"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
    (0x80000, "MAP_SYNC"),
    (0x100000, "MAP_FIXED_NOREPLACE"),
];
const MAP_HUGE_SHIFT: u32 = 26;
const MAP_HUGE_MASK: u64 = 0x3f;

/// `MAP_PRIVATE|MAP_ANONYMOUS`, `MAP_SHARED_VALIDATE|MAP_HUGETLB|21<<MAP_HUGE_SHIFT`.
pub fn mmap_flags(value: u64) -> String {
    let kind = match value & 0xf {
        0 => "MAP_FILE".to_string(),
        1 => "MAP_SHARED".to_string(),
        2 => "MAP_PRIVATE".to_string(),
        3 => "MAP_SHARED_VALIDATE".to_string(),
        other => format!("{other:#x}"),
    };
    let mut parts = vec![kind];
    let rest = value & !0xf;
    let huge = rest & (MAP_HUGE_MASK << MAP_HUGE_SHIFT);
    parts.extend(flags(rest & !huge, MAP_FLAGS));
    if huge != 0 {
        parts.push(format!("{}<<MAP_HUGE_SHIFT", huge >> MAP_HUGE_SHIFT));
    }
    parts.join("|")
}

/// An address: `NULL` or `0x7ffd...`.
pub fn addr(value: u64) -> String {
    if value == 0 {
        "NULL".into()
    } else {
        format!("{value:#x}")
    }
}

/// A number in hex as strace's `%#lx` prints it: `0` or `0x1000`.
pub fn hex(value: u64) -> String {
    if value == 0 {
        "0".into()
    } else {
        format!("{value:#x}")
    }
}

/// ioctl requests strace names (tty and generic file ones; the others it
/// prints as `_IOC(...)`, as below).
const IOCTL_NAMES: &[(u32, &str)] = &[
    (0x5401, "TCGETS"),
    (0x5402, "TCSETS"),
    (0x5403, "TCSETSW"),
    (0x5404, "TCSETSF"),
    (0x540f, "TIOCGPGRP"),
    (0x5410, "TIOCSPGRP"),
    (0x5413, "TIOCGWINSZ"),
    (0x5414, "TIOCSWINSZ"),
    (0x541b, "FIONREAD"),
    (0x5421, "FIONBIO"),
    (0x5450, "FIONCLEX"),
    (0x5451, "FIOCLEX"),
    (0x5452, "FIOASYNC"),
];

/// An ioctl request: its name if strace has one here, else its fields as
/// strace's ioctl_print_code writes them, e.g. `_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)`.
pub fn ioctl_request(code: u32) -> String {
    if let Some((_, name)) = IOCTL_NAMES.iter().find(|(c, _)| *c == code) {
        return (*name).to_string();
    }
    let dir = match code >> 30 {
        0 => "_IOC_NONE",
        1 => "_IOC_WRITE",
        2 => "_IOC_READ",
        _ => "_IOC_READ|_IOC_WRITE",
    };
    let x = |v: u32| hex(u64::from(v));
    format!("_IOC({dir}, {}, {}, {})", x((code >> 8) & 0xff), x(code & 0xff), x((code >> 16) & 0x3fff))
}

/// A string as strace quotes it (non-printable bytes in octal).
pub fn quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\r' => s.push_str("\\r"),
            0x0c => s.push_str("\\f"),
            0x0b => s.push_str("\\v"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                // Octal, as short as possible unless a digit follows.
                let next_is_digit = bytes.get(i + 1).is_some_and(|n| n.is_ascii_digit() && *n < b'8');
                if next_is_digit {
                    s.push_str(&format!("\\{b:03o}"));
                } else {
                    s.push_str(&format!("\\{b:o}"));
                }
            }
        }
    }
    s.push('"');
    s
}

/// A descriptor number as strace prints it (AT_FDCWD for -100).
pub fn dirfd(value: u64) -> String {
    let fd = value as i32;
    if fd == -100 {
        "AT_FDCWD".into()
    } else {
        fd.to_string()
    }
}

/// `{tv_sec=0, tv_nsec=1000000}` from the two words of a struct timespec.
pub fn timespec(words: [u64; 2]) -> String {
    format!("{{tv_sec={}, tv_nsec={}}}", words[0] as i64, words[1] as i64)
}

/// The FUTEX_WAKE_OP operation word, e.g. `FUTEX_OP_SET<<28|0<<12|FUTEX_OP_CMP_GT<<24|0x1`.
pub fn futex_wake_op(val3: u32) -> String {
    const OPS: &[&str] = &["FUTEX_OP_SET", "FUTEX_OP_ADD", "FUTEX_OP_OR", "FUTEX_OP_ANDN", "FUTEX_OP_XOR"];
    const CMPS: &[&str] = &[
        "FUTEX_OP_CMP_EQ",
        "FUTEX_OP_CMP_NE",
        "FUTEX_OP_CMP_LT",
        "FUTEX_OP_CMP_LE",
        "FUTEX_OP_CMP_GT",
        "FUTEX_OP_CMP_GE",
    ];
    let hex = |v: u32| if v == 0 { "0".to_string() } else { format!("{v:#x}") };
    let mut s = String::new();
    if (val3 >> 28) & 8 != 0 {
        s.push_str("FUTEX_OP_OPARG_SHIFT<<28|");
    }
    let op = ((val3 >> 28) & 7) as usize;
    match OPS.get(op) {
        Some(n) => s.push_str(&format!("{n}<<28")),
        None => s.push_str(&format!("{op}<<28 /* FUTEX_OP_??? */")),
    }
    s.push_str(&format!("|{}<<12", hex((val3 >> 12) & 0xfff)));
    let cmp = ((val3 >> 24) & 0xf) as usize;
    match CMPS.get(cmp) {
        Some(n) => s.push_str(&format!("|{n}<<24")),
        None => s.push_str(&format!("|{cmp}<<24 /* FUTEX_OP_CMP_??? */")),
    }
    s.push_str(&format!("|{}", hex(val3 & 0xfff)));
    s
}

/// A futex bitset: `FUTEX_BITSET_MATCH_ANY` or hex.
pub fn futex_bitset(val3: u32) -> String {
    if val3 == u32::MAX {
        "FUTEX_BITSET_MATCH_ANY".into()
    } else {
        format!("{val3:#x}")
    }
}

/// A clock id as strace names it.
pub fn clock(id: u64) -> String {
    match id {
        0 => "CLOCK_REALTIME".into(),
        1 => "CLOCK_MONOTONIC".into(),
        2 => "CLOCK_PROCESS_CPUTIME_ID".into(),
        3 => "CLOCK_THREAD_CPUTIME_ID".into(),
        4 => "CLOCK_MONOTONIC_RAW".into(),
        5 => "CLOCK_REALTIME_COARSE".into(),
        6 => "CLOCK_MONOTONIC_COARSE".into(),
        7 => "CLOCK_BOOTTIME".into(),
        other => other.to_string(),
    }
}

/// The result of a failed call: `-1 ENOENT (No such file or directory)`,
/// or `? ERESTARTSYS (...)` for the kernel's restart codes.
pub fn error(errno_value: u16) -> String {
    let lead = if (512..=517).contains(&errno_value) { "?" } else { "-1" };
    format!("{lead} {} ({})", errno::name(errno_value), errno::description(errno_value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_like_strace() {
        assert_eq!(open_flags(0o2000000), "O_RDONLY|O_CLOEXEC");
        assert_eq!(
            open_flags(0o1 | 0o100 | 0o1000 | 0o2000 | 0o4000 | 0o400000 | 0o200000),
            "O_WRONLY|O_CREAT|O_TRUNC|O_APPEND|O_NONBLOCK|O_NOFOLLOW|O_DIRECTORY"
        );
        assert_eq!(open_flags(0o10000000 | 0o200000), "O_RDONLY|O_PATH|O_DIRECTORY");
        assert_eq!(
            open_flags(2 | 0o100 | 0o200 | 0o400 | 0o4010000 | 0o1000000),
            "O_RDWR|O_CREAT|O_EXCL|O_NOCTTY|O_SYNC|O_NOATIME"
        );
        assert_eq!(open_flags(0o20200000 | 2), "O_RDWR|O_TMPFILE");
        assert!(open_has_mode(0o100) && open_has_mode(0o20200000) && !open_has_mode(0o2000000));
        assert_eq!(mode(0o644), "0644");
        assert_eq!(mode(0), "000");
    }

    #[test]
    fn mmap_like_strace() {
        assert_eq!(mmap_prot(3), "PROT_READ|PROT_WRITE");
        assert_eq!(mmap_prot(0), "PROT_NONE");
        assert_eq!(mmap_prot(5), "PROT_READ|PROT_EXEC");
        assert_eq!(mmap_flags(0x22), "MAP_PRIVATE|MAP_ANONYMOUS");
        assert_eq!(
            mmap_flags(0x2 | 0x20 | 0x4000 | 0x100 | 0x20000),
            "MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_GROWSDOWN|MAP_STACK"
        );
        assert_eq!(mmap_flags(0x1 | 0x10 | 0x8000), "MAP_SHARED|MAP_FIXED|MAP_POPULATE");
        assert_eq!(
            mmap_flags(0x3 | 0x40000 | (21 << 26)),
            "MAP_SHARED_VALIDATE|MAP_HUGETLB|21<<MAP_HUGE_SHIFT"
        );
        assert_eq!(mmap_flags(0x2 | 0x802), "MAP_PRIVATE|MAP_DENYWRITE");
    }

    #[test]
    fn strings_and_numbers() {
        assert_eq!(quote(b"/etc/hostname"), "\"/etc/hostname\"");
        assert_eq!(quote(b"a\"b\\c\n\x01x\x001"), "\"a\\\"b\\\\c\\n\\1x\\0001\"");
        assert_eq!(addr(0), "NULL");
        assert_eq!(addr(0x7f00), "0x7f00");
        assert_eq!(dirfd((-100i64) as u64), "AT_FDCWD");
        assert_eq!(dirfd(3), "3");
        assert_eq!(timespec([0, 1_000_000]), "{tv_sec=0, tv_nsec=1000000}");
    }

    #[test]
    fn ioctls_like_strace() {
        assert_eq!(ioctl_request(0x5401), "TCGETS");
        // NVIDIA's NV_ESC_RM_CONTROL on /dev/nvidiactl, as strace prints it.
        assert_eq!(ioctl_request(0xc020462a), "_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)");
        assert_eq!(ioctl_request(0x6400), "_IOC(_IOC_NONE, 0x64, 0, 0)");
        assert_eq!(ioctl_request(0x40086409), "_IOC(_IOC_WRITE, 0x64, 0x9, 0x8)");
        assert_eq!(hex(0), "0");
        assert_eq!(hex(4096), "0x1000");
    }

    #[test]
    fn futex_words() {
        assert_eq!(futex_wake_op(0x0400_0001), "FUTEX_OP_SET<<28|0<<12|FUTEX_OP_CMP_GT<<24|0x1");
        assert_eq!(futex_bitset(u32::MAX), "FUTEX_BITSET_MATCH_ANY");
        assert_eq!(futex_bitset(5), "0x5");
        assert_eq!(clock(1), "CLOCK_MONOTONIC");
    }

    #[test]
    fn errors_like_strace() {
        assert_eq!(error(2), "-1 ENOENT (No such file or directory)");
        assert_eq!(error(110), "-1 ETIMEDOUT (Connection timed out)");
        assert_eq!(error(512), "? ERESTARTSYS (To be restarted if SA_RESTART is set)");
    }
}
