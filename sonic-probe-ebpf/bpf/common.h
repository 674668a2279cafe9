/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Small helpers every program uses. */
#pragma once

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

/* A task's name into a zeroed dst, up to its NUL: kernels before about
 * 5.17 set comm with strlcpy, leaving an earlier, longer name's bytes after
 * the NUL, and a name used as a map key must not carry them. */
static __always_inline void read_comm(char dst[SP_COMM_LEN], const struct task_struct *task)
{
	bpf_probe_read_kernel_str(dst, SP_COMM_LEN, task->comm);
}

/* The caller's cgroup as events and statistics key it: only with workloads
 * on. task: the current task. With the task as a BTF pointer, the id
 * bpf_get_current_cgroup_id returns (task->cgroups->dfl_cgrp->kn->id) is
 * read with plain loads, no helper call; else that helper. */
static __always_inline __u64 workload_of(const struct probe_config *cfg, struct task_struct *task)
{
	if (!cfg->workload_cgroups)
		return 0;
#if SP_TASK_BTF
	struct css_set *cset = task->cgroups;
	struct cgroup *cg = cset ? cset->dfl_cgrp : NULL;
	struct kernfs_node *kn = cg ? cg->kn : NULL;
	return kn ? kn->id : 0;
#else
	return bpf_get_current_cgroup_id();
#endif
}

/* cgroup: the caller's cgroup v2 id with workloads on (the statistics'
 * key has it at hand), else 0. */
static __always_inline void fill_header(struct event_header *h, __u32 kind, __u64 pid_tgid,
					__u64 time_ns, __u64 cgroup)
{
	h->kind = kind;
	h->tgid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->cpu = bpf_get_smp_processor_id();
	h->time_ns = time_ns;
	h->cgroup = cgroup;
}
