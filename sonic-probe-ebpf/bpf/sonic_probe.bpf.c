// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * sonic-probe's kernel side: raw_syscalls sys_enter/sys_exit as BTF
 * tracepoints, plus process fork/exec/exit and the scheduler's switches
 * and wake-ups (where each watched thread's time goes: thread_time.h), and
 * uprobes on CUDA's waiting calls (gpu_wait.h).
 *
 * Why this shape: raw tracepoints fire for every system call on the host, so
 * the common path must return within a few instructions. sys_enter returns at
 * once unless the call is one of ours (a switch on the number), then unless
 * the process is a target (an array lookup, then one hash lookup). For a
 * target it stores the start time and arguments in task-local storage.
 * sys_exit finds the call there and counts it *in the kernel*, exactly, in
 * per-CPU maps the daemon reads (stats.h). Only calls that need per-event
 * handling in user space (paths, slow calls, errors, large mappings, strace
 * mode) go through the ring buffer (events.h), and every loss is counted.
 *
 * Layouts (struct stats_key, struct syscall_event, ...) and the syscall
 * table come from the generated sonic_probe_layout.h: see
 * sonic-probe-common. Maps are in maps.h.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sonic_probe_layout.h"
#include "variant.h"
#include "maps.h"
#include "common.h"
#include "entry_state.h"
#include "targets.h"
#include "stats.h"
#include "files.h"
#include "futex.h"
#include "events.h"
#include "thread_time.h"
#include "gpu_wait.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* ---- system calls */

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	int idx = sp_syscall_index(id);
	if (idx < 0)
		return 0;

	struct probe_config *cfg = get_config();
	if (!cfg || !(cfg->syscall_mask & (1u << idx)))
		return 0;
	struct task_struct *task = current_task();
	__u64 pid_tgid = task_pid_tgid(task);
	if (!is_target_thread(cfg, pid_tgid))
		return 0;
	/* A 32-bit call uses the i386 numbering: not the call we think. */
	if (KREAD(task, thread_info.status) & TS_COMPAT)
		return 0;

	struct thread_state *st = entry_state_create(task, pid_tgid);
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
	/* The path is read at exit (files.h): unread until then. */
	st->path_flags = SP_EMIT_PATH_UNREADABLE;
	st->aux_kind = 0;

	/* strace mode names the file a close closes: look at it while it is open. */
	int farg = sp_syscall_fd_arg(idx);
	if (sp_syscall_fd_use(idx) == SP_FD_CLOSES && (cfg->trace_mask & (1u << idx)) && farg >= 0 && farg < 6)
		lookup_fd(cfg, task, TASK_FILES(task), pid_tgid >> 32, st->args[farg]);
	/* strace mode prints a futex wait's timeout: read it while it is there. */
	if (idx == SP_SYSCALL_FUTEX && (cfg->trace_mask & (1u << idx)) && st->args[3] &&
	    futex_cmd_has_timeout(st->args[1] & SP_FUTEX_CMD_MASK) &&
	    !bpf_probe_read_user(st->aux, sizeof(st->aux), (const void *)st->args[3]))
		st->aux_kind = SP_AUX_TIMESPEC;

	st->active = 1;
	/* Last, so that our own work above is not part of the call's time. */
	st->start_ns = bpf_ktime_get_ns();
	if (idx == SP_SYSCALL_FUTEX)
		futex_enter(st, task, pid_tgid, st->start_ns);
	if (cfg->inflight_waits && inflight_kept(cfg, pid_tgid) && is_futex_wait(idx, st))
		inflight_enter(regs, st, idx, pid_tgid);
	return 0;
}

/* The event names the file the call worked on. */
static __always_inline void describe_file(struct call_info *c, const struct open_file *of)
{
	c->file_class = of->class;
	c->file_mode = of->mode;
	c->file_dev = of->dev;
	c->file_ino = of->ino;
}

/* errno values (asm-generic/errno-base.h): the "try again" ones. */
#define SP_EINTR 4
#define SP_EAGAIN 11

/* A failure of a call that was not traced, of a row in error_only_mask
 * (write on a full disk): counted by errno, and sent (without a duration:
 * EMIT_UNTIMED) when the row's failures are sent. Its arguments are still
 * in the saved registers at exit; the thread's entry state is scratch
 * (no call of it is in flight: this is its exit). */
