//! The traced system calls: one table that both sides are generated from.
//!
//! Adding a system call starts here: append a row (its `index` is new and
//! never reused), then give it decoding in the daemon if it needs any. The BPF
//! programs pick up the number, the path/size arguments and the byte
//! accounting from the generated header; metrics pick up the name.

use std::fmt::Write;

/// Where a system call's "bytes moved" figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    /// Not counted.
    None,
    /// The return value, when non-negative (read).
    Return,
    /// The `size_arg` argument, when the call succeeded (mmap, munmap).
    SizeArg,
}

/// One traced system call.
#[derive(Clone, Copy, Debug)]
pub struct Syscall {
    /// Stable index: map keys, event fields and bitmasks use it. Never reused.
    pub index: u16,
    /// Name as strace prints it and as the `syscall` metric label.
    pub name: &'static str,
    /// System call number on x86_64.
    pub nr_x86_64: u32,
    /// Argument holding a user-space path read at entry (openat: 1).
    pub path_arg: Option<u8>,
    /// Argument holding a size (read: the count asked for; mmap/munmap: the
    /// length): it goes into the size histogram of syscall_stats.
    pub size_arg: Option<u8>,
    /// Calls whose size argument is below probe_config.small_size are
    /// counted in syscall_stats.small (small reads).
    pub count_small: bool,
    /// Calls whose size argument reaches probe_config.large_size are sent as
    /// events (large mappings).
    pub large_events: bool,
    /// What `bytes` counts for this call.
    pub bytes: Bytes,
    /// Prometheus counter of `bytes`, if exported.
    pub bytes_metric: Option<&'static str>,
}

pub const FUTEX: u16 = 0;
pub const OPENAT: u16 = 1;
pub const READ: u16 = 2;
pub const MMAP: u16 = 3;
pub const MUNMAP: u16 = 4;
pub const CLOSE: u16 = 5;
pub const FUTEX_WAITV: u16 = 6;

const NONE: Syscall = Syscall {
    index: 0,
    name: "",
    nr_x86_64: 0,
    path_arg: None,
    size_arg: None,
    count_small: false,
    large_events: false,
    bytes: Bytes::None,
    bytes_metric: None,
};

/// Every traced system call, in index order.
pub const SYSCALLS: [Syscall; 7] = [
    Syscall { index: FUTEX, name: "futex", nr_x86_64: 202, ..NONE },
    Syscall { index: OPENAT, name: "openat", nr_x86_64: 257, path_arg: Some(1), ..NONE },
    Syscall {
        index: READ,
        name: "read",
        nr_x86_64: 0,
        size_arg: Some(2),
        count_small: true,
        bytes: Bytes::Return,
        bytes_metric: Some("sonic_probe_read_bytes_total"),
        ..NONE
    },
    Syscall {
        index: MMAP,
        name: "mmap",
        nr_x86_64: 9,
        size_arg: Some(1),
        large_events: true,
        bytes: Bytes::SizeArg,
        bytes_metric: Some("sonic_probe_mmap_bytes_total"),
        ..NONE
    },
    Syscall {
        index: MUNMAP,
        name: "munmap",
        nr_x86_64: 11,
        size_arg: Some(1),
        large_events: true,
        bytes: Bytes::SizeArg,
        bytes_metric: Some("sonic_probe_munmap_bytes_total"),
        ..NONE
    },
    Syscall { index: CLOSE, name: "close", nr_x86_64: 3, ..NONE },
    Syscall { index: FUTEX_WAITV, name: "futex_waitv", nr_x86_64: 449, ..NONE },
];

/// Number of traced system calls (array sizes in both languages).
pub const NR_SYSCALLS: usize = SYSCALLS.len();

/// The row for `index`, if it is one of ours.
pub fn by_index(index: u16) -> Option<&'static Syscall> {
    SYSCALLS.get(usize::from(index))
}

/// The row whose name is `name`.
pub fn by_name(name: &str) -> Option<&'static Syscall> {
    SYSCALLS.iter().find(|s| s.name == name)
}

