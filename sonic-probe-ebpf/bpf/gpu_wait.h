/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The time a watched thread waits for the GPU inside CUDA's waiting calls
 * (sonic-probe-common's gpu_apis table: the synchronizes and synchronous
 * copies of libcudart and libcuda), through uprobes at their entry and
 * uretprobes at their return.
 *
 * Why uprobes: with CUDA's default scheduling a waiting thread spins on a
 * CPU inside the driver library, making no system call, so the syscall
 * and scheduler programs see a thread "on CPU". The thread is inside one
 * of a handful of functions for exactly as long as it waits.
 *
 * The entry notes in the thread's scheduler clock (thread_time.h) when
 * and which call began, and accounts the clock's time until then, so that
 * from now on its time on CPU or blocked is THREAD_GPU (clock_account);
 * the return counts the wait in gpu_waits (per workload, process name and
 * api, a log2 histogram, added to atomically) and accounts the GPU state up to it. Only the
 * outermost call counts: the runtime's cudaStreamSynchronize calls the
 * driver's cuStreamSynchronize, which is the same wait (gpu_depth).
 * Launch calls are never probed: a uprobe costs a trap, and they are far
 * too frequent for it.
 *
 * With stack captures on (probe_config.inflight_waits, as futex waits),
 * the wait is also entered in gpu_waiting while it lasts, with the user
 * registers at the function's entry: the daemon reads the waiting
 * thread's Python line then. A wait of at least slow_call_ns is sent as a
 * gpu_wait_event at its return (one long wait is a finding of its own).
 */
#pragma once

/* A waiting call of api `api` starts in the current thread; regs: the
 * user registers at the function's entry. */
static __always_inline void gpu_enter(const struct pt_regs *regs, __u32 api)
{
	struct probe_config *cfg = get_config();
	if (!cfg)
		return;
	struct task_struct *task = current_task();
	if (!is_target_thread(cfg, task_pid_tgid(task)))
		return;
	struct thread_clock *c = current_clock(true);
	if (!c) {
		count(SP_COUNTER_DROP_GPU_WAITS);
		return;
	}
	if (c->gpu_depth) {
		/* Nested (the runtime's call in the driver's): the same wait. */
		if (c->gpu_depth < SP_MAX_GPU_DEPTH)
			c->gpu_depth++;
		return;
	}
	__u64 now = bpf_ktime_get_ns();
	/* Running until now: on CPU (the thread runs this). A kernel that
	 * preempts programs (preempt=full) may have switched the thread out
	 * and in since now was read: its clock is then past now, and stays. */
	if (c->since_ns && c->state == SP_THREAD_ON_CPU && now >= c->since_ns) {
		clock_account(c, now);
		c->since_ns = now;
	}
	c->gpu_depth = 1;
	c->gpu_api = api;
	c->gpu_since_ns = now;
	__u64 pid_tgid = task_pid_tgid(task);
	if (cfg->inflight_waits && inflight_kept(cfg, pid_tgid)) {
		__u32 tid = (__u32)pid_tgid;
		struct gpu_waiting w = {
			.tgid = pid_tgid >> 32,
			.tid = tid,
			.start_ns = now,
			.api = api,
			.ip = regs->ip,
			.sp = regs->sp,
			.bp = regs->bp,
		};
		if (bpf_map_update_elem(&gpu_waiting, &tid, &w, BPF_ANY))
			count(SP_COUNTER_DROP_GPU_WAITING);
	}
}

/* The counts of key: its entry, made now if new; the api's overflow entry
 * (entered by the daemon) when the map is full. */
static __always_inline struct gpu_wait_stats *gpu_wait_stats_of(struct gpu_wait_key *key)
{
	struct gpu_wait_stats *s = bpf_map_lookup_elem(&gpu_waits, key);
	if (s)
		return s;
	struct gpu_wait_stats zero = {};
	bpf_map_update_elem(&gpu_waits, key, &zero, BPF_NOEXIST);
	s = bpf_map_lookup_elem(&gpu_waits, key);
	if (s)
		return s;
	struct gpu_wait_key overflow = { .api = key->api };
	s = bpf_map_lookup_elem(&gpu_waits, &overflow);
	count(s ? SP_COUNTER_GPU_WAIT_OVERFLOW : SP_COUNTER_DROP_GPU_WAITS);
	return s;
}

/* A long wait (at least slow_call_ns) of key's api, which began at since. */
static __always_inline void emit_gpu_wait(const struct probe_config *cfg, struct task_struct *task, __u64 pid_tgid,
					  const struct gpu_wait_key *key, __u64 since, __u64 d)
{
	count(SP_COUNTER_EVENTS_SENT);
	struct gpu_wait_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(SP_COUNTER_DROP_RINGBUF);
		return;
	}
	fill_header(&ev->header, SP_EVENT_GPU_WAIT, pid_tgid, since, key->cgroup);
	ev->api = key->api;
	ev->_pad = 0;
	ev->duration_ns = d;
	read_comm((char *)ev->thread_comm, task);
	__builtin_memcpy(ev->process_comm, key->comm, SP_COMM_LEN);
	bpf_ringbuf_submit(ev, submit_flags(cfg));
}

/* A waiting call returns in the current thread. */
static __always_inline void gpu_return(void)
{
	struct thread_clock *c = current_clock(false);
	if (!c || !c->gpu_depth)
		return; /* its entry was not seen (the probes came after it) */
	if (c->gpu_depth > 1) {
		c->gpu_depth--;
		return;
	}
	__u64 now = bpf_ktime_get_ns();
	/* The GPU state until now (gpu_depth still 1); as in gpu_enter. */
	if (c->since_ns && c->state == SP_THREAD_ON_CPU && now >= c->since_ns) {
		clock_account(c, now);
		c->since_ns = now;
	}
	c->gpu_depth = 0;
	__u64 since = c->gpu_since_ns;
	c->gpu_since_ns = 0;
	if (!since || now < since)
		return;

	struct probe_config *cfg = get_config();
	if (!cfg)
		return;
	struct task_struct *task = current_task();
	__u64 pid_tgid = task_pid_tgid(task);
	if (cfg->inflight_waits && inflight_kept(cfg, pid_tgid)) {
		__u32 tid = (__u32)pid_tgid;
		bpf_map_delete_elem(&gpu_waiting, &tid);
	}
	struct gpu_wait_key key = { .api = c->gpu_api };
	key.cgroup = workload_of(cfg, task);
	struct task_struct *leader = KREAD(task, group_leader);
	KREAD_COMM(key.comm, leader);
	__u64 d = now - since;
	if (cfg->slow_call_ns && d >= cfg->slow_call_ns)
		emit_gpu_wait(cfg, task, pid_tgid, &key, since, d);
	struct gpu_wait_stats *s = gpu_wait_stats_of(&key);
	if (!s)
		return;
	__sync_fetch_and_add(&s->total_ns, d);
	__u32 b = latency_bucket(d);
	if (b < SP_LATENCY_BUCKETS)
		__sync_fetch_and_add(&s->latency[b], 1);
}
