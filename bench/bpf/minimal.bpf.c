// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The least an exact per-call latency histogram costs, for benchmarks: what
 * any tracer must do to time each call of (comm, syscall) exactly, and
 * nothing else. sys_enter keeps the start time in task-local storage;
 * sys_exit reads it back, reads the clock again and adds one to a log2
 * bucket of a per-CPU hash keyed by (syscall, process name). No targets, no
 * files, no sizes, no errors, no events.
 *
 * sonic-probe run does this plus everything its diagnoses need; the gap
 * between the two is what those features cost, and the gap between this and
 * the floor (floor.bpf.c) is what timing calls at all costs on this machine.
 *
 * Built a second time for each piece with that piece removed (build.rs:
 * MINIMAL_WITHOUT_CLOCK, _TASK_STORAGE, _AGGREGATION): the benchmark's
 * breakdown measures what each piece costs as the difference in the
 * kernel's run time. Those copies count nothing meaningful.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "sonic_probe_layout.h"
#include "log2.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct minimal_key {
	__u32 syscall;
	char comm[SP_COMM_LEN];
};

struct minimal_hist {
	__u64 buckets[32];
};

#ifdef MINIMAL_WITHOUT_CLOCK
#define minimal_clock() ((__u64)1)
#else
#define minimal_clock() bpf_ktime_get_ns()
#endif

#ifdef MINIMAL_WITHOUT_TASK_STORAGE
/* Where the start time is kept instead: one slot per CPU, not per thread
 * (the kernel inlines a per-CPU array lookup into a few instructions; one
 * global slot instead would bounce its cache line between the CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} minimal_start_slot SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} minimal_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, struct minimal_key);
	__type(value, struct minimal_hist);
} minimal_latency SEC(".maps");

#ifdef MINIMAL_WITHOUT_AGGREGATION
static volatile __u64 minimal_last_ns;
#endif

SEC("tp_btf/sys_enter")
int BPF_PROG(minimal_enter, struct pt_regs *regs, long id)
{
	if (sp_syscall_index(id) < 0)
		return 0;
#ifdef MINIMAL_WITHOUT_TASK_STORAGE
	__u32 slot = 0;
	__u64 *start = bpf_map_lookup_elem(&minimal_start_slot, &slot);
#else
	__u64 *start = bpf_task_storage_get(&minimal_start, bpf_get_current_task_btf(), 0,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
#endif
	if (start)
		*start = minimal_clock();
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(minimal_exit, struct pt_regs *regs, long ret)
{
	int idx = sp_syscall_index(regs->orig_ax);
	if (idx < 0)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
#ifdef MINIMAL_WITHOUT_TASK_STORAGE
	__u32 slot = 0;
	__u64 *start = bpf_map_lookup_elem(&minimal_start_slot, &slot);
#else
	__u64 *start = bpf_task_storage_get(&minimal_start, task, 0, 0);
#endif
	if (!start || !*start)
		return 0;
	__u64 ns = minimal_clock() - *start;
	*start = 0;

#ifdef MINIMAL_WITHOUT_AGGREGATION
	/* Keep the time computed: the clock reads stay as they are. */
	minimal_last_ns = ns;
	return 0;
#endif

	struct minimal_key key = { .syscall = idx };
	__builtin_memcpy(key.comm, task->group_leader->comm, SP_COMM_LEN);
	struct minimal_hist *h = bpf_map_lookup_elem(&minimal_latency, &key);
	if (!h) {
		struct minimal_hist zero = {};
		bpf_map_update_elem(&minimal_latency, &key, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&minimal_latency, &key);
		if (!h)
			return 0;
	}
	__u32 b = ceil_log2(ns);
	if (b < 32)
		h->buckets[b] += 1;
	return 0;
}
