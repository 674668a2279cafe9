// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * sonic-probe's kernel side: raw_syscalls sys_enter/sys_exit as BTF
 * tracepoints, plus process fork/exec/exit.
 *
 * Why this shape: raw tracepoints fire for every system call on the host, so
 * the common path must return within a few instructions. sys_enter returns at
 * once unless the call is one of ours (a switch on the number), then unless
 * the process is a target (an array lookup, then one hash lookup). For a
 * target it stores the start time and arguments in task-local storage.
 * sys_exit looks the call up there, then counts it *in the kernel*, exactly,
 * in per-CPU maps the daemon reads (syscall_stats, syscall_errors). Only the
 * calls that need per-event handling in user space (paths, slow calls,
 * errors, large mappings, strace mode) go through the ring buffer, and every
 * event lost there is counted.
 *
 * The layouts (struct stats_key, struct syscall_event, ...) come from the
 * generated sonic_probe_layout.h: see sonic-probe-common.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sonic_probe_layout.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* ---- maps: names are part of the contract with the daemon (probe/maps.rs) */

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

/* cgroup v2 id -> 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_TARGET_CGROUPS);
	__type(key, __u64);
	__type(value, __u32);
} target_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} thread_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_STATS_ENTRIES);
	__type(key, struct stats_key);
	__type(value, struct syscall_stats);
} syscall_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, SP_MAX_ERROR_ENTRIES);
	__type(key, struct error_key);
	__type(value, __u64);
} syscall_errors SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SP_DEFAULT_RINGBUF_BYTES);
} events SEC(".maps");

/* ---- small helpers */

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += 1;
}

static __always_inline struct probe_config *get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&config, &zero);
}

static __always_inline bool in_target_cgroup(__u32 levels)
{
	for (int level = 0; level <= SP_MAX_CGROUP_LEVEL; level++) {
		if (!(levels & (1u << level)))
			continue;
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (id && bpf_map_lookup_elem(&target_cgroups, &id))
			return true;
	}
	return false;
}

/* Is the current process traced? Cheapest checks first. */
static __always_inline bool is_target(const struct probe_config *cfg, __u32 tgid)
{
	if (tgid == cfg->self_tgid)
		return false;
	if (!(cfg->filter_flags & SP_FILTER_TARGETS))
		return true;
	if (bpf_map_lookup_elem(&target_processes, &tgid))
		return true;
	if (cfg->filter_flags & SP_FILTER_CGROUPS)
		return in_target_cgroup(cfg->cgroup_levels);
	return false;
}

static __always_inline void read_comm(char dst[SP_COMM_LEN], const struct task_struct *task)
{
	bpf_probe_read_kernel(dst, SP_COMM_LEN, task->comm);
}

static __always_inline void fill_header(struct event_header *h, __u32 kind, __u64 pid_tgid, __u64 time_ns)
{
	h->kind = kind;
	h->tgid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->cpu = bpf_get_smp_processor_id();
	h->time_ns = time_ns;
}

/* ---- system calls */

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	int idx = sp_syscall_index(id);
	if (idx < 0)
		return 0;

	struct probe_config *cfg = get_config();
	if (!cfg)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(cfg, pid_tgid >> 32))
		return 0;

	struct task_struct *task = bpf_get_current_task_btf();
	/* A 32-bit call uses the i386 numbering: not the call we think. */
	if (task->thread_info.status & TS_COMPAT)
		return 0;

	struct thread_state *st =
		bpf_task_storage_get(&thread_states, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		count(SP_COUNTER_DROP_THREAD_STATE);
		return 0;
	}

	st->args[0] = regs->di;
	st->args[1] = regs->si;
	st->args[2] = regs->dx;
	st->args[3] = regs->r10;
	st->args[4] = regs->r8;
	st->args[5] = regs->r9;
	st->syscall = idx;
	st->path_len = 0;
	st->path_flags = 0;

	int parg = sp_syscall_path_arg(idx);
	if (parg >= 0 && parg < 6) {
		long n = bpf_probe_read_user_str(st->path, sizeof(st->path),
						 (const void *)st->args[parg]);
		if (n <= 0) {
			st->path[0] = 0;
			st->path_flags = SP_EMIT_PATH_UNREADABLE;
		} else {
			st->path_len = n - 1;
			if (n == sizeof(st->path))
				st->path_flags = SP_EMIT_PATH_TRUNCATED;
		}
	}

	st->active = 1;
	/* Last, so that our own work above is not part of the call's time. */
	st->start_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline __u32 latency_bucket(__u64 ns)
{
	if (ns <= 1)
		return 0;
	/* ceil(log2(ns)) = floor(log2(ns - 1)) + 1 */
	__u64 v = ns - 1;
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	r += 1;
	if (r <= SP_LATENCY_MIN_SHIFT)
		return 0;
	r -= SP_LATENCY_MIN_SHIFT;
	return r < SP_LATENCY_BUCKETS - 1 ? r : SP_LATENCY_BUCKETS - 1;
}

