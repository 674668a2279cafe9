//! Futex operations by name, as strace prints them, and which of them wait.

/// FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME.
const PRIVATE: u64 = 128;
const CLOCK_REALTIME: u64 = 256;
/// op & CMD_MASK is the command.
pub const CMD_MASK: u64 = sonic_probe_common::FUTEX_CMD_MASK;

const COMMANDS: &[&str] = &[
    "FUTEX_WAIT",
    "FUTEX_WAKE",
    "FUTEX_FD",
    "FUTEX_REQUEUE",
    "FUTEX_CMP_REQUEUE",
    "FUTEX_WAKE_OP",
    "FUTEX_LOCK_PI",
    "FUTEX_UNLOCK_PI",
    "FUTEX_TRYLOCK_PI",
    "FUTEX_WAIT_BITSET",
    "FUTEX_WAKE_BITSET",
    "FUTEX_WAIT_REQUEUE_PI",
    "FUTEX_CMP_REQUEUE_PI",
    "FUTEX_LOCK_PI2",
];

/// Commands that block until woken (or a timeout): the waits.
pub const WAIT_COMMANDS: &[u64] = &[0, 6, 9, 11, 13];

/// Whether a thread is a request thread, whose long waits are stalls (the
/// futex_stall rule, also what stack captures look for while a wait
/// lasts): the process's main thread, or one whose name matches a
/// `request` pattern; never one whose name matches an `ignore` pattern.
pub fn is_request_thread(
    tgid: u32,
    tid: u32,
    name: &str,
    request: &[glob::Pattern],
    ignore: &[glob::Pattern],
) -> bool {
    if ignore.iter().any(|p| p.matches(name)) {
        return false;
    }
    tid == tgid || request.iter().any(|p| p.matches(name))
}

/// The operation as strace writes it, e.g. `FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME`.
pub fn op_name(op: u64) -> String {
    let cmd = op & CMD_MASK;
    let mut s = match COMMANDS.get(cmd as usize) {
        Some(name) => (*name).to_string(),
        None => format!("{cmd:#x}"),
    };
    if op & PRIVATE != 0 {
        s.push_str("_PRIVATE");
    }
    if op & CLOCK_REALTIME != 0 {
        s.push_str("|FUTEX_CLOCK_REALTIME");
    }
    let rest = op & !(CMD_MASK | PRIVATE | CLOCK_REALTIME);
    if rest != 0 {
        s.push_str(&format!("|{rest:#x}"));
    }
    s
}

/// The commands as short label values: COMMANDS without `FUTEX_`, lower case.
const LABELS: &[&str] = &[
    "wait",
    "wake",
    "fd",
    "requeue",
    "cmp_requeue",
    "wake_op",
    "lock_pi",
    "unlock_pi",
    "trylock_pi",
    "wait_bitset",
    "wake_bitset",
    "wait_requeue_pi",
    "cmp_requeue_pi",
    "lock_pi2",
];

/// The command as a short label value (`wait`, `wake`, `lock_pi`...).
pub fn command_label(cmd: u64) -> &'static str {
    LABELS.get(cmd as usize).copied().unwrap_or("unknown")
}

pub fn is_wait(op: u64) -> bool {
    WAIT_COMMANDS.contains(&(op & CMD_MASK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_strace() {
        assert_eq!(op_name(0), "FUTEX_WAIT");
        assert_eq!(op_name(128), "FUTEX_WAIT_PRIVATE");
        assert_eq!(op_name(129), "FUTEX_WAKE_PRIVATE");
        assert_eq!(op_name(9 | 128 | 256), "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME");
        assert_eq!(op_name(13), "FUTEX_LOCK_PI2");
        assert_eq!(op_name(99), "0x63");
    }

    #[test]
    fn waits_and_labels() {
        for op in [0, 128, 6, 9 | 128 | 256, 11, 13] {
            assert!(is_wait(op), "{op}");
        }
        for op in [1, 129, 3, 4, 5, 7, 8, 10, 12] {
            assert!(!is_wait(op), "{op}");
        }
        assert_eq!(command_label(9), "wait_bitset");
        assert_eq!(command_label(6), "lock_pi");
        assert_eq!(command_label(77), "unknown");
        for (label, name) in LABELS.iter().zip(COMMANDS) {
            assert_eq!(*label, name.trim_start_matches("FUTEX_").to_ascii_lowercase());
        }
        assert_eq!(LABELS.len(), COMMANDS.len());
    }
}
