/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * The few kernel types sonic-probe's BPF programs touch, declared by hand.
 *
 * Why not a full vmlinux.h: a dump of one kernel's BTF is 130k lines and ties
 * the source to the build machine. These declarations only need the fields we
 * read; preserve_access_index makes clang emit CO-RE relocations, and aya
 * resolves every field by name against the running kernel's BTF at load time,
 * so offsets here do not need to match any particular kernel.
 */
#pragma once

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef int pid_t;
typedef _Bool bool;
#define true 1
#define false 0

/* uapi/linux/bpf.h: the constants the programs use. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
/* Helpers whose presence a program checks with bpf_core_enum_value_exists
 * (the running kernel's BTF has the enum). */
enum bpf_func_id {
	BPF_FUNC_task_pt_regs = 175,
};
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1
#define BPF_LOCAL_STORAGE_GET_F_CREATE 1
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_AVAIL_DATA 0
#define BPF_RB_FORCE_WAKEUP 2

/* arch/x86/include/asm/thread_info.h */
#define TS_COMPAT 0x0002

/* uapi/linux/stat.h */
#define S_IFMT 0170000
#define S_IFREG 0100000
#define S_ISREG(m) (((m) & S_IFMT) == S_IFREG)
#define S_IFCHR 0020000
#define S_ISCHR(m) (((m) & S_IFMT) == S_IFCHR)
#define S_IFBLK 0060000
#define S_IFIFO 0010000
#define S_IFSOCK 0140000

/* include/linux/sched.h: task states (__state / state) */
#define TASK_RUNNING 0x0000
#define TASK_DEAD 0x0080

/* include/uapi/asm-generic/errno-base.h */
#define ENOSYS 38

/* uapi/linux/mman.h */
#define MAP_ANONYMOUS 0x20

/* uapi/linux/futex.h: commands (op & FUTEX_CMD_MASK) */
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_REQUEUE 3
#define FUTEX_CMP_REQUEUE 4
#define FUTEX_WAKE_OP 5
#define FUTEX_LOCK_PI 6
#define FUTEX_UNLOCK_PI 7
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_CMP_REQUEUE_PI 12
#define FUTEX_LOCK_PI2 13

/* uapi/linux/futex.h: one entry of futex_waitv's array (user memory) */
struct futex_waitv {
	__u64 val;
	__u64 uaddr;
	__u32 flags;
	__u32 __reserved;
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp;
};

typedef struct {
	int counter;
} atomic_t;

struct thread_info {
	unsigned int status;
};

struct signal_struct {
	atomic_t live;
};

struct super_block {
	unsigned int s_dev;
};

struct inode {
	unsigned short i_mode;
	unsigned int i_rdev;
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct file {
	struct inode *f_inode;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct kernfs_node {
	__u64 id;
};

struct cgroup;

struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent;
};

struct cgroup {
	struct cgroup_subsys_state self;
	int level;
	struct kernfs_node *kn;
};

struct mm_struct;

struct css_set {
	struct cgroup *dfl_cgrp;
};

struct task_struct {
	struct thread_info thread_info;
	/* The task's state (TASK_*); `state` before 5.14 (task_struct___pre_5_14). */
	unsigned int __state;
	/* Its kernel stack; the user registers sit at its top. */
	void *stack;
	struct css_set *cgroups;
	struct files_struct *files;
	int exit_code;
	pid_t pid;
	pid_t tgid;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	char comm[16];
	struct signal_struct *signal;
	struct mm_struct *mm;
};

struct linux_binprm;

/* task_struct before 5.14 named its state `state` (a long). */
struct task_struct___pre_5_14 {
	long state;
};

#pragma clang attribute pop
