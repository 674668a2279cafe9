/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Every map of sonic-probe's programs. Their names are part of the contract
 * with the daemon (sonic-probe-ebpf/src/lib.rs, module maps); their key and
 * value layouts come from the generated sonic_probe_layout.h.
 */
#pragma once

/* Runtime settings, written by the daemon (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_config);
} config SEC(".maps");

/* tgid -> TARGET_* flags */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_TARGET_PROCESSES);
	__type(key, __u32);
	__type(value, __u32);
} target_processes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_TARGET_COMMS);
	__type(key, struct comm_key);
	__type(value, __u32);
} target_comms SEC(".maps");

/* tid -> 1: the threads of TARGET_THREADS_ONLY processes that are traced */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_TARGET_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} target_threads SEC(".maps");

/* cgroup v2 id -> 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_TARGET_CGROUPS);
	__type(key, __u64);
	__type(value, __u32);
} target_cgroups SEC(".maps");

/* Per-thread state between entry and exit; freed with the thread
 * (entry_state.h). */
#if SP_ENTRY_TASK_STORAGE
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} thread_states SEC(".maps");
#else
/* tid -> state, allocated at a thread's first traced call, deleted at its
 * exit (sched_process_exit). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_THREAD_STATES);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_states SEC(".maps");

/* One all-zero thread state new entries are copied from (too big for the
 * BPF stack next to the rest). Never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} zero_thread_state SEC(".maps");
#endif

/* Where each (process name, workload, syscall, variant) is counted: its
 * slot in stats_slots, taken at its first call and kept for the daemon's
 * lifetime (stats.h). Keys without a slot count in syscall_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_STATS_ENTRIES);
	__type(key, struct stats_key);
	__type(value, __u32);
} stats_index SEC(".maps");

/* Exact call statistics, per CPU, one slot per stats_index entry; read by
 * the daemon at scrape time. A per-CPU array is allocated whole at load,
 * one per-CPU allocation per slot: the daemon sizes it (a few hundred
 * slots, probe::stats_slots), and the keys past them go to syscall_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_MAX_STATS_SLOTS);
	__type(key, __u32);
	__type(value, struct syscall_stats);
} stats_slots SEC(".maps");

/* Slots of stats_slots taken: slot -> 1 (stats.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_STATS_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} stats_claims SEC(".maps");

/* How many slots of stats_slots are taken: where to look for a free one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stats_taken SEC(".maps");

/* Exact per-name call statistics of the keys without a slot, per CPU
 * (allocated on use); read by the daemon at scrape time. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_STATS_ENTRIES);
	__type(key, struct stats_key);
	__type(value, struct syscall_stats);
} syscall_stats SEC(".maps");

/* One all-zero value: new syscall_stats entries are copied from it (too
 * big for the 512-byte BPF stack). Never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct syscall_stats);
} zero_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_ERROR_ENTRIES);
	__type(key, struct error_key);
	__type(value, __u64);
} syscall_errors SEC(".maps");

/* Descriptors of watched processes and what was read through them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_OPEN_FILES);
	__type(key, struct file_key);
	__type(value, struct open_file);
} open_files SEC(".maps");

/* How often each watched process opened each regular file read-only
 * (files.h): its repeated opens are counted here, not each sent. Allocated
 * on use (an entry per file a process opens, most never again); the daemon
 * deletes the idle ones. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_REOPENS);
	__type(key, struct reopen_key);
	__type(value, struct reopens);
} reopens SEC(".maps");

/* The files opened lately, by a hash of their reopens key: a slot holds
 * the key's hash in its high 32 bits and the open's time in ms in its low
 * 32 bits (files.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SP_REOPEN_SEEN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} reopen_seen SEC(".maps");

/* What the descriptors that are not regular files are, one 64-bit word per
 * slot, indexed by a hash of (process, descriptor): a read of a socket or
 * a pipe finds its class here with an array index (inlined by the
 * verifier) instead of an open_files lookup (files.h). A cache: a slot
 * another descriptor took, or of an older generation, sends the call to
 * open_files. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SP_FD_CLASS_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} fd_class_cache SEC(".maps");

/* The generation of fd_class_cache's slots: the daemon adds 1 whenever
 * its sweep of open_files finds a process that exec'd or exited, which
 * makes every slot stale at once (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fd_class_generation SEC(".maps");

/* File-name extension -> FILE_CLASS_*, written by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_FILE_CLASS_EXTS);
	__type(key, struct ext_key);
	__type(value, __u32);
} file_classes SEC(".maps");

/* Who ended a long wait (futex.h). */
#if SP_WAKER_PERCPU
/* Recent futex wakes, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct futex_wake_ring);
} futex_wakes SEC(".maps");
#else
/* The last wake of each futex word of a watched process. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SP_MAX_FUTEX_WAKE_WORDS);
	__type(key, struct futex_word_key);
	__type(value, struct futex_wake);
} futex_wake_words SEC(".maps");
#endif

/* tid -> the futex wait it is in now (futex.h), only with
 * probe_config.inflight_waits: the daemon looks for stalls while they last
 * and captures the stalled process's stacks. Preallocated: inserted from a
 * tracepoint, where an allocation may fail. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_INFLIGHT_WAITS);
	__type(key, __u32);
	__type(value, struct inflight_wait);
} futex_waiting SEC(".maps");

/* tid -> the GPU wait it is in now (gpu_wait.h), with the same
 * probe_config.inflight_waits: the daemon captures the Python line that
 * waits, while it waits. Preallocated, as gpu_waits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_GPU_WAITING);
	__type(key, __u32);
	__type(value, struct gpu_waiting);
} gpu_waiting SEC(".maps");

/* ---- where watched threads' time goes (thread_time.h) */

