/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Exact aggregation: every traced call lands in syscall_stats (and every
 * failure in syscall_errors) under its process name and (with workloads on)
 * its cgroup, per CPU. When a map is
 * full (or the kernel cannot allocate an entry) the call goes to the
 * overflow entry of its syscall the daemon created (empty name), so totals
 * stay exact.
 */
#pragma once

#include "log2.h"

/* See LATENCY_BUCKETS. */
static __always_inline __u32 latency_bucket(__u64 ns)
{
	__u32 r = ceil_log2(ns);

	if (r <= SP_LATENCY_MIN_SHIFT)
		return 0;
	r -= SP_LATENCY_MIN_SHIFT;
	return r < SP_LATENCY_BUCKETS - 1 ? r : SP_LATENCY_BUCKETS - 1;
}

/* See SIZE_BUCKETS: powers of 4. */
static __always_inline __u32 size_bucket(__u64 bytes)
{
	__u32 r = (ceil_log2(bytes) + 1) / 2;

	return r < SP_SIZE_BUCKETS - 1 ? r : SP_SIZE_BUCKETS - 1;
}

/* What one finished call adds to its statistics. */
struct call_sample {
	__u64 duration_ns;
	__u64 bytes;
	__u64 size;
	bool failed;
	bool has_size;
	bool small;
};

static __always_inline void add_stats(struct stats_key *key, const struct call_sample *c)
{
	struct syscall_stats *s = bpf_map_lookup_elem(&syscall_stats, key);

	if (!s) {
		__u32 zero_idx = 0;
		struct syscall_stats *zero = bpf_map_lookup_elem(&zero_stats, &zero_idx);

		if (zero)
			bpf_map_update_elem(&syscall_stats, key, zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&syscall_stats, key);
		if (!s) {
			struct stats_key overflow = { .syscall = key->syscall };

			s = bpf_map_lookup_elem(&syscall_stats, &overflow);
			if (!s) {
				count(SP_COUNTER_DROP_STATS);
				return;
			}
			count(SP_COUNTER_STATS_OVERFLOW);
		}
	}
	s->total_ns += c->duration_ns;
	s->bytes += c->bytes;
	if (c->failed)
		s->errors += 1;
	if (c->small)
		s->small += 1;
	__u32 b = latency_bucket(c->duration_ns);
	if (b < SP_LATENCY_BUCKETS)
		s->latency[b] += 1;
	if (c->has_size) {
		s->size_total += c->size;
		b = size_bucket(c->size);
		if (b < SP_SIZE_BUCKETS)
			s->size[b] += 1;
	}
}

static __always_inline void add_error(const struct stats_key *skey, long ret)
{
	struct error_key key = {
		.syscall = skey->syscall,
		.errno = (__u16)(-ret),
	};
	__builtin_memcpy(key.comm, skey->comm, SP_COMM_LEN);
	key.cgroup = skey->cgroup;

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
