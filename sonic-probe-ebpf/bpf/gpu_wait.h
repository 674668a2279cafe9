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
 */
#pragma once

/* A waiting call of api `api` starts in the current thread. */
static __always_inline void gpu_enter(__u32 api)
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
	struct gpu_wait_key key = { .api = c->gpu_api };
	key.cgroup = workload_of(cfg, task);
	struct task_struct *leader = KREAD(task, group_leader);
	KREAD_COMM(key.comm, leader);
	struct gpu_wait_stats *s = gpu_wait_stats_of(&key);
	if (!s)
		return;
	__u64 d = now - since;
	__sync_fetch_and_add(&s->total_ns, d);
	__u32 b = latency_bucket(d);
	if (b < SP_LATENCY_BUCKETS)
		__sync_fetch_and_add(&s->latency[b], 1);
}