/* Each thread's scheduler clock: task storage, or a hash keyed by thread
 * id, preallocated (entered from sched_switch and sched_wakeup_new, where
 * allocating memory is unsafe on the kernels that use it), deleted at the
 * thread's last switch. */
#if SP_ENTRY_TASK_STORAGE
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_clock);
} thread_clocks SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_THREAD_CLOCKS);
	__type(key, __u32);
	__type(value, struct thread_clock);
} thread_clocks SEC(".maps");
#endif

/* (workload, process name, thread name) -> its slot of thread_time_slots,
 * taken at its first transition and kept for the daemon's lifetime.
 * Preallocated: entered from the scheduler's tracepoints. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_THREAD_TIME_SLOTS);
	__type(key, struct thread_time_key);
	__type(value, __u32);
} thread_time_index SEC(".maps");

/* Nanoseconds per THREAD_* state, per CPU, one slot per thread_time_index
 * entry (slot 0: the overflow slot); read by the daemon at scrape time.
 * The daemon sizes it (probe::thread_time_slots). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_MAX_THREAD_TIME_SLOTS);
	__type(key, __u32);
	__type(value, struct thread_times);
} thread_time_slots SEC(".maps");

/* Slots of thread_time_slots taken: slot -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_THREAD_TIME_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} thread_time_claims SEC(".maps");

/* How many slots of thread_time_slots are taken (slot 0 aside). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} thread_time_taken SEC(".maps");

/* COUNTER_* -> count, per CPU: drops, overflows, events sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Exact GPU waits per (workload, process name, api), added to atomically
 * (the daemon enters each api's overflow entry): gpu_wait.h. Preallocated
 * and not per CPU: a kprobe-type program (a uprobe) using a hash
 * allocated at run time makes 5.10's verifier warn in the kernel log
 * ("trace type BPF program uses run-time allocation"), and per-CPU values
 * preallocated cost keys x CPUs; GPU waits are rare enough for atomics. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_GPU_WAIT_KEYS);
	__type(key, struct gpu_wait_key);
	__type(value, struct gpu_wait_stats);
} gpu_waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SP_DEFAULT_RINGBUF_BYTES);
} events SEC(".maps");
