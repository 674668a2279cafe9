//! Map layouts and event layouts shared with the BPF programs.
//!
//! Everything here is written once in Rust and generated into C (see
//! `header.rs`), with size and offset asserts, so C and Rust can't drift.
//! The numbers they use (sizes, kinds, flags) are in `constants.rs`.

#[cfg(test)]
use crate::cgen::SharedStruct;
use crate::{cgen::write_struct, constants::*, shared_struct};

shared_struct! {
    /// Runtime settings of the BPF programs: the single entry of the
    /// `config` array map, written by the daemon, changeable while attached.
    pub struct ProbeConfig as "probe_config" {
        /// FILTER_* bits; 0 traces every process on the host.
        pub filter_flags: u32,
        /// Bit n set: some target cgroup sits at cgroup level n.
        pub cgroup_levels: u32,
        /// The daemon's own process, never traced.
        pub self_tgid: u32,
        /// Bit per syscall index: every call of it is sent (strace mode).
        pub trace_mask: u32,
        /// Bit per syscall index: failed calls of it are sent as events.
        pub error_event_mask: u32,
        /// Non-zero: every call with a path argument is sent with its path
        /// (the findings need every openat).
        pub path_events: u32,
        /// Calls lasting at least this long are sent as events (0: never).
        pub slow_call_ns: u64,
        /// Calls of a syscall with large_events whose size argument is at
        /// least this many bytes are sent as events (0: never).
        pub large_size: u64,
        /// Calls of a syscall with count_small whose size argument is below
        /// this are counted in syscall_stats.small.
        pub small_size: u64,
        /// Events are submitted without waking the daemon (it polls the
        /// ring) until this many bytes wait in the ring: then it is woken.
        pub wakeup_bytes: u64,
        /// Possible CPUs (the per-CPU wake rings a long wait searches).
        pub nr_cpus: u32,
        /// Bit per syscall index: the calls traced at all (`run --syscalls`);
        /// sys_enter returns at once for the others.
        pub syscall_mask: u32,
        /// Character-device majors of GPU drivers (from /proc/devices), 0 in
        /// unused slots: their descriptors are FILE_CLASS_GPU.
        pub gpu_majors: [u32; 8],
        /// Non-zero: statistics are kept per cgroup too (StatsKey.cgroup,
        /// ErrorKey.cgroup), for the `workload` label; 0 leaves them 0.
        pub workload_cgroups: u32,
        /// Non-zero: futex waits of targets are entered in futex_waiting
        /// while they last (stall stack captures, `run --stack-captures`):
        /// INFLIGHT_MAIN_THREADS or INFLIGHT_ALL_THREADS.
        /// Takes the place of the padding that kept the struct a multiple
        /// of 8 bytes: the size is unchanged.
        pub inflight_waits: u32,
        /// Non-zero: a read-only open of a regular file within this many ns
        /// of the last event sent for the same file of the same process is
        /// counted in its reopens entry instead of being sent (files.h); 0
        /// sends every open (strace mode, tests that want every event).
        pub reopen_coalesce_ns: u64,
        /// Non-zero: the scheduler programs account where each watched
        /// thread's time goes (thread_time.h); 0: they return at once.
        pub thread_time: u32,
        /// Bytes of a task's kernel stack (THREAD_SIZE: 16 KiB on x86_64,
        /// 32 KiB with KASAN): its user registers sit at the top, where the
        /// call a thread blocks in is read.
        pub thread_stack_size: u32,
        /// Bit per syscall index: failures of it are counted (and sent, if
        /// in error_event_mask) even when it is not in syscall_mask. Its
        /// exit alone sees them (the arguments are in its registers), so
        /// its successful calls pay one compare (write, pwrite64, writev).
        pub error_only_mask: u32,
        pub _pad_end: u32,
    }
}

shared_struct! {
    /// Value of futex_waiting (key: the thread id): a futex wait of a
    /// target thread in progress, entered at its sys_enter and deleted at
    /// its sys_exit (or the thread's exit), with the user registers saved
    /// at the system call's entry, from which its native stack is unwound
    /// while it waits.
    pub struct InflightWait as "inflight_wait" {
        pub tgid: u32,
        pub tid: u32,
        /// The call's entry time (its event's header.time_ns).
        pub start_ns: u64,
        /// The futex word (futex), or the futex_waitv array.
        pub uaddr: u64,
        /// The futex op argument (0 for futex_waitv).
        pub op: u32,
        /// Syscall index (futex or futex_waitv).
        pub syscall: u16,
        pub _pad: u16,
        /// User instruction pointer at the system call (after its syscall
        /// instruction).
        pub ip: u64,
        /// User stack pointer.
        pub sp: u64,
        /// User frame pointer (rbp).
        pub bp: u64,
    }
}