static __always_inline void add_stats(struct stats_key *key, __u64 dur, bool failed, __u64 bytes)
{
	struct syscall_stats *s = bpf_map_lookup_elem(&syscall_stats, key);

	if (!s) {
		struct syscall_stats zero = {};

		bpf_map_update_elem(&syscall_stats, key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&syscall_stats, key);
		if (!s) {
			/* Map full: the daemon's pre-made overflow entry keeps totals exact. */
			struct stats_key overflow = { .syscall = key->syscall };

			s = bpf_map_lookup_elem(&syscall_stats, &overflow);
			if (!s) {
				count(SP_COUNTER_DROP_STATS);
				return;
			}
			count(SP_COUNTER_STATS_OVERFLOW);
		}
	}
	s->total_ns += dur;
	s->bytes += bytes;
	if (failed)
		s->errors += 1;
	__u32 b = latency_bucket(dur);
	if (b < SP_LATENCY_BUCKETS)
		s->latency[b] += 1;
}

static __always_inline void add_error(const struct stats_key *skey, long ret)
{
	struct error_key key = {
		.tgid = skey->tgid,
		.syscall = skey->syscall,
		.errno = (__u16)(-ret),
	};
	__builtin_memcpy(key.comm, skey->comm, SP_COMM_LEN);

	__u64 *c = bpf_map_lookup_elem(&syscall_errors, &key);
	if (!c) {
		__u64 zero = 0;

		bpf_map_update_elem(&syscall_errors, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&syscall_errors, &key);
		if (!c) {
			struct error_key overflow = { .syscall = skey->syscall };

			c = bpf_map_lookup_elem(&syscall_errors, &overflow);
			if (!c) {
				count(SP_COUNTER_DROP_ERRORS);
				return;
			}
			count(SP_COUNTER_ERRORS_OVERFLOW);
		}
	}
	*c += 1;
}

static __always_inline void fill_call(struct syscall_event *ev, const struct thread_state *st,
				      const struct stats_key *key, __u64 pid_tgid, __u16 reasons,
				      __u64 dur, long ret)
{
	fill_header(&ev->header, SP_EVENT_SYSCALL, pid_tgid, st->start_ns);
	ev->syscall = st->syscall;
	ev->reasons = reasons;
	ev->path_len = 0;
	ev->_pad = 0;
	ev->duration_ns = dur;
	ev->ret = ret;
	for (int i = 0; i < 6; i++)
		ev->args[i] = st->args[i];
	bpf_get_current_comm(ev->thread_comm, SP_COMM_LEN);
	__builtin_memcpy(ev->process_comm, key->comm, SP_COMM_LEN);
}

static __always_inline void emit_call(const struct thread_state *st, const struct stats_key *key,
				      __u64 pid_tgid, __u16 reasons, __u64 dur, long ret)
{
	count(SP_COUNTER_EVENTS_SENT);
	if (reasons & SP_EMIT_PATH) {
		struct syscall_path_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
		if (!ev) {
			count(SP_COUNTER_DROP_RINGBUF);
			return;
		}
		fill_call(&ev->call, st, key, pid_tgid, reasons | st->path_flags, dur, ret);
		ev->call.header.kind = SP_EVENT_SYSCALL_PATH;
		ev->call.path_len = st->path_len;
		__builtin_memcpy(ev->path, st->path, SP_PATH_CAP);
		bpf_ringbuf_submit(ev, 0);
	} else {
		struct syscall_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
		if (!ev) {
			count(SP_COUNTER_DROP_RINGBUF);
			return;
		}
		fill_call(ev, st, key, pid_tgid, reasons, dur, ret);
		bpf_ringbuf_submit(ev, 0);
	}
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	int idx = sp_syscall_index(regs->orig_ax);
	if (idx < 0)
		return 0;

	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *st = bpf_task_storage_get(&thread_states, task, 0, 0);
	if (!st || !st->active || st->syscall != idx)
		return 0;
	st->active = 0;

	__u64 dur = bpf_ktime_get_ns() - st->start_ns;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	bool failed = ret < 0 && ret >= -4095;

	struct stats_key key = {
		.tgid = pid_tgid >> 32,
		.syscall = idx,
		.variant = idx == SP_SYSCALL_FUTEX ? (st->args[1] & SP_FUTEX_CMD_MASK) : 0,
	};
	read_comm((char *)key.comm, task->group_leader);

	__u64 bytes = 0;
	int sarg = sp_syscall_size_arg(idx);
	__u64 size = sarg >= 0 && sarg < 6 ? st->args[sarg] : 0;
	if (sp_syscall_bytes_from_ret(idx) && ret > 0)
		bytes = ret;
	else if (sp_syscall_bytes_from_size(idx) && !failed)
		bytes = size;

	add_stats(&key, dur, failed, bytes);
	if (failed)
		add_error(&key, ret);

	struct probe_config *cfg = get_config();
	if (!cfg)
		return 0;
	__u16 reasons = 0;
	if (cfg->emit_all)
		reasons |= SP_EMIT_TRACE;
	if (sp_syscall_path_arg(idx) >= 0)
		reasons |= SP_EMIT_PATH;
	if (cfg->slow_call_ns && dur >= cfg->slow_call_ns)
		reasons |= SP_EMIT_SLOW;
	if (failed && (cfg->error_event_mask & (1u << idx)))
		reasons |= SP_EMIT_ERROR;
	if (sarg >= 0 && cfg->large_map_bytes && size >= cfg->large_map_bytes)
		reasons |= SP_EMIT_LARGE_MAP;
	if (reasons)
		emit_call(st, &key, pid_tgid, reasons, dur, ret);
	return 0;
}

