/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Where each watched thread's time goes, exactly: every nanosecond of its
 * life after its first switch (or its creation) is in one state, on CPU,
 * waiting for a CPU (the run queue), or blocked, by what it is blocked in
 * (THREAD_* in sonic-probe-common's constants.rs).
 *
 * Why here and how: the scheduler's tracepoints see every transition.
 * sched_switch ends prev's time on CPU and next's wait (or, for a thread
 * we missed waking, its block); sched_wakeup ends a block; sched_wakeup_new
 * starts a new thread in the run queue. Each thread has a clock (task
 * storage, or a preallocated hash keyed by thread id where the kernel
 * lacks task storage for tracing programs: entry_state's variant) saying
 * which state it is in since when; each transition adds the time since to
 * the thread's slot of the per-CPU array thread_time_slots, found once per
 * (workload, process name, thread name) through thread_time_index like
 * the call statistics' slots (stats.h). The cause of a block is read when
 * the thread goes off CPU: the system call it is in, from the user
 * registers saved at the top of its kernel stack (a blocked thread whose
 * saved ax is not -ENOSYS is not in a call: a page fault, reclaim), and
 * for calls on a descriptor what the descriptor is (socket, pipe, regular
 * file or block device, GPU). The syscall programs pay nothing for this.
 *
 * Which threads, and under which names: the targets' (is_target_thread),
 * decided for a thread when it goes off CPU (it is the current task there,
 * which cgroup targets need) and again a second later (THREAD_REDECIDE_NS:
 * target lists change in user space), at once after its exec or rename;
 * its slot (workload, process name, thread name) is found at the same
 * times, so a switch reads no names. A process renamed by its leader, or
 * a thread moved to another cgroup, moves its other threads' time within
 * the second. A new thread is decided at its creation (its parent is
 * current, and it shares the parent's cgroup). Every thread has a clock,
 * watched or not, so a thread that becomes watched is accounted from its
 * last transition.
 */
#pragma once

/* The clock of a thread: task storage, or thread_clocks keyed by thread id
 * (preallocated: entered from the scheduler, where allocating is unsafe
 * on the kernels that need this variant). */
#if SP_ENTRY_TASK_STORAGE
static __always_inline struct thread_clock *clock_of(struct task_struct *task, bool create)
{
	return bpf_task_storage_get(&thread_clocks, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* The current thread's clock (a uprobe's: gpu_wait.h). */
static __always_inline struct thread_clock *current_clock(bool create)
{
	return clock_of(current_task(), create);
}

/* Task storage goes with the task. */
static __always_inline void clock_free(struct task_struct *task)
{
}
#else
static __always_inline struct thread_clock *clock_of_tid(__u32 tid, bool create)
{
	struct thread_clock *c = bpf_map_lookup_elem(&thread_clocks, &tid);

	if (c || !create)
		return c;
	struct thread_clock fresh = {};
	bpf_map_update_elem(&thread_clocks, &tid, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&thread_clocks, &tid);
}

static __always_inline struct thread_clock *clock_of(struct task_struct *task, bool create)
{
	return clock_of_tid(task->pid, create);
}

/* The current thread's clock (a uprobe's, whose task is no BTF pointer
 * with task_access=core_read). */
static __always_inline struct thread_clock *current_clock(bool create)
{
	return clock_of_tid((__u32)bpf_get_current_pid_tgid(), create);
}

static __always_inline void clock_free(struct task_struct *task)
{
	__u32 tid = task->pid;

	bpf_map_delete_elem(&thread_clocks, &tid);
}
#endif

/* TASK_* state of a task (`__state` since 5.14, `state` before). */
static __always_inline unsigned int task_state(struct task_struct *task)
{
	if (bpf_core_field_exists(task->__state))
		return BPF_CORE_READ(task, __state);
	struct task_struct___pre_5_14 *old = (void *)task;
	return BPF_CORE_READ(old, state);
}

/* A task's cgroup v2 id with workloads on, read through its pointers (not
 * only the current task's). */
static __always_inline __u64 task_workload(const struct probe_config *cfg, struct task_struct *task)
{
	if (!cfg->workload_cgroups)
		return 0;
	struct css_set *cset = KREAD(task, cgroups);
	struct cgroup *cg = cset ? KREAD(cset, dfl_cgrp) : NULL;
	struct kernfs_node *kn = cg ? KREAD(cg, kn) : NULL;
	return kn ? KREAD(kn, id) : 0;
}

/* Where the task's time is counted now: its workload, process name and
 * own name. */
static __always_inline void clock_key(const struct probe_config *cfg, struct task_struct *task,
				      struct thread_time_key *k)
{
	k->cgroup = task_workload(cfg, task);
	struct task_struct *leader = KREAD(task, group_leader);
	KREAD_COMM(k->comm, leader);
	KREAD_COMM(k->thread, task);
}

static __always_inline bool same_key(const struct thread_time_key *a, const struct thread_time_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

/* The slot of key in thread_time_slots: its thread_time_index entry, made
 * now if this is its first time; 0, the overflow slot, when every slot is
 * taken or the index is full. Claimed like stats.h's slots (no atomic
 * fetch-and-add on 5.10): an entry in thread_time_claims, BPF_NOEXIST, and
 * thread_time_taken the hint where free slots begin (slot 0 is never
 * claimed). */
static __always_inline __u32 thread_time_slot(const struct thread_time_key *key)
{
	__u32 *found = bpf_map_lookup_elem(&thread_time_index, key);
	if (found)
		return *found;

	__u32 zero = 0;
	__u64 *taken = bpf_map_lookup_elem(&thread_time_taken, &zero);
	if (!taken)
		return 0;
	__u64 first = *(volatile __u64 *)taken + 1;
	for (__u32 i = 0; i < 4; i++) {
		__u32 slot = first + i;
		if (first + i >= SP_MAX_THREAD_TIME_SLOTS || !bpf_map_lookup_elem(&thread_time_slots, &slot))
			break;
		__u32 one = 1;
		if (bpf_map_update_elem(&thread_time_claims, &slot, &one, BPF_NOEXIST))
			continue; /* another CPU's */
		__sync_fetch_and_add(taken, i + 1);
		if (!bpf_map_update_elem(&thread_time_index, key, &slot, BPF_NOEXIST))
			return slot;
		found = bpf_map_lookup_elem(&thread_time_index, key);
		if (found)
			return *found;
		break;
	}
	return 0;
}

/* The clock's slot, found again if the task's key changed. */
static __always_inline void clock_slot(const struct probe_config *cfg, struct thread_clock *c,
				       struct task_struct *task)
{
	struct thread_time_key k = {};

	clock_key(cfg, task, &k);
	if (c->slot_plus_one && same_key(&k, &c->key))
		return;
	c->slot_plus_one = thread_time_slot(&k) + 1;
	c->key = k;
}

/* Adds the time since the clock's last transition to its state. */
static __always_inline void clock_account(struct thread_clock *c, __u64 now)
{
	if (!c->watched || !c->since_ns || !c->slot_plus_one)
		return;
	__u32 slot = c->slot_plus_one - 1;
	__u32 state = c->state;
	struct thread_times *t = bpf_map_lookup_elem(&thread_time_slots, &slot);

	if (!t || state >= SP_NR_THREAD_STATES)
		return;
	/* Inside a waiting GPU call, running (spinning in the library) or
	 * blocked is waiting for the GPU (gpu_wait.h); waiting for a CPU is
	 * still that. */
	if (c->gpu_depth && state != SP_THREAD_RUNQUEUE)
		state = SP_THREAD_GPU;
	if (slot == 0)
		count(SP_COUNTER_THREAD_TIME_OVERFLOW);
	t->ns[state] += now - c->since_ns;
}

/* What a blocked thread's descriptor is. */
static __always_inline __u16 cause_of_fd(const struct probe_config *cfg, struct task_struct *task, __u32 fd)
{
	struct open_file of = {};
	__u32 rdev = 0;

	if (!fd_inode(task, TASK_FILES(task), fd, &of, &rdev))
		return SP_THREAD_OTHER;
	switch (of.mode & S_IFMT) {
	case S_IFSOCK:
		return SP_THREAD_SOCKET;
	case S_IFIFO:
		return SP_THREAD_PIPE;
	case S_IFREG:
	case S_IFBLK:
		return SP_THREAD_FILE;
	case S_IFCHR:
		if (class_of_device(cfg, rdev) == SP_FILE_CLASS_GPU)
			return SP_THREAD_GPU;
	}
	return SP_THREAD_OTHER;
}

/* x86_64's struct pt_regs, for kernels without bpf_task_pt_regs (before
 * 5.15), where it sits at the very top of the kernel stack (FRED's padding
 * came in 6.9). */
#define SP_PT_REGS_SIZE (21 * 8)

/* What a thread going off CPU blocked (not preempted) is blocked in: the
 * system call it is in (x86_64 numbers) and, for calls on a descriptor,
 * what that is. */
static __always_inline __u16 blocked_cause(const struct probe_config *cfg, struct task_struct *task)
{
	__u64 ax, di, nr;

	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs)) {
		/* A BTF pointer: its fields are plain loads. */
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
		if (!regs)
			return SP_THREAD_OTHER;
		ax = regs->ax;
		di = regs->di;
		nr = regs->orig_ax;
	} else {
		char *stack = KREAD(task, stack);
		if (!stack || !cfg->thread_stack_size)
			return SP_THREAD_OTHER;
		struct pt_regs *regs = (struct pt_regs *)(stack + cfg->thread_stack_size - SP_PT_REGS_SIZE);
		/* ax, cx, dx, si, di, orig_ax: consecutive in x86_64's pt_regs. */
		__u64 w[6];
		if (bpf_probe_read_kernel(w, sizeof(w), &regs->ax))
			return SP_THREAD_OTHER;
		ax = w[0];
		di = w[4];
		nr = w[5];
	}
	/* The entry pushes -ENOSYS as ax; the call's return value replaces
	 * it at the end. An exception's frame holds the user's ax. */
	if (ax != (__u64)-ENOSYS)
		return SP_THREAD_OTHER;
	__u32 fd = di;
	switch (nr) {
	case 202: /* futex */
	case 449: /* futex_waitv */
		return SP_THREAD_FUTEX;
	case 35:  /* nanosleep */
	case 230: /* clock_nanosleep */
		return SP_THREAD_SLEEP;
	case 7:	  /* poll */
	case 23:  /* select */
	case 43:  /* accept */
	case 232: /* epoll_wait */
	case 270: /* pselect6 */
	case 271: /* ppoll */
	case 281: /* epoll_pwait */
	case 288: /* accept4 */
	case 441: /* epoll_pwait2 */
		return SP_THREAD_POLL;
	case 42:  /* connect */
	case 44:  /* sendto */
	case 45:  /* recvfrom */
	case 46:  /* sendmsg */
	case 47:  /* recvmsg */
	case 299: /* recvmmsg */
	case 307: /* sendmmsg */
		return SP_THREAD_SOCKET;
	case 0:	  /* read */
	case 1:	  /* write */
	case 16:  /* ioctl */
	case 17:  /* pread64 */
	case 18:  /* pwrite64 */
	case 19:  /* readv */
	case 20:  /* writev */
	case 40:  /* sendfile (to its first descriptor) */
	case 74:  /* fsync */
	case 75:  /* fdatasync */
	case 77:  /* ftruncate */
	case 217: /* getdents64 */
	case 277: /* sync_file_range */
	case 285: /* fallocate */
	case 295: /* preadv */
	case 296: /* pwritev */
	case 326: /* copy_file_range */
	case 327: /* preadv2 */
	case 328: /* pwritev2 */
		return cause_of_fd(cfg, task, fd);
	case 2:	  /* open */
	case 3:	  /* close (a network filesystem's flush) */
	case 4:	  /* stat */
	case 5:	  /* fstat */
	case 6:	  /* lstat */
	case 21:  /* access */
	case 76:  /* truncate */
	case 82:  /* rename */
	case 83:  /* mkdir */
	case 84:  /* rmdir */
	case 85:  /* creat */
	case 87:  /* unlink */
	case 89:  /* readlink */
	case 257: /* openat */
	case 258: /* mkdirat */
	case 262: /* newfstatat */
	case 263: /* unlinkat */
	case 264: /* renameat */
	case 267: /* readlinkat */
	case 269: /* faccessat */
	case 316: /* renameat2 */
	case 332: /* statx */
	case 437: /* openat2 */
	case 439: /* faccessat2 */
		return SP_THREAD_FILE;
	}
	return SP_THREAD_OTHER;
}

/* Is this thread (the current task, or one it just created) a target? */
static __always_inline bool thread_watched(const struct probe_config *cfg, struct task_struct *task)
{
	__u64 pid_tgid = ((__u64)task->tgid << 32) | (__u32)task->pid;

	return is_target_thread(cfg, pid_tgid);
}

/* prev goes off CPU (it is the current task): its time on CPU ends; it
 * waits in the run queue if preempted or still runnable, else it blocks. */
static __always_inline void thread_switched_out(const struct probe_config *cfg, struct task_struct *prev,
						bool preempt, __u64 now)
{
	if (!prev->pid)
		return; /* a CPU's idle task */
	struct thread_clock *c = clock_of(prev, true);
	if (!c) {
		count(SP_COUNTER_DROP_THREAD_CLOCK);
		return;
	}
	/* Watched or not, and under which names: decided again once a second
	 * (and at once after an exec or a rename), not at every switch. */
	if (!c->decided_ns || now - c->decided_ns >= SP_THREAD_REDECIDE_NS) {
		c->watched = thread_watched(cfg, prev);
		c->decided_ns = now;
		if (c->watched)
			clock_slot(cfg, c, prev);
	}
	if (c->watched) {
		c->state = SP_THREAD_ON_CPU;
		clock_account(c, now);
	}
	unsigned int state = task_state(prev);
	if (state & TASK_DEAD) {
		/* Its last switch: nothing of it runs again. */
		c->since_ns = 0;
		clock_free(prev);
		return;
	}
	c->state = preempt || state == TASK_RUNNING ? SP_THREAD_RUNQUEUE : blocked_cause(cfg, prev);
	c->since_ns = now;
}

/* next goes on CPU: its wait (in the run queue, or a block whose wake-up
 * we did not see) ends. */
static __always_inline void thread_switched_in(const struct probe_config *cfg, struct task_struct *next,
					       __u64 now)
{
	if (!next->pid)
		return;
	struct thread_clock *c = clock_of(next, false);
	if (!c || !c->since_ns)
		return;
	if (c->watched) {
		if (!c->slot_plus_one)
			clock_slot(cfg, c, next);
		clock_account(c, now);
	}
	c->state = SP_THREAD_ON_CPU;
	c->since_ns = now;
}

/* p is woken: its block ends, it waits for a CPU. (A wake-up of a thread
 * that is running or runnable changes nothing.) */
static __always_inline void thread_woken(struct task_struct *p, __u64 now)
{
	struct thread_clock *c = clock_of(p, false);

	if (!c || !c->since_ns || c->state == SP_THREAD_ON_CPU || c->state == SP_THREAD_RUNQUEUE)
		return;
	clock_account(c, now);
	c->state = SP_THREAD_RUNQUEUE;
	c->since_ns = now;
}

/* p is new (a thread or a process the current task created): it starts in
 * the run queue. */
static __always_inline void thread_created(const struct probe_config *cfg, struct task_struct *p, __u64 now)
{
	struct thread_clock *c = clock_of(p, true);

	if (!c) {
		count(SP_COUNTER_DROP_THREAD_CLOCK);
		return;
	}
	c->watched = thread_watched(cfg, p);
	c->decided_ns = now;
	c->slot_plus_one = 0;
	/* fork() inside a GPU call: the child never returns from the parent's. */
	c->gpu_depth = 0;
	c->gpu_since_ns = 0;
	c->state = SP_THREAD_RUNQUEUE;
	c->since_ns = now;
}

/* The task's exec or rename may change whether it is a target: decide at
 * its next switch. */
static __always_inline void thread_redecide(struct task_struct *task)
{
	struct thread_clock *c = clock_of(task, false);

	if (c)
		c->decided_ns = 0;
}
