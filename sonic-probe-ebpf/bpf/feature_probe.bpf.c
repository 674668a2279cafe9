// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Feature probes: the smallest program that uses one kernel feature the
 * probe's variants depend on (variant.h), on the same kind of program
 * (tp_btf/sys_enter). build.rs compiles this file once per feature with
 * -DSP_PROBE_<FEATURE>; the daemon asks the kernel to load each object
 * (loading verifies; nothing is attached) and takes a refusal as the
 * feature's absence. This asks the kernel what it accepts, whatever its
 * version says: distributions backport BPF features.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#if defined(SP_PROBE_TASK_STORAGE)
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} probe_storage SEC(".maps");
#elif defined(SP_PROBE_PERCPU_LOOKUP)
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} probe_percpu SEC(".maps");
#elif defined(SP_PROBE_RINGBUF)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} probe_ringbuf SEC(".maps");
#elif defined(SP_PROBE_BPF_LOOP)
static long probe_step(__u64 i, void *ctx)
{
	return 0;
}
#endif

SEC("tp_btf/sys_enter")
int BPF_PROG(feature_probe, struct pt_regs *regs, long id)
{
#if defined(SP_PROBE_TASK_BTF)
	/* The current task as a BTF pointer, read with a plain load. */
	return bpf_get_current_task_btf()->pid == 0;
#elif defined(SP_PROBE_TASK_STORAGE)
	__u64 *v = bpf_task_storage_get(&probe_storage, bpf_get_current_task_btf(), 0,
					BPF_LOCAL_STORAGE_GET_F_CREATE);
	return v ? 1 : 0;
#elif defined(SP_PROBE_BPF_LOOP)
	return bpf_loop(1, probe_step, 0, 0);
#elif defined(SP_PROBE_PERCPU_LOOKUP)
	__u32 zero = 0;
	return bpf_map_lookup_percpu_elem(&probe_percpu, &zero, 0) ? 1 : 0;
#elif defined(SP_PROBE_ANCESTOR_CGROUP_ID)
	return bpf_get_current_ancestor_cgroup_id(0) == 0;
#elif defined(SP_PROBE_RINGBUF)
	return bpf_ringbuf_query(&probe_ringbuf, BPF_RB_AVAIL_DATA) ? 1 : 0;
#else
	/* BTF tracepoints themselves: an empty program. */
	return 0;
#endif
}