shared_struct! {
    /// Key of thread_time_index (-> its slot of thread_time_slots): where
    /// threads' time is counted, per workload, process name and thread
    /// name; all zero for the overflow slot.
    pub struct ThreadTimeKey as "thread_time_key" {
        /// The thread's cgroup v2 id (0 with workloads off).
        pub cgroup: u64,
        /// Name of its thread-group leader (the process name).
        pub comm: [u8; 16],
        /// Its own name (pt_autograd_0, loader; the process's name if it
        /// never took one).
        pub thread: [u8; 16],
    }
}

shared_struct! {
    /// Value of thread_time_slots (per CPU; the daemon sums the CPUs):
    /// nanoseconds spent in each THREAD_* state.
    pub struct ThreadTimes as "thread_times" {
        pub ns: [u64; 10],
    }
}

shared_struct! {
    /// A thread's scheduler clock (task storage, or thread_clocks keyed by
    /// thread id): the state it is in since when, and where its time is
    /// counted (thread_time.h).
    pub struct ThreadClock as "thread_clock" {
        /// When the thread entered `state` (bpf_ktime_get_ns); 0: not yet
        /// seen switching.
        pub since_ns: u64,
        /// When `watched` was decided (0: decide at the next switch off a CPU).
        pub decided_ns: u64,
        /// Its slot of thread_time_slots plus one (0: none yet).
        pub slot_plus_one: u32,
        /// THREAD_*.
        pub state: u16,
        /// Non-zero: a target thread, whose time is counted.
        pub watched: u16,
        /// What the slot was found for (compared at each switch off a CPU).
        pub key: ThreadTimeKey,
        /// When the outermost waiting GPU call in progress began (0: none,
        /// or its thread is not a target: not counted).
        pub gpu_since_ns: u64,
        /// Its api id (gpu_apis).
        pub gpu_api: u16,
        /// Waiting GPU calls in progress, nested (0: none). While non-zero
        /// the thread's time on CPU or blocked is THREAD_GPU.
        pub gpu_depth: u16,
        pub _pad: u32,
    }
}

shared_struct! {
    /// Key of gpu_waits: the waits of one (workload, process name, api).
    /// All-zero cgroup and comm: the overflow entry of api.
    pub struct GpuWaitKey as "gpu_wait_key" {
        /// cgroup v2 id with workloads on, else 0.
        pub cgroup: u64,
        /// The process's name (its leader's comm).
        pub comm: [u8; 16],
        /// The gpu_apis row.
        pub api: u32,
        pub _pad: u32,
    }
}

shared_struct! {
    /// Value of gpu_waits (added to atomically): the outermost waiting calls' time.
    /// Their number is the sum of the buckets.
    pub struct GpuWaitStats as "gpu_wait_stats" {
        /// Sum of the waits in nanoseconds.
        pub total_ns: u64,
        /// Log2 histogram of the waits, see LATENCY_BUCKETS.
        pub latency: [u64; 27],
    }
}

shared_struct! {
    /// Per-thread state between system call entry and exit (task storage).
    pub struct ThreadState as "thread_state" {
        /// bpf_ktime_get_ns() at entry.
        pub start_ns: u64,
        /// The six raw argument registers at entry.
        pub args: [u64; 6],
        /// User memory an argument points to, read at entry in strace mode:
        /// a futex wait's timeout (struct timespec); or, at an openat's
        /// exit, its file's reopens entry (AUX_OPEN_TOTAL).
        pub aux: [u64; 2],
        /// Syscall index of the call in progress.
        pub syscall: u16,
        /// Non-zero between a traced entry and its exit.
        pub active: u16,
        /// EMIT_PATH_* flags of the captured path.
        pub path_flags: u16,
        /// Length of path without its NUL, 0 if none.
        pub path_len: u16,
        /// What aux holds: 0 nothing, AUX_TIMESPEC, AUX_OPEN_TOTAL.
        pub aux_kind: u16,
        pub _pad: [u16; 3],
        /// The workload (cgroup) and process name slot_cache was filled
        /// for: the cache is emptied when either changes.
        pub stats_cgroup: u64,
        pub stats_comm: [u8; 16],
        /// This thread's recently used slots of stats_slots, so that a
        /// call costs a compare and an array index instead of a hash lookup
        /// (stats.h).
        pub slot_cache: [StatsSlot; STATS_SLOT_CACHE as usize],
        /// Path argument (openat), NUL terminated: read at exit, where the
        /// kernel has faulted it in, and only if the call is sent.
        pub path: [u8; 256],
    }
}

