/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Who ended a long futex wait? Every wake of a watched process is noted at
 * its entry (before it can wake anyone). Where the kernel has bpf_loop and
 * per-CPU lookups of other CPUs' elements, in this CPU's ring of recent
 * wakes: a few stores, no hashing, no lock, because wakes are frequent;
 * only a wait that lasted long enough to be reported searches the rings of
 * all CPUs for the latest wake of its futex word since it started.
 * Elsewhere (variant.h) the last wake of each word goes into an LRU hash,
 * and a long wait looks its word up there.
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

/* Commands that block until woken (or the lock is had): the waits. */
static __always_inline bool futex_cmd_waits(__u32 cmd)
{
	return cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_LOCK_PI ||
	       cmd == FUTEX_LOCK_PI2 || cmd == FUTEX_WAIT_REQUEUE_PI;
}

/* Whether this call is a wait futex_waiting keeps (futex_waitv always is). */
static __always_inline bool is_futex_wait(int idx, const struct thread_state *st)
{
	if (idx == SP_SYSCALL_FUTEX_WAITV)
		return true;
	return idx == SP_SYSCALL_FUTEX && futex_cmd_waits(st->args[1] & SP_FUTEX_CMD_MASK);
}

/* At a wait's entry, with captures on: enter it in futex_waiting with the
 * user registers of the system call, so that the daemon can see it while
 * it lasts and unwind the waiting thread's stack from them. The registers
 * are those of the tracepoint's pt_regs (the user context saved at entry),
 * read like the arguments. */
static __always_inline void inflight_enter(const struct pt_regs *regs, const struct thread_state *st, int idx,
					   __u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;
	struct inflight_wait w = {
		.tgid = pid_tgid >> 32,
		.tid = tid,
		.start_ns = st->start_ns,
		.uaddr = st->args[0],
		.op = idx == SP_SYSCALL_FUTEX ? (__u32)st->args[1] : 0,
		.syscall = idx,
		.ip = regs->ip,
		.sp = regs->sp,
		.bp = regs->bp,
	};

	if (bpf_map_update_elem(&futex_waiting, &tid, &w, BPF_ANY))
		count(SP_COUNTER_DROP_INFLIGHT_WAITS);
}

/* Whether thread pid_tgid's waits are entered (and so removed at exit).
 * A SIGHUP that narrows the mode leaves the entries of waits then in
 * progress to the thread's exit (sched_process_exit); the daemon judges
 * every entry by the current request-thread rule anyway. */
static __always_inline bool inflight_kept(const struct probe_config *cfg, __u64 pid_tgid)
{
	if (cfg->inflight_waits == SP_INFLIGHT_ALL_THREADS)
		return true;
	return cfg->inflight_waits == SP_INFLIGHT_MAIN_THREADS && (__u32)pid_tgid == (__u32)(pid_tgid >> 32);
}

/* At a wait's exit (or its thread's): it is over. */
static __always_inline void inflight_exit(__u32 tid)
{
	bpf_map_delete_elem(&futex_waiting, &tid);
}

#if SP_WAKER_PERCPU
static __always_inline void note_wake(const struct task_struct *task, __u64 pid_tgid, __u64 uaddr, __u64 now)
{
	__u32 zero = 0;
	struct futex_wake_ring *ring = bpf_map_lookup_elem(&futex_wakes, &zero);
	if (!ring)
		return;
	__u32 i = ring->next++ & (SP_FUTEX_WAKE_SLOTS - 1);
	struct futex_wake *w = &ring->wakes[i];

	w->tgid = pid_tgid >> 32;
	w->tid = (__u32)pid_tgid;
	w->uaddr = uaddr;
	w->time_ns = now;
	KREAD_ARRAY(w->comm, task, comm);
}
#else
static __always_inline void note_wake(const struct task_struct *task, __u64 pid_tgid, __u64 uaddr, __u64 now)
{
	struct futex_word_key key = { .tgid = pid_tgid >> 32, .uaddr = uaddr };
	struct futex_wake *w = bpf_map_lookup_elem(&futex_wake_words, &key);

	/* A word woken before (a lock in use): overwrite in place, a few
	 * stores instead of an update's allocation and locking. Two CPUs
	 * waking the same word at once may mix their fields; the waker is a
	 * hint either way. */
	if (w) {
		w->tid = (__u32)pid_tgid;
		w->time_ns = now;
		KREAD_ARRAY(w->comm, task, comm);
		return;
	}
	struct futex_wake fresh = { .tgid = key.tgid, .tid = (__u32)pid_tgid, .uaddr = uaddr, .time_ns = now };
	KREAD_ARRAY(fresh.comm, task, comm);
	bpf_map_update_elem(&futex_wake_words, &key, &fresh, BPF_ANY);
}
#endif