/* ---- process lifecycle */

static __always_inline void emit_process(__u32 kind, __u64 pid_tgid, __u32 parent_tgid,
					 int exit_code, const struct task_struct *named)
{
	count(SP_COUNTER_EVENTS_SENT);
	struct process_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(SP_COUNTER_DROP_RINGBUF);
		return;
	}
	fill_header(&ev->header, kind, pid_tgid, bpf_ktime_get_ns());
	ev->parent_tgid = parent_tgid;
	ev->exit_code = exit_code;
	read_comm((char *)ev->comm, named);
	bpf_ringbuf_submit(ev, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	if (ptgid == ctgid)
		return 0; /* a new thread, not a new process */

	struct probe_config *cfg = get_config();
	if (!cfg || !is_target(cfg, ptgid))
		return 0;

	__u32 *pflags = bpf_map_lookup_elem(&target_processes, &ptgid);
	if (pflags) {
		__u32 flags = *pflags, cflags = 0;
		if (flags & SP_TARGET_FOLLOW_FORKS)
			cflags |= flags & (SP_TARGET_PID | SP_TARGET_FOLLOW_FORKS);
		if (flags & SP_TARGET_COMM) /* same name until it execs */
			cflags |= SP_TARGET_COMM;
		if (cflags && bpf_map_update_elem(&target_processes, &ctgid, &cflags, BPF_ANY))
			count(SP_COUNTER_DROP_TARGET);
	}
	emit_process(SP_EVENT_PROCESS_FORK, ((__u64)ctgid << 32) | (__u32)child->pid, ptgid, 0, child);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	struct comm_key ck = {};
	read_comm((char *)ck.comm, p);

	/* --comm targets are decided by name at every exec. */
	__u32 *flags = bpf_map_lookup_elem(&target_processes, &tgid);
	__u32 old = flags ? *flags : 0, new = old;
	if (bpf_map_lookup_elem(&target_comms, &ck))
		new |= SP_TARGET_COMM;
	else
		new &= ~SP_TARGET_COMM;
	if (new != old) {
		if (new == 0)
			bpf_map_delete_elem(&target_processes, &tgid);
		else if (bpf_map_update_elem(&target_processes, &tgid, &new, BPF_ANY))
			count(SP_COUNTER_DROP_TARGET);
	}

	struct probe_config *cfg = get_config();
	if (cfg && is_target(cfg, tgid))
		emit_process(SP_EVENT_PROCESS_EXEC, bpf_get_current_pid_tgid(), p->real_parent->tgid, 0, p);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	/* Only the last thread of a process: signal->live already dropped to 0. */
	if (p->signal->live.counter != 0)
		return 0;

	__u32 tgid = p->tgid;
	struct probe_config *cfg = get_config();
	bool traced = cfg && is_target(cfg, tgid);

	bpf_map_delete_elem(&target_processes, &tgid);
	if (traced)
		emit_process(SP_EVENT_PROCESS_EXIT, bpf_get_current_pid_tgid(), p->real_parent->tgid,
			     p->exit_code, p->group_leader);
	return 0;
}
