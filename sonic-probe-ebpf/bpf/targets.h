/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Is the calling process a target? The daemon seeds target_processes from
 * --pid and --comm; the lifecycle programs keep it current; --cgroup
 * targets are matched against the caller's cgroup ancestors.
 */
#pragma once

#if SP_TASK_BTF
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
#else
/* Where tracing programs lack bpf_get_current_ancestor_cgroup_id (5.10,
 * say; variant.h ties this to task_access=core_read): walk up from the
 * caller's cgroup2 cgroup, reading each ancestor's id (its kernfs node's)
 * at the levels a target is on. */
static __always_inline bool in_target_cgroup(__u32 levels)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	int level = cg ? BPF_CORE_READ(cg, level) : -1;

	for (int i = 0; i <= SP_MAX_CGROUP_LEVEL; i++) {
		if (!cg || level < 0 || level > SP_MAX_CGROUP_LEVEL)
			return false;
		if (levels & (1u << level)) {
			__u64 id = BPF_CORE_READ(cg, kn, id);
			if (id && bpf_map_lookup_elem(&target_cgroups, &id))
				return true;
		}
		struct cgroup_subsys_state *parent = BPF_CORE_READ(cg, self.parent);
		cg = parent ? BPF_CORE_READ(parent, cgroup) : NULL;
		level--;
	}
	return false;
}
#endif

/* Is thread pid_tgid traced? Cheapest checks first. */
static __always_inline bool is_target_thread(const struct probe_config *cfg, __u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (tgid == cfg->self_tgid)
		return false;
	if (!(cfg->filter_flags & SP_FILTER_TARGETS))
		return true;
	__u32 *flags = bpf_map_lookup_elem(&target_processes, &tgid);
	if (flags) {
		if (!(*flags & SP_TARGET_THREADS_ONLY))
			return true;
		__u32 tid = (__u32)pid_tgid;
		return bpf_map_lookup_elem(&target_threads, &tid) != NULL;
	}
	if (cfg->filter_flags & SP_FILTER_CGROUPS)
		return in_target_cgroup(cfg->cgroup_levels);
	return false;
}

/* Is process tgid (any of its threads) traced? */
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
