/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Which variant of each kernel-dependent piece this object is built as.
 *
 * Why: the fast path uses features of newer kernels (task-local storage
 * from tracing programs and bpf_get_current_task_btf since 5.11-5.13,
 * bpf_loop since 5.17, bpf_map_lookup_percpu_elem since 5.19), but GPU
 * nodes run 5.10 and 5.15, and RHEL backports some of these to "5.14".
 * build.rs compiles this source once per valid combination of the
 * switches below; the daemon probes what the running kernel accepts and
 * loads the object that fits (sonic-probe/src/probe/features.rs). Every
 * variant keeps the same promises: exact counts, the same events, every
 * loss counted.
 *
 * SP_TASK_BTF            1: the current task as a BTF pointer, fields read
 *                        with plain loads, and --cgroup targets matched
 *                        with bpf_get_current_ancestor_cgroup_id (tracing
 *                        programs have it after 5.10); 0:
 *                        bpf_get_current_task() and CO-RE reads through
 *                        bpf_probe_read_kernel, and a walk up the cgroup
 *                        tree (targets.h).
 * SP_ENTRY_TASK_STORAGE  1: a call's entry state in task-local storage;
 *                        0: in a hash keyed by thread id, deleted when
 *                        the thread exits (needs SP_TASK_BTF for 1).
 * SP_WAKER_PERCPU        1: wakes noted in per-CPU rings, searched with
 *                        bpf_loop and per-CPU lookups when a wait was
 *                        long; 0: the last wake of each futex word in an
 *                        LRU hash, one lookup when a wait was long.
 */
#pragma once

#ifndef SP_TASK_BTF
#define SP_TASK_BTF 1
#endif
#ifndef SP_ENTRY_TASK_STORAGE
#define SP_ENTRY_TASK_STORAGE 1
#endif
#ifndef SP_WAKER_PERCPU
#define SP_WAKER_PERCPU 1
#endif

#if SP_ENTRY_TASK_STORAGE && !SP_TASK_BTF
#error "task storage needs the task as a BTF pointer"
#endif

#if SP_TASK_BTF
/* A field of a kernel object reached from the current task. */
#define KREAD(p, field) ((p)->field)
/* An array field (a name) of such an object, copied. */
#define KREAD_ARRAY(dst, p, field) __builtin_memcpy(dst, (p)->field, sizeof((p)->field))
/* A task's name as an aggregation key, copied whole (no helper call).
 * Where a kernel leaves an earlier name's bytes after the NUL, one name
 * may take a few kernel entries; the daemon sums them under one label. */
#define KREAD_COMM(dst, task) KREAD_ARRAY(dst, task, comm)

static __always_inline struct task_struct *current_task(void)
{
	return bpf_get_current_task_btf();
}

static __always_inline __u64 task_pid_tgid(const struct task_struct *task)
{
	return ((__u64)task->tgid << 32) | (__u32)task->pid;
}
#else
#define KREAD(p, field) BPF_CORE_READ(p, field)
#define KREAD_ARRAY(dst, p, field) bpf_core_read(dst, sizeof((p)->field), &(p)->field)
/* Old kernels leave an earlier name's bytes after comm's NUL (common.h):
 * read up to the NUL into the zeroed key. */
#define KREAD_COMM(dst, task) bpf_core_read_str(dst, sizeof((task)->comm), &(task)->comm)

static __always_inline struct task_struct *current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

/* Only ever called for the current task. */
static __always_inline __u64 task_pid_tgid(const struct task_struct *task)
{
	return bpf_get_current_pid_tgid();
}
#endif
