/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Sending events to the daemon. Every attempt is counted (EVENTS_SENT) and
 * every reservation that fails too (DROP_RINGBUF): nothing is lost silently.
 *
 * Waking the daemon for each event would cost the traced call an irq_work
 * and a wakeup (microseconds); instead events are submitted silently and
 * the daemon polls the ring every few milliseconds, unless the ring fills
 * past probe_config.wakeup_bytes: then the submit wakes it at once.
 */
#pragma once

static __always_inline __u64 submit_flags(const struct probe_config *cfg)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= cfg->wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* What sys_exit knows about a call beyond its thread state. */
struct call_info {
	__u64 pid_tgid;
	__u64 duration_ns;
	long ret;
	__u16 reasons;
	__u16 file_class;
	__u16 file_mode;
	__u32 file_dev;
	__u64 file_ino;
};

/* task: the calling thread; waker: the wake that ended a futex wait; all
 * zero if none. */
static __always_inline void fill_call(struct syscall_event *ev, struct task_struct *task, const struct thread_state *st,
				      const struct stats_key *key, const struct call_info *c,
				      const struct futex_wake *waker)
{
	fill_header(&ev->header, SP_EVENT_SYSCALL, c->pid_tgid, st->start_ns, key->cgroup);
	ev->syscall = st->syscall;
	ev->reasons = c->reasons;
	ev->path_len = 0;
	ev->file_class = c->file_class;
	ev->waker_tid = waker->tid;
	__builtin_memcpy(ev->waker_comm, waker->comm, SP_COMM_LEN);
	ev->file_mode = c->file_mode;
	ev->file_dev = c->file_dev;
	ev->file_ino = c->file_ino;
	ev->_pad = 0;
	ev->duration_ns = c->duration_ns;
	ev->ret = c->ret;
	for (int i = 0; i < 6; i++)
		ev->args[i] = st->args[i];
	ev->aux[0] = st->aux[0];
	ev->aux[1] = st->aux[1];
	ev->aux_kind = st->aux_kind;
#if SP_TASK_BTF
	/* Plain loads, no helper call; bytes after the NUL are ignored by the daemon. */
	KREAD_ARRAY(ev->thread_comm, task, comm);
#else
	bpf_get_current_comm(ev->thread_comm, SP_COMM_LEN);
#endif
	__builtin_memcpy(ev->process_comm, key->comm, SP_COMM_LEN);
}

/* with_path: the call has a path argument; it is sent along. */
static __always_inline void emit_call(const struct probe_config *cfg, struct task_struct *task,
				      const struct thread_state *st,
				      const struct stats_key *key, struct call_info *c, bool with_path,
				      const struct futex_wake *waker)
{
	count(SP_COUNTER_EVENTS_SENT);
	if (with_path) {
		c->reasons |= SP_EMIT_PATH;
		struct syscall_path_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
		if (!ev) {
			count(SP_COUNTER_DROP_RINGBUF);
			return;
		}
		fill_call(&ev->call, task, st, key, c, waker);
		ev->call.header.kind = SP_EVENT_SYSCALL_PATH;
		ev->call.reasons |= st->path_flags;
		ev->call.path_len = st->path_len;
		__builtin_memcpy(ev->path, st->path, SP_PATH_CAP);
		bpf_ringbuf_submit(ev, submit_flags(cfg));
	} else {
		struct syscall_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
		if (!ev) {
			count(SP_COUNTER_DROP_RINGBUF);
			return;
		}
		fill_call(ev, task, st, key, c, waker);
		bpf_ringbuf_submit(ev, submit_flags(cfg));
	}
}

/* cgroup: workload_of() of the current task. */
static __always_inline void emit_process(const struct probe_config *cfg, __u32 kind, __u64 pid_tgid,
					 __u32 parent_tgid, int exit_code, const struct task_struct *named,
					 __u64 cgroup)
{
	count(SP_COUNTER_EVENTS_SENT);
	struct process_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(SP_COUNTER_DROP_RINGBUF);
		return;
	}
	fill_header(&ev->header, kind, pid_tgid, bpf_ktime_get_ns(), cgroup);
	ev->parent_tgid = parent_tgid;
	ev->exit_code = exit_code;
	read_comm((char *)ev->comm, named);
	bpf_ringbuf_submit(ev, submit_flags(cfg));
}

/* cgroup: the closing call's statistics key has it at hand. */
static __always_inline void emit_file_close(const struct probe_config *cfg, __u64 pid_tgid, __u64 cgroup,
					    __u32 fd, const struct open_file *of)
{
	count(SP_COUNTER_EVENTS_SENT);
	struct file_close_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(SP_COUNTER_DROP_RINGBUF);
		return;
	}
	fill_header(&ev->header, SP_EVENT_FILE_CLOSE, pid_tgid, bpf_ktime_get_ns(), cgroup);
	ev->fd = fd;
	ev->_pad = 0;
	ev->file = *of;
	bpf_ringbuf_submit(ev, submit_flags(cfg));
}