static __always_inline void untraced_failure(struct pt_regs *regs, long ret, int idx, struct task_struct *task,
					     __u64 pid_tgid)
{
	struct probe_config *cfg = get_config();
	if (!cfg || !(cfg->error_only_mask & (1u << idx)) || (cfg->syscall_mask & (1u << idx)))
		return;
	if (!is_target_thread(cfg, pid_tgid) || (KREAD(task, thread_info.status) & TS_COMPAT))
		return;
	struct stats_key key = { .syscall = idx, .cgroup = workload_of(cfg, task) };
	{
		struct task_struct *leader = KREAD(task, group_leader);
		KREAD_COMM(key.comm, leader);
	}
	add_error(&key, ret);
	if (!(cfg->error_event_mask & (1u << idx)))
		return;
	struct thread_state *st = entry_state_create(task, pid_tgid);
	if (!st) {
		count(SP_COUNTER_DROP_THREAD_STATE);
		return;
	}
	st->args[0] = regs->di;
	st->args[1] = regs->si;
	st->args[2] = regs->dx;
	st->args[3] = regs->r10;
	st->args[4] = regs->r8;
	st->args[5] = regs->r9;
	st->syscall = idx;
	st->active = 0;
	st->path_len = 0;
	st->path_flags = SP_EMIT_PATH_UNREADABLE;
	st->aux_kind = 0;
	st->start_ns = bpf_ktime_get_ns();
	struct call_info c = {
		.pid_tgid = pid_tgid,
		.ret = ret,
		.reasons = SP_EMIT_ERROR | SP_EMIT_UNTIMED,
	};
	int farg = sp_syscall_fd_arg(idx);
	if (farg >= 0 && farg < 6 && (int)st->args[farg] >= 0) {
		struct open_file *of = lookup_fd(cfg, task, TASK_FILES(task), pid_tgid >> 32, st->args[farg]);
		if (of)
			describe_file(&c, of);
	}
	struct futex_wake waker = {};
	emit_call(cfg, task, st, &key, &c, false, &waker);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	int idx = sp_syscall_index(regs->orig_ax);
	if (idx < 0)
		return 0;

	struct task_struct *task = current_task();
	__u64 pid_tgid = task_pid_tgid(task);
	struct thread_state *st = entry_state_get(task, pid_tgid);
	if (!st || !st->active || st->syscall != idx) {
		/* Not traced: its failure may be counted still (all a successful
		 * call of an untraced row pays is this compare). EAGAIN and EINTR
		 * are no failures, and frequent (non-blocking sockets): left out. */
		if (ret < 0 && ret >= -4095 && ret != -SP_EAGAIN && ret != -SP_EINTR)
			untraced_failure(regs, ret, idx, task, pid_tgid);
		return 0;
	}
	st->active = 0;

	struct call_info c = {
		.duration_ns = bpf_ktime_get_ns() - st->start_ns,
		.pid_tgid = pid_tgid,
		.ret = ret,
	};
	struct probe_config *cfg = get_config();
	if (!cfg)
		return 0;
	/* The key and the descriptor table first, where few of the verifier's
	 * paths through this program have split yet: each load of a pointer
	 * from the task costs the verifier a search of the kernel's BTF, on
	 * every path that reaches it (files.h, TASK_FILES). */
	struct stats_key key = { .syscall = idx };
	struct files_struct *files = TASK_FILES(task);
	{
		struct task_struct *leader = KREAD(task, group_leader);
		KREAD_COMM(key.comm, leader);
	}
	/* Last: its tests of each pointer on the way split the paths. */
	key.cgroup = workload_of(cfg, task);
	if (cfg->inflight_waits && inflight_kept(cfg, pid_tgid) && is_futex_wait(idx, st))
		inflight_exit((__u32)pid_tgid);
	__u32 tgid = c.pid_tgid >> 32;
	/* A call under way (connect's EINPROGRESS) did not fail. */
	bool failed = ret < 0 && ret >= -4095 && -ret != sp_syscall_in_progress_errno(idx);

	struct call_sample sample = { .duration_ns = c.duration_ns, .failed = failed };
	int sarg = sp_syscall_size_arg(idx);
	if (sarg >= 0 && sarg < 6) {
		sample.size = st->args[sarg];
		sample.has_size = true;
		sample.small = sp_syscall_counts_small(idx) && sample.size < cfg->small_size;
	}
	if (sp_syscall_bytes_from_ret(idx) && ret > 0)
		sample.bytes = ret;
	else if (sp_syscall_bytes_from_size(idx) && !failed)
		sample.bytes = sample.size;

	/* What the call's descriptor is (its row's fd_use), and the variant
	 * its statistics are kept under. */
	int parg = sp_syscall_path_arg(idx);
	__u64 path_uptr = parg >= 0 && parg < 6 ? st->args[parg] : 0;
	int farg = sp_syscall_fd_arg(idx);
	int fuse = sp_syscall_fd_use(idx);
	bool counted = false; /* an open counted in reopens, not sent */
	if ((fuse == SP_FD_READ || fuse == SP_FD_CLASSIFY) && farg >= 0 && farg < 6) {
		__u32 fd = st->args[farg];
		/* Read before open_files is: a sweep between the two makes what
		 * is noted below stale at once. */
		__u64 gen = fdc_generation();
		/* From fd_class_cache only the class and type: an event looks the
		 * rest up below (file_ino stays 0). */
		if (!fd_class_cached(tgid, fd, gen, &c.file_class, &c.file_mode)) {
			struct open_file *of = lookup_fd(cfg, task, files, tgid, fd);
			if (of) {
				describe_file(&c, of);
				/* A regular file's reads are counted in its entry, so
				 * every call comes here; anything else is cached. */
				if (S_ISREG(of->mode)) {
					if (fuse == SP_FD_READ)
						account_read(of, sample.size, ret, cfg);
					else
						sample.short_io = short_io_of(idx, ret, sample.size);
				} else {
					fd_class_note(tgid, fd, gen, of);
				}
			}
		}
	} else if (fuse == SP_FD_OPENS && !failed) {
		struct open_file of = {};
		/* A read-only open that is not sent for another reason may be
		 * counted in its file's reopens entry instead of sent. (openat's
		 * flags: its third argument; the only row that opens.) */
		bool may_count = cfg->reopen_coalesce_ns && !(cfg->trace_mask & (1u << idx)) &&
				 !(cfg->slow_call_ns && c.duration_ns >= cfg->slow_call_ns) &&
				 (st->args[2] & SP_O_ACCMODE) == SP_O_RDONLY;
		counted = track_open(cfg, task, files, tgid, ret, st, path_uptr, may_count, &of);
		describe_file(&c, &of);
	} else if (fuse == SP_FD_CLOSES && !failed && farg >= 0 && farg < 6) {
		struct file_key fk = { .tgid = tgid, .fd = st->args[farg] };
		struct open_file *of = bpf_map_lookup_elem(&open_files, &fk);
		if (of && file_is_open(of)) {
			describe_file(&c, of);
			/* Only what was read through it matters to the daemon. */
			if (of->opened_ns && of->reads && S_ISREG(of->mode))
				emit_file_close(cfg, c.pid_tgid, key.cgroup, fk.fd, of);
			file_closed(of);
		}
		fd_class_note(tgid, fk.fd, 0, NULL);
	}
	int vkind = sp_syscall_variant(idx);
	if (vkind == SP_VARIANT_FUTEX_CMD)
		key.variant = st->args[1] & SP_FUTEX_CMD_MASK;
	else if (vkind == SP_VARIANT_FILE_CLASS)
		key.variant = c.file_class;

	if (!add_stats(st, &key, &sample, ret) && failed)
		add_error(&key, ret);

	if (cfg->trace_mask & (1u << idx))
		c.reasons |= SP_EMIT_TRACE;
	if (cfg->path_events && sp_syscall_path_arg(idx) >= 0 && !counted)
		c.reasons |= SP_EMIT_PATH;
	if (cfg->slow_call_ns && c.duration_ns >= cfg->slow_call_ns)
		c.reasons |= SP_EMIT_SLOW;
	if (failed && (cfg->error_event_mask & (1u << idx)))
		c.reasons |= SP_EMIT_ERROR;
	/* A short write is sent as its row's failures are. Without a branch,
	 * which would double the verifier's walk of the rest for each row that
	 * counts short calls. */
	_Static_assert(SP_EMIT_SHORT == 1 << 8, "EMIT_SHORT is bit 8");
	c.reasons |= (sample.short_io & (cfg->error_event_mask >> idx)) << 8;
	if (sp_syscall_large_events(idx) && cfg->large_size && sample.size >= cfg->large_size)
		c.reasons |= SP_EMIT_LARGE_MAP;
	if (!c.reasons)
		return 0;

	/* Not a pointer that may be NULL: clang turns that select into
	 * pointer arithmetic some verifiers reject. */
	struct futex_wake waker = {};
	if (idx == SP_SYSCALL_FUTEX || idx == SP_SYSCALL_FUTEX_WAITV)
		futex_waker(cfg, st, idx, ret, tgid, &waker);
	/* A descriptor that only names the file for the event (mmap's; -1
	 * for an anonymous mapping). */
	if ((fuse == SP_FD_NAMES || ((fuse == SP_FD_READ || fuse == SP_FD_CLASSIFY) && !c.file_ino)) && farg >= 0 &&
	    farg < 6 && (int)st->args[farg] >= 0) {
		/* The table read again, not `files`: kept live to here it takes
		 * this program's frame past what 6.1 allows (stack_budget.rs). */
		struct open_file *of = lookup_fd(cfg, task, TASK_FILES(task), tgid, st->args[farg]);
		if (of)
			describe_file(&c, of);
	}
	int aarg = sp_syscall_addr_arg(idx);
	if (parg >= 0)
		read_path_once(st, path_uptr);
	else if (aarg >= 0 && aarg < 5)
		read_sockaddr(st, st->args[aarg], st->args[aarg + 1]);
	emit_call(cfg, task, st, &key, &c, parg >= 0 || aarg >= 0, &waker);
	return 0;
}

