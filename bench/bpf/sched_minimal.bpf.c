// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The least an exact accountant of each thread's on-CPU and run-queue time
 * costs per context switch, for the benchmark's comparison with
 * sonic-probe's scheduler programs (sonic-probe-ebpf/bpf/thread_time.h):
 * a clock in task storage per thread, one clock read per switch and per
 * wake-up, the two sums in the thread's own storage, one per-CPU add. No
 * target filter, no names, no block causes: every thread of the host.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct clock {
	__u64 since;
	__u64 on_cpu;
	__u64 runqueue;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct clock);
} clocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} switches SEC(".maps");

SEC("tp_btf/sched_switch")
int BPF_PROG(minimal_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	struct clock *c = bpf_task_storage_get(&clocks, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (c) {
		if (c->since)
			c->on_cpu += now - c->since;
		c->since = now;
	}
	c = bpf_task_storage_get(&clocks, next, 0, 0);
	if (c) {
		if (c->since)
			c->runqueue += now - c->since;
		c->since = now;
	}
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&switches, &zero);
	if (n)
		*n += 1;
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(minimal_wakeup, struct task_struct *p)
{
	struct clock *c = bpf_task_storage_get(&clocks, p, 0, 0);

	if (c)
		c->since = bpf_ktime_get_ns();
	return 0;
}