/* At futex entry: note a wake on the words it may wake. */
static __always_inline void futex_enter(const struct thread_state *st, const struct task_struct *task,
					__u64 pid_tgid, __u64 now)
{
	__u32 cmd = st->args[1] & SP_FUTEX_CMD_MASK;

	if (!futex_cmd_wakes(cmd))
		return;
	/* CMP_REQUEUE_PI hands uaddr2's lock to a waiter; WAKE_OP wakes on both. */
	if (cmd == FUTEX_CMP_REQUEUE_PI || cmd == FUTEX_WAKE_OP)
		note_wake(task, pid_tgid, st->args[4], now);
	if (cmd != FUTEX_CMP_REQUEUE_PI)
		note_wake(task, pid_tgid, st->args[0], now);
}

#if SP_WAKER_PERCPU
/* What a long wait looks for, and the best match so far: none while
 * best.time_ns is 0 (a match's is at least `since`, the wait's start).
 * Not a separate found flag: the verifier knew it 0 or 1 at each slot
 * and walked the rest of the search once for each (sys_exit verified
 * 193,298 instructions with it, 179,147 without). */
struct waker_search {
	__u32 tgid;
	__u32 _pad;
	__u64 uaddr;
	__u64 since;
	struct futex_wake best;
};

static long search_cpu(__u64 cpu, void *ctx)
{
	struct waker_search *s = ctx;
	__u32 zero = 0;
	struct futex_wake_ring *ring = bpf_map_lookup_percpu_elem(&futex_wakes, &zero, cpu);

	if (!ring)
		return 1; /* past the last CPU */
	for (int i = 0; i < SP_FUTEX_WAKE_SLOTS; i++) {
		struct futex_wake *w = &ring->wakes[i];
		if (w->tgid == s->tgid && w->uaddr == s->uaddr && w->time_ns >= s->since &&
		    w->time_ns > s->best.time_ns)
			s->best = *w;
	}
	return 0;
}

/* The latest wake of (tgid, uaddr) since `since`, from every CPU's ring. */
static __always_inline bool find_wake(const struct probe_config *cfg, __u32 tgid, __u64 uaddr, __u64 since,
				      struct futex_wake *out)
{
	struct waker_search s = { .tgid = tgid, .uaddr = uaddr, .since = since };
	__u32 cpus = cfg->nr_cpus < SP_MAX_CPUS ? cfg->nr_cpus : SP_MAX_CPUS;

	bpf_loop(cpus, search_cpu, &s, 0);
	if (!s.best.time_ns)
		return false;
	*out = s.best;
	return true;
}
#else
/* The last wake of (tgid, uaddr), if it came since `since`. */
static __always_inline bool find_wake(const struct probe_config *cfg, __u32 tgid, __u64 uaddr, __u64 since,
				      struct futex_wake *out)
{
	struct futex_word_key key = { .tgid = tgid, .uaddr = uaddr };
	struct futex_wake *w = bpf_map_lookup_elem(&futex_wake_words, &key);

	if (!w || w->time_ns < since)
		return false;
	*out = *w;
	return true;
}
#endif

/* Fills `out` with the wake that ended this wait; false if unknown or not a
 * woken wait. */
static __always_inline bool futex_waker(const struct probe_config *cfg, const struct thread_state *st, int idx,
					long ret, __u32 tgid, struct futex_wake *out)
{
	__u64 uaddr;

	if (idx == SP_SYSCALL_FUTEX_WAITV) {
		/* Returns the index of the futex that woke it. */
		struct futex_waitv w;
		if (ret < 0 || ret >= 128 ||
		    bpf_probe_read_user(&w, sizeof(w), (void *)(st->args[0] + ret * sizeof(w))))
			return false;
		uaddr = w.uaddr;
	} else {
		__u32 cmd = st->args[1] & SP_FUTEX_CMD_MASK;
		if (ret != 0)
			return false;
		if (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET || cmd == FUTEX_LOCK_PI ||
		    cmd == FUTEX_LOCK_PI2)
			uaddr = st->args[0];
		else if (cmd == FUTEX_WAIT_REQUEUE_PI)
			uaddr = st->args[4];
		else
			return false;
	}
	return find_wake(cfg, tgid, uaddr, st->start_ns, out);
}
