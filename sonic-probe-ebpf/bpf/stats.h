/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Exact aggregation: every traced call lands in its statistics under its
 * process name and (with workloads on) its cgroup, per CPU; a failure with
 * the errno its entry counts on that CPU (the first it saw) there too,
 * other failures in syscall_errors. The first few hundred keys get a slot of a per-CPU
 * array (stats_slots; stats_index gives each key its slot once, and each
 * thread caches the slots it uses), so their calls pay no hash lookup;
 * later keys count in the per-CPU hash syscall_stats. When that is full
 * (or the kernel cannot allocate an entry) the call goes to the overflow
 * entry of its syscall (empty name; the daemon created those), so totals
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
	/* 1 if it is a short call (short_io_of), else 0: added as it is. */
	__u64 short_io;
	bool failed;
	bool has_size;
	bool small;
};

/* 1 if the call of row idx is one whose short calls count (count_short)
 * and returned fewer bytes than it asked without an error (0 <= ret <
 * asked), else 0. Arithmetic only, no branch: sign bits of differences (a
 * size past 2^63 is no size a write is given). A branch here would split
 * the verifier's walk of everything after it in sys_exit. */
static __always_inline __u64 short_io_of(int idx, long ret, __u64 asked)
{
	__u64 row = ((__u64)SP_COUNT_SHORT_MASK >> (idx & 31)) & 1;
	__u64 not_failed = ~(__u64)ret >> 63;
	__u64 fewer = (__u64)(ret - (long)asked) >> 63;

	return row & not_failed & fewer;
}

/* The slot of key in stats_slots plus one: its stats_index entry, made
 * now if this is its first call; SP_SLOT_IN_HASH when there is no slot
 * for it (all taken, or the index full): it counts in syscall_stats.
 *
 * A new slot is claimed by entering it in stats_claims (BPF_NOEXIST: one
 * CPU wins), not by an atomic fetch-and-add, which 5.10's BPF lacks;
 * stats_taken is the hint where free slots begin. */
static __always_inline __u32 slot_of(const struct stats_key *key)
{
	__u32 *found = bpf_map_lookup_elem(&stats_index, key);
	if (found)
		return *found + 1;

	__u32 zero = 0;
	__u64 *taken = bpf_map_lookup_elem(&stats_taken, &zero);
	if (!taken)
		return SP_SLOT_IN_HASH;
	__u64 first = *(volatile __u64 *)taken;
	for (__u32 i = 0; i < 4; i++) {
		__u32 slot = first + i;
		/* Beyond the array the daemon sized: all taken. */
		if (first + i >= SP_MAX_STATS_SLOTS || !bpf_map_lookup_elem(&stats_slots, &slot))
			break;
		__u32 one = 1;
		if (bpf_map_update_elem(&stats_claims, &slot, &one, BPF_NOEXIST))
			continue; /* another CPU's */
		__sync_fetch_and_add(taken, i + 1);
		if (!bpf_map_update_elem(&stats_index, key, &slot, BPF_NOEXIST))
			return slot + 1;
		/* Another CPU entered the key first (the slot stays unused),
		 * or the index is full. */
		found = bpf_map_lookup_elem(&stats_index, key);
		if (found)
			return *found + 1;
		break;
	}
	return SP_SLOT_IN_HASH;
}

/* Same process name and workload as the thread's cached slots? Compared
 * in 4-byte words: comm sits at offset 4 of the key. */
static __always_inline bool same_identity(const struct thread_state *st, const struct stats_key *key)
{
	const __u32 *a = (const __u32 *)key->comm, *b = (const __u32 *)st->stats_comm;

	return st->stats_cgroup == key->cgroup && a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* The statistics of key in syscall_stats (made if new); when that map is
 * full, its syscall's overflow entry the daemon created (empty name). */
static __always_inline struct syscall_stats *hashed_stats_of(const struct stats_key *key)
{
	struct syscall_stats *s = bpf_map_lookup_elem(&syscall_stats, key);

	if (s)
		return s;
	__u32 zero_idx = 0;
	struct syscall_stats *zero = bpf_map_lookup_elem(&zero_stats, &zero_idx);

	if (zero)
		bpf_map_update_elem(&syscall_stats, key, zero, BPF_NOEXIST);
	s = bpf_map_lookup_elem(&syscall_stats, key);
	if (s)
		return s;
	struct stats_key overflow = { .syscall = key->syscall };

	s = bpf_map_lookup_elem(&syscall_stats, &overflow);
	if (!s) {
		count(SP_COUNTER_DROP_STATS);
		return NULL;
	}
	count(SP_COUNTER_STATS_OVERFLOW);
	return s;
}

/* The statistics of key, through the thread's slot cache: a hit costs a
 * compare and a per-CPU array index (inlined by the verifier on newer
 * kernels), a miss one stats_index lookup as a hash of the key would. Keys
 * without a slot pay the hash lookup in syscall_stats. */
static __always_inline struct syscall_stats *stats_of(struct thread_state *st, const struct stats_key *key)
{
	if (!same_identity(st, key)) {
		st->stats_cgroup = key->cgroup;
		__builtin_memcpy(st->stats_comm, key->comm, SP_COMM_LEN);
		for (int i = 0; i < SP_STATS_SLOT_CACHE; i++)
			st->slot_cache[i].slot_plus_one = 0;
	}
	struct stats_slot *e = &st->slot_cache[(key->syscall * 5 + key->variant) & (SP_STATS_SLOT_CACHE - 1)];
	__u32 slot_plus_one;
	if (e->slot_plus_one && e->syscall == key->syscall && e->variant == key->variant) {
		slot_plus_one = e->slot_plus_one;
	} else {
		slot_plus_one = slot_of(key);
		e->syscall = key->syscall;
		e->variant = key->variant;
		e->slot_plus_one = slot_plus_one;
	}
	if (slot_plus_one == SP_SLOT_IN_HASH)
		return hashed_stats_of(key);
	__u32 slot = slot_plus_one - 1;
	struct syscall_stats *s = bpf_map_lookup_elem(&stats_slots, &slot);
	if (!s)
		count(SP_COUNTER_DROP_STATS);
	return s;
}

/* Adds a finished call (that returned ret) to its statistics. Returns
 * whether its failure (if it failed) is counted there too: with the errno
 * the entry counts on this CPU (its first), so that syscall_errors needs
 * no lookup. */
static __always_inline bool add_stats(struct thread_state *st, const struct stats_key *key,
				      const struct call_sample *c, long ret)
{
	struct syscall_stats *s = stats_of(st, key);
	bool failure_counted = false;

	if (!s)
		return false;
	s->total_ns += c->duration_ns;
	s->bytes += c->bytes;
	if (c->failed) {
		s->errors += 1;
		__u64 errno = (__u16)(-ret);

		if (!s->first_errno)
			s->first_errno = errno;
		if (s->first_errno == errno) {
			s->first_errno_calls += 1;
			failure_counted = true;
		}
	}
	if (c->small)
		s->small += 1;
	s->short_calls += c->short_io;
	__u32 b = latency_bucket(c->duration_ns);
	if (b < SP_LATENCY_BUCKETS)
		s->latency[b] += 1;
	if (c->has_size) {
		s->size_total += c->size;
		b = size_bucket(c->size);
		if (b < SP_SIZE_BUCKETS)
			s->size[b] += 1;
	}
	return failure_counted;
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