shared_struct! {
    /// One entry of a thread's slot cache: (syscall, variant) -> slot.
    pub struct StatsSlot as "stats_slot" {
        pub syscall: u16,
        pub variant: u16,
        /// The slot in stats_slots plus one; 0: empty; SLOT_IN_HASH: the
        /// key has no slot and counts in syscall_stats.
        pub slot_plus_one: u32,
    }
}

shared_struct! {
    /// Key of stats_index (-> its slot of stats_slots) and of syscall_stats
    /// (the keys without a slot): one entry per process name, syscall and
    /// variant. Not per process: thousands of short-lived processes of one
    /// name share their entries, so process churn allocates nothing in the
    /// kernel (per-process entries made allocation fail in bursts of forks).
    pub struct StatsKey as "stats_key" {
        /// Syscall index.
        pub syscall: u16,
        /// Sub-kind of the call, as its row's variant says (syscalls.rs): the
        /// futex command (op & FUTEX_CMD_MASK), the FILE_CLASS_* of its
        /// descriptor, else 0.
        pub variant: u16,
        /// Name of the thread-group leader when the call ended; all zero in
        /// the overflow entries.
        pub comm: [u8; 16],
        pub _pad: u32,
        /// The caller's cgroup v2 id when the call ended (the `workload`),
        /// 0 with probe_config.workload_cgroups off and in overflow entries.
        /// Per cgroup, not per process: no entry per new process.
        pub cgroup: u64,
    }
}

shared_struct! {
    /// Value of syscall_stats (per CPU; the daemon sums the CPUs). The
    /// number of calls is the sum of the latency buckets: every call lands
    /// in exactly one, so histogram count and buckets always agree.
    pub struct SyscallStats as "syscall_stats" {
        /// Calls that returned an error (-4095..-1).
        pub errors: u64,
        /// Sum of call durations in nanoseconds.
        pub total_ns: u64,
        /// Bytes moved, see the syscall table.
        pub bytes: u64,
        /// Calls whose size argument was below probe_config.small_size
        /// (syscalls with count_small).
        pub small: u64,
        /// Calls to a regular file that returned fewer bytes than their
        /// size argument asked, without an error (syscalls with
        /// count_short: short writes).
        pub short_calls: u64,
        /// Sum of the size arguments (syscalls with a size_arg).
        pub size_total: u64,
        /// Log2 latency histogram, see LATENCY_BUCKETS.
        pub latency: [u64; 27],
        /// Histogram of the size argument, see SIZE_BUCKETS (syscalls with a
        /// size_arg).
        pub size: [u64; 18],
        /// The errno of this CPU's first failed call of the key (0: none
        /// yet). Its failures are counted here, in `first_errno_calls`, not
        /// in syscall_errors: most keys fail with one errno (a futex wait's
        /// EAGAIN, openat's ENOENT), which then costs no second map lookup.
        /// Per CPU: the daemon turns each CPU's pair into an error count
        /// before it sums the CPUs.
        pub first_errno: u64,
        /// Failed calls with `first_errno`.
        pub first_errno_calls: u64,
    }
}

shared_struct! {
    /// Key of syscall_errors (value: a per-CPU u64 count), per process
    /// name like StatsKey: the failures a statistics entry does not count
    /// itself (SyscallStats::first_errno).
    pub struct ErrorKey as "error_key" {
        /// Syscall index.
        pub syscall: u16,
        /// Positive errno; 0 in the overflow entry.
        pub errno: u16,
        /// Name of the thread-group leader when the call ended; all zero in
        /// the overflow entries.
        pub comm: [u8; 16],
        pub _pad: u32,
        /// As StatsKey.cgroup.
        pub cgroup: u64,
    }
}

shared_struct! {
    /// Key of open_files: a descriptor of a process.
    pub struct FileKey as "file_key" {
        pub tgid: u32,
        pub fd: u32,
    }
}