/// Bitmask with one bit per syscall index.
pub fn mask_of(indices: impl IntoIterator<Item = u16>) -> u32 {
    indices.into_iter().fold(0, |m, i| m | (1 << i))
}

/// Writes the syscall constants and the lookup functions used by the BPF side.
pub(crate) fn write_c_table(out: &mut String) {
    crate::cgen::write_define(out, "NR_SYSCALLS", NR_SYSCALLS, "Number of traced system calls.");
    for s in &SYSCALLS {
        let upper = s.name.to_ascii_uppercase();
        crate::cgen::write_define(out, &format!("SYSCALL_{upper}"), s.index, "");
    }
    out.push('\n');
    let arms = |f: &dyn Fn(&Syscall) -> Option<String>| {
        let mut s = String::new();
        for sc in &SYSCALLS {
            if let Some(v) = f(sc) {
                let _ = writeln!(s, "\tcase {}: return {v};", sc.index);
            }
        }
        s
    };
    let _ = writeln!(
        out,
        "// x86_64 system call number -> sonic-probe syscall index, -1 if not traced.\n\
         static __always_inline int sp_syscall_index(long nr)\n{{\n\tswitch (nr) {{"
    );
    for s in &SYSCALLS {
        let _ = writeln!(out, "\tcase {}: return {};", s.nr_x86_64, s.index);
    }
    let _ = writeln!(out, "\tdefault: return -1;\n\t}}\n}}\n");
    for (fname, doc, body) in [
        (
            "sp_syscall_path_arg",
            "Argument read as a path at entry, -1 if none.",
            arms(&|s| s.path_arg.map(|a| a.to_string())),
        ),
        (
            "sp_syscall_size_arg",
            "Argument holding the call's size (size histogram), -1 if none.",
            arms(&|s| s.size_arg.map(|a| a.to_string())),
        ),
        (
            "sp_syscall_counts_small",
            "1 if calls below probe_config.small_size are counted as small.",
            arms(&|s| s.count_small.then(|| "1".into())),
        ),
        (
            "sp_syscall_large_events",
            "1 if calls of probe_config.large_size or more are sent as events.",
            arms(&|s| s.large_events.then(|| "1".into())),
        ),
        (
            "sp_syscall_bytes_from_ret",
            "1 if the return value counts as bytes moved.",
            arms(&|s| (s.bytes == Bytes::Return).then(|| "1".into())),
        ),
        (
            "sp_syscall_bytes_from_size",
            "1 if the size argument counts as bytes moved on success.",
            arms(&|s| (s.bytes == Bytes::SizeArg).then(|| "1".into())),
        ),
    ] {
        let default = if fname.ends_with("_arg") { "-1" } else { "0" };
        let _ = writeln!(
            out,
            "// {doc}\nstatic __always_inline int {fname}(int idx)\n{{\n\tswitch (idx) {{\n{body}\tdefault: return {default};\n\t}}\n}}\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense_and_ordered() {
        for (i, s) in SYSCALLS.iter().enumerate() {
            assert_eq!(usize::from(s.index), i, "{}", s.name);
        }
    }

    #[test]
    fn names_and_numbers_are_unique() {
        for (i, a) in SYSCALLS.iter().enumerate() {
            for b in &SYSCALLS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.nr_x86_64, b.nr_x86_64);
            }
        }
    }

    #[test]
    fn size_uses_need_a_size_argument() {
        for s in &SYSCALLS {
            if s.bytes == Bytes::SizeArg || s.count_small || s.large_events {
                assert!(s.size_arg.is_some(), "{}", s.name);
            }
            assert_eq!(s.bytes == Bytes::None, s.bytes_metric.is_none(), "{}", s.name);
        }
    }

    #[test]
    fn lookup_by_name_and_mask() {
        assert_eq!(by_name("openat").unwrap().index, OPENAT);
        assert!(by_name("write").is_none());
        assert_eq!(mask_of([FUTEX, MUNMAP]), 0b10001);
    }
}
