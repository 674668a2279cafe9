/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Where a call's entry state (start time, arguments, path) waits for its
 * exit: task-local storage where the kernel lets tracing programs use it,
 * else a hash keyed by thread id (variant.h). Both are freed with the
 * thread; a state that cannot be had is counted (DROP_THREAD_STATE) and
 * the call is not measured.
 */
#pragma once

#if SP_ENTRY_TASK_STORAGE
static __always_inline struct thread_state *entry_state_get(struct task_struct *task, __u64 pid_tgid)
{
	return bpf_task_storage_get(&thread_states, task, 0, 0);
}

static __always_inline struct thread_state *entry_state_create(struct task_struct *task, __u64 pid_tgid)
{
	return bpf_task_storage_get(&thread_states, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* Task storage goes with the task. */
static __always_inline void entry_state_free(__u32 tid)
{
}
#else
static __always_inline struct thread_state *entry_state_get(struct task_struct *task, __u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;

	return bpf_map_lookup_elem(&thread_states, &tid);
}

static __always_inline struct thread_state *entry_state_create(struct task_struct *task, __u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;
	struct thread_state *st = bpf_map_lookup_elem(&thread_states, &tid);

	if (st)
		return st;
	__u32 zero_idx = 0;
	struct thread_state *zero = bpf_map_lookup_elem(&zero_thread_state, &zero_idx);
	if (!zero)
		return NULL;
	/* Only this thread creates its own entry: NOEXIST cannot race. */
	bpf_map_update_elem(&thread_states, &tid, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&thread_states, &tid);
}

static __always_inline void entry_state_free(__u32 tid)
{
	bpf_map_delete_elem(&thread_states, &tid);
}
#endif