/* ---- process lifecycle */

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
	emit_process(cfg, SP_EVENT_PROCESS_FORK, ((__u64)ctgid << 32) | (__u32)child->pid, ptgid, 0, child,
		     workload_of(cfg, parent));
	return 0;
}

/* --comm targets are decided by the process's name (its leader's comm)
 * whenever it takes one: at every exec, and at every rename of the leader
 * (prctl(PR_SET_NAME), a write to /proc/PID/comm: setproctitle in
 * gunicorn, celery and Ray workers; busybox applets run without an exec). */
static __always_inline void decide_comm_target(__u32 tgid, const struct comm_key *ck)
{
	__u32 *flags = bpf_map_lookup_elem(&target_processes, &tgid);
	__u32 old = flags ? *flags : 0, new = old;
	if (bpf_map_lookup_elem(&target_comms, ck))
		new |= SP_TARGET_COMM;
	else
		new &= ~SP_TARGET_COMM;
	if (new != old) {
		if (new == 0)
			bpf_map_delete_elem(&target_processes, &tgid);
		else if (bpf_map_update_elem(&target_processes, &tgid, &new, BPF_ANY))
			count(SP_COUNTER_DROP_TARGET);
	}
}

SEC("tp_btf/task_rename")
int BPF_PROG(task_rename, struct task_struct *task, const char *comm)
{
	/* Its time counts under its new name from its next switch. */
	thread_redecide(task);
	/* A thread naming itself does not rename its process. */
	if (task->pid != task->tgid)
		return 0;
	/* The new name (task->comm is still the old one here). */
	struct comm_key ck = {};
	bpf_probe_read_kernel_str(ck.comm, sizeof(ck.comm), comm);
	decide_comm_target(task->tgid, &ck);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	struct comm_key ck = {};
	read_comm((char *)ck.comm, p);
	decide_comm_target(tgid, &ck);
	thread_redecide(p);

	struct probe_config *cfg = get_config();
	if (cfg && is_target(cfg, tgid))
		emit_process(cfg, SP_EVENT_PROCESS_EXEC, bpf_get_current_pid_tgid(), p->real_parent->tgid, 0, p,
			     workload_of(cfg, p));
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	entry_state_free(p->pid);
	{
		/* A thread that exits in a futex wait never reaches its sys_exit. */
		struct probe_config *c = get_config();
		if (c && c->inflight_waits) {
			inflight_exit(p->pid);
			/* Or in a GPU wait (a thread ended from another). */
			__u32 tid = p->pid;
			bpf_map_delete_elem(&gpu_waiting, &tid);
		}
	}
	/* The rest only for the last thread of a process: signal->live
	 * already dropped to 0. */
	if (p->signal->live.counter != 0)
		return 0;

	__u32 tgid = p->tgid;
	struct probe_config *cfg = get_config();
	bool traced = cfg && is_target(cfg, tgid);

	bpf_map_delete_elem(&target_processes, &tgid);
	if (traced)
		emit_process(cfg, SP_EVENT_PROCESS_EXIT, bpf_get_current_pid_tgid(), p->real_parent->tgid,
			     p->exit_code, p->group_leader, workload_of(cfg, p));
	return 0;
}