shared_struct! {
    /// Value of open_files: a descriptor the programs know the kind of, and
    /// what was read through it. Regular files are entered at openat exit
    /// (with their class from the path's extension); other descriptors at
    /// their first read (class not_file). At close the entry is marked
    /// closed (every field 0, mode included) and kept for the process's
    /// next descriptor of that number to take over (files.h).
    pub struct OpenFile as "open_file" {
        /// Entry time of the openat that opened it (the openat event's
        /// header.time_ns), 0 if it was not opened while watched.
        pub opened_ns: u64,
        /// Successful reads through it.
        pub reads: u64,
        /// Bytes those reads returned.
        pub read_bytes: u64,
        /// Reads that asked for fewer than probe_config.small_size bytes.
        pub small_reads: u64,
        /// Bytes those small reads asked for.
        pub small_read_requested: u64,
        /// Bytes those small reads returned.
        pub small_read_bytes: u64,
        /// FILE_CLASS_*.
        pub class: u16,
        /// The inode's i_mode (file type and permissions).
        pub mode: u16,
        /// Its device (s_dev).
        pub dev: u32,
        /// Its inode number.
        pub ino: u64,
    }
}

shared_struct! {
    /// Key of reopens: one file (device and inode) as one program image of
    /// one process opens it; `mm` (the address of the process's memory
    /// descriptor, new at every exec) keeps a program's opens apart from
    /// those of the program it exec'd.
    pub struct ReopenKey as "reopen_key" {
        pub tgid: u32,
        pub dev: u32,
        pub ino: u64,
        pub mm: u64,
    }
}

shared_struct! {
    /// Value of reopens: how often a process opened one regular file
    /// read-only, so that its repeated opens need not each be sent
    /// (files.h). The openat events that are sent carry `opens` and
    /// `created_ns` (SyscallEvent.aux, AUX_OPEN_TOTAL); the daemon reads
    /// the entries in its sweep for the opens counted since, and deletes
    /// the idle ones.
    pub struct Reopens as "reopens" {
        /// Opens of the file since the entry was made (the sent ones too).
        pub opens: u64,
        /// bpf_ktime_get_ns() when the entry was made: tells an entry from
        /// an earlier one of the same key.
        pub created_ns: u64,
        /// Entry time of the last open sent as an event.
        pub sent_ns: u64,
        /// Entry time of the last open counted.
        pub last_ns: u64,
        /// FILE_CLASS_* of the path the last sent open named: the class
        /// of the opens counted without their path.
        pub class: u16,
        pub _pad: [u16; 3],
    }
}

shared_struct! {
    /// A watched regular file was closed (EVENT_FILE_CLOSE).
    pub struct FileCloseEvent as "file_close_event" {
        pub header: EventHeader,
        pub fd: u32,
        pub _pad: u32,
        pub file: OpenFile,
    }
}

