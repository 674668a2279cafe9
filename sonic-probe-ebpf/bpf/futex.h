/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Who ended a long futex wait? Every wake of a watched process is noted at
 * entry (before it can wake anyone) in futex_wakes, per futex word; when a
 * long wait returns 0, the note on its word newer than the wait's start
 * names the waker.
 */
#pragma once

static __always_inline bool futex_cmd_wakes(__u32 cmd)
{
	return cmd == FUTEX_WAKE || cmd == FUTEX_WAKE_BITSET || cmd == FUTEX_WAKE_OP ||
	       cmd == FUTEX_REQUEUE || cmd == FUTEX_CMP_REQUEUE || cmd == FUTEX_UNLOCK_PI ||
	       cmd == FUTEX_CMP_REQUEUE_PI;
}

/* Commands whose fourth argument points to a struct timespec. */
static __always_inline bool futex_cmd_has_timeout(__u32 cmd)
{
	return cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_LOCK_PI ||
	       cmd == FUTEX_LOCK_PI2 || cmd == FUTEX_WAIT_REQUEUE_PI;
}

static __always_inline void note_wake(__u32 tgid, __u64 uaddr, __u32 tid, __u64 now)
{
	struct futex_wake_key key = { .tgid = tgid, .uaddr = uaddr };
	struct futex_wake w = { .tid = tid, .time_ns = now };

	bpf_get_current_comm(w.comm, sizeof(w.comm));
	bpf_map_update_elem(&futex_wakes, &key, &w, BPF_ANY);
}

/* At futex entry: note a wake on the words it may wake. */
static __always_inline void futex_enter(const struct thread_state *st, __u64 pid_tgid, __u64 now)
{
	__u32 cmd = st->args[1] & SP_FUTEX_CMD_MASK;

	if (!futex_cmd_wakes(cmd))
		return;
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	/* CMP_REQUEUE_PI hands uaddr2's lock to a waiter; WAKE_OP wakes on both. */
	if (cmd == FUTEX_CMP_REQUEUE_PI || cmd == FUTEX_WAKE_OP)
		note_wake(tgid, st->args[4], tid, now);
	if (cmd != FUTEX_CMP_REQUEUE_PI)
		note_wake(tgid, st->args[0], tid, now);
}

/* The wake that ended this wait, NULL if unknown or not a woken wait. */
static __always_inline struct futex_wake *futex_waker(const struct thread_state *st, int idx, long ret,
						       __u32 tgid)
{
	__u64 uaddr;

	if (idx == SP_SYSCALL_FUTEX_WAITV) {
		/* Returns the index of the futex that woke it. */
		struct futex_waitv w;
		if (ret < 0 || ret >= 128 ||
		    bpf_probe_read_user(&w, sizeof(w), (void *)(st->args[0] + ret * sizeof(w))))
			return NULL;
		uaddr = w.uaddr;
	} else {
		__u32 cmd = st->args[1] & SP_FUTEX_CMD_MASK;
		if (ret != 0)
			return NULL;
		if (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_LOCK_PI ||
		    cmd == FUTEX_LOCK_PI2)
			uaddr = st->args[0];
		else if (cmd == FUTEX_WAIT_REQUEUE_PI)
			uaddr = st->args[4];
		else
			return NULL;
	}
	struct futex_wake_key key = { .tgid = tgid, .uaddr = uaddr };
	struct futex_wake *w = bpf_map_lookup_elem(&futex_wakes, &key);
	return w && w->time_ns >= st->start_ns ? w : NULL;
}