/* ---- the scheduler: where watched threads' time goes (thread_time.h) */

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct probe_config *cfg = get_config();
	if (!cfg || !cfg->thread_time)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	thread_switched_out(cfg, prev, preempt, now);
	thread_switched_in(cfg, next, now);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	struct probe_config *cfg = get_config();
	if (!cfg || !cfg->thread_time)
		return 0;
	thread_woken(p, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	struct probe_config *cfg = get_config();
	if (!cfg || !cfg->thread_time)
		return 0;
	thread_created(cfg, p, bpf_ktime_get_ns());
	return 0;
}

/* ---- the GPU seen from the CPU: CUDA's waiting calls (gpu_wait.h) */

/* One entry program per api (SP_GPU_APIS: gpu_apis.rs), attached at each
 * of its functions in each library file: the api is the program's, since
 * a uprobe's cookie needs 5.15. */
#define SP_GPU_ENTER(id)                    \
	SEC("uprobe")                       \
	int gpu_enter_##id(struct pt_regs *ctx) \
	{                                   \
		gpu_enter(ctx, id);         \
		return 0;                   \
	}
SP_GPU_APIS(SP_GPU_ENTER)

SEC("uretprobe")
int gpu_exit(struct pt_regs *ctx)
{
	gpu_return();
	return 0;
}