shared_struct! {
    /// A futex wake, noted at its entry (before it can wake anyone).
    pub struct FutexWake as "futex_wake" {
        pub tgid: u32,
        /// The waking thread.
        pub tid: u32,
        /// The futex word it wakes.
        pub uaddr: u64,
        /// bpf_ktime_get_ns() when the wake was entered.
        pub time_ns: u64,
        /// The waking thread's name.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Value of futex_wakes (per CPU): the last FUTEX_WAKE_SLOTS wakes of
    /// watched processes on this CPU, a ring.
    pub struct FutexWakeRing as "futex_wake_ring" {
        /// Slot the next wake goes to (modulo FUTEX_WAKE_SLOTS).
        pub next: u32,
        pub _pad: u32,
        pub wakes: [FutexWake; 64],
    }
}

shared_struct! {
    /// Key of futex_wake_words: a futex word of a process.
    pub struct FutexWordKey as "futex_word_key" {
        pub tgid: u32,
        pub _pad: u32,
        pub uaddr: u64,
    }
}

shared_struct! {
    /// Value of gpu_waiting (key: the thread id): a GPU wait of a target
    /// thread in progress (the outermost of CUDA's waiting calls), entered
    /// at its uprobe and deleted at its return (or the thread's exit), with
    /// the user registers at the function's entry, from which its native
    /// stack is unwound while it waits (`run --stack-captures`).
    pub struct GpuWaiting as "gpu_waiting" {
        pub tgid: u32,
        pub tid: u32,
        /// The call's entry (its gpu_wait_event's header.time_ns).
        pub start_ns: u64,
        /// Its api (an index of gpu_apis' table).
        pub api: u32,
        pub _pad: u32,
        /// User instruction pointer: the function's first instruction.
        pub ip: u64,
        /// User stack pointer (the return address on top).
        pub sp: u64,
        /// User frame pointer (rbp).
        pub bp: u64,
    }
}

shared_struct! {
    /// Key of file_classes: a file-name extension, lower case, no dot.
    pub struct ExtKey as "ext_key" {
        pub ext: [u8; 16],
    }
}

shared_struct! {
    /// Key of target_comms.
    pub struct CommKey as "comm_key" {
        /// Process name, NUL padded.
        pub comm: [u8; 16],
    }
}

shared_struct! {
    /// Start of every ring buffer event.
    pub struct EventHeader as "event_header" {
        /// EVENT_* kind; decides the structure that follows.
        pub kind: u32,
        /// Process id (thread group id).
        pub tgid: u32,
        /// Thread id.
        pub tid: u32,
        /// CPU that produced the event.
        pub cpu: u32,
        /// bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the event; the call's entry for calls.
        pub time_ns: u64,
        /// cgroup v2 id of the thread when the event was made (its `workload`).
        pub cgroup: u64,
    }
}

shared_struct! {
    /// A traced call sent to user space (EVENT_SYSCALL).
    pub struct SyscallEvent as "syscall_event" {
        pub header: EventHeader,
        /// Syscall index.
        pub syscall: u16,
        /// EMIT_* bits: why it was sent, and path flags.
        pub reasons: u16,
        /// Length of the path that follows (EVENT_SYSCALL_PATH), without NUL.
        pub path_len: u16,
        /// FILE_CLASS_* of the file involved (openat's result, the descriptor
        /// of read, close or mmap), when known.
        pub file_class: u16,
        /// Futex waits: the thread whose wake ended the wait, 0 if unknown.
        pub waker_tid: u32,
        /// i_mode of the file involved, 0 if unknown (tells files from
        /// pipes, sockets, devices).
        pub file_mode: u16,
        /// What aux holds: 0 nothing, AUX_TIMESPEC, AUX_OPEN_TOTAL.
        pub aux_kind: u16,
        /// Device of the file involved (its superblock's s_dev), 0 if unknown.
        pub file_dev: u32,
        pub _pad: u32,
        /// Inode number of the file involved, 0 if unknown.
        pub file_ino: u64,
        /// Duration from entry to exit in nanoseconds.
        pub duration_ns: u64,
        /// Raw return value (negative errno on failure).
        pub ret: i64,
        /// Raw arguments at entry.
        pub args: [u64; 6],
        /// Name of the calling thread.
        pub thread_comm: [u8; 16],
        /// Name of the thread-group leader.
        pub process_comm: [u8; 16],
        /// Futex waits: the name of waker_tid's thread, when known.
        pub waker_comm: [u8; 16],
        /// thread_state.aux of the call: a futex wait's timeout (strace
        /// mode), or an openat's reopens totals (AUX_OPEN_TOTAL).
        pub aux: [u64; 2],
    }
}

shared_struct! {
    /// A traced call with the path read at entry (EVENT_SYSCALL_PATH).
    pub struct SyscallPathEvent as "syscall_path_event" {
        pub call: SyscallEvent,
        /// NUL terminated; call.path_len bytes are meaningful.
        pub path: [u8; 256],
    }
}

shared_struct! {
    /// A GPU wait that lasted at least slow_call_ns (EVENT_GPU_WAIT):
    /// header.time_ns is the call's entry.
    pub struct GpuWaitEvent as "gpu_wait_event" {
        pub header: EventHeader,
        /// Its api (an index of gpu_apis' table).
        pub api: u32,
        pub _pad: u32,
        /// From entry to return in nanoseconds.
        pub duration_ns: u64,
        /// Name of the waiting thread.
        pub thread_comm: [u8; 16],
        /// Name of the thread-group leader.
        pub process_comm: [u8; 16],
    }
}

shared_struct! {
    /// Process lifecycle (EVENT_PROCESS_EXEC / FORK / EXIT).
    pub struct ProcessEvent as "process_event" {
        pub header: EventHeader,
        /// Parent process id (fork: the forking process).
        pub parent_tgid: u32,
        /// Exit: the exit code as wait(2) reports it; otherwise 0.
        pub exit_code: i32,
        /// Process name after the event.
        pub comm: [u8; 16],
    }
}

/// Appends every shared structure with its layout asserts.
pub(crate) fn write_c_structs(out: &mut String) {
    write_struct::<ProbeConfig>(out);
    write_struct::<StatsSlot>(out);
    write_struct::<ThreadState>(out);
    write_struct::<StatsKey>(out);
    write_struct::<SyscallStats>(out);
    write_struct::<ErrorKey>(out);
    write_struct::<CommKey>(out);
    write_struct::<FileKey>(out);
    write_struct::<OpenFile>(out);
    write_struct::<ReopenKey>(out);
    write_struct::<Reopens>(out);
    write_struct::<FutexWake>(out);
    write_struct::<FutexWakeRing>(out);
    write_struct::<FutexWordKey>(out);
    write_struct::<InflightWait>(out);
    write_struct::<GpuWaiting>(out);
    write_struct::<ExtKey>(out);
    write_struct::<ThreadTimeKey>(out);
    write_struct::<ThreadTimes>(out);
    write_struct::<ThreadClock>(out);
    write_struct::<GpuWaitKey>(out);
    write_struct::<GpuWaitStats>(out);
    write_struct::<EventHeader>(out);
    write_struct::<SyscallEvent>(out);
    write_struct::<SyscallPathEvent>(out);
    write_struct::<ProcessEvent>(out);
    write_struct::<FileCloseEvent>(out);
    write_struct::<GpuWaitEvent>(out);
}

// The sizes the ring buffer reader relies on. The programs and the daemon
// are built together from these definitions; kind numbers are never reused.
const _: () = assert!(core::mem::size_of::<EventHeader>() == 32);
const _: () = assert!(core::mem::size_of::<SyscallEvent>() == 192);
const _: () = assert!(core::mem::size_of::<SyscallPathEvent>() == 192 + PATH_CAP);
const _: () = assert!(core::mem::size_of::<ProcessEvent>() == 56);
const _: () = assert!(core::mem::size_of::<GpuWaitEvent>() == 80);
const _: () = assert!(core::mem::size_of::<GpuWaiting>() == 48);
const _: () = assert!(core::mem::size_of::<FutexWakeRing>() == 8 + 40 * FUTEX_WAKE_SLOTS as usize);
const _: () = assert!(core::mem::size_of::<SyscallStats>() == 8 * (8 + LATENCY_BUCKETS + SIZE_BUCKETS));
const _: () = assert!(core::mem::size_of::<StatsKey>() == 32);
const _: () = assert!(core::mem::size_of::<ReopenKey>() == 24);
const _: () = assert!(core::mem::size_of::<Reopens>() == 40);
const _: () = assert!(core::mem::size_of::<ErrorKey>() == 32);
const _: () = assert!(core::mem::size_of::<ThreadState>() == 112 + 8 * STATS_SLOT_CACHE as usize + PATH_CAP);
const _: () = assert!(core::mem::size_of::<ProbeConfig>() == 96 + 4 * MAX_GPU_MAJORS);
const _: () = assert!(core::mem::size_of::<ThreadTimeKey>() == 40);
const _: () = assert!(core::mem::size_of::<ThreadTimes>() == 8 * NR_THREAD_STATES as usize);
const _: () = assert!(core::mem::size_of::<ThreadClock>() == 80);
const _: () = assert!(core::mem::size_of::<GpuWaitKey>() == 32);
const _: () = assert!(core::mem::size_of::<GpuWaitStats>() == 8 * (1 + LATENCY_BUCKETS));
const _: () = assert!(core::mem::size_of::<InflightWait>() == 56);
const _: () = assert!(core::mem::offset_of!(ProbeConfig, inflight_waits) == 68 + 4 * MAX_GPU_MAJORS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_sizes_match_constants() {
        assert_eq!(ProbeConfig::zeroed().gpu_majors.len(), MAX_GPU_MAJORS);
        let s = SyscallStats::zeroed();
        assert_eq!(s.latency.len(), LATENCY_BUCKETS);
        let t = ThreadState::zeroed();
        assert_eq!(t.path.len(), PATH_CAP);
        assert_eq!(SyscallPathEvent::zeroed().path.len(), PATH_CAP);
        assert_eq!(StatsKey::zeroed().comm.len(), COMM_LEN);
    }
}
