/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Bucket numbers without loops or a clz instruction (BPF has none).
 *
 * Without branches too: each `(v > C)` of the usual binary search becomes
 * a conditional jump in BPF, and the verifier walks both sides of each
 * with a different known value, then keeps them apart (the bucket number
 * is an array index, so precise): 32 walks of everything after every
 * bucket computed, two per call (latency and size), which was most of
 * sys_exit's 436,503 verified instructions (BPF_LOG_LEVEL2 counts, by
 * source line). Computed with adds and shifts, the verifier sees one
 * bounded unknown and walks on once. */
#pragma once

/* 1 if v (below 2^32) is not 0, else 0: v + (2^32 - 1) carries into bit 32
 * exactly when v >= 1. The empty asm keeps clang from folding it back into
 * a compare (a conditional jump in BPF). */
static __always_inline __u64 sp_nonzero32(__u64 v)
{
	__u64 sum = v + 0xFFFFFFFFULL;

	asm volatile("" : "+r"(sum));
	return sum >> 32;
}

/* ceil(log2(v)) for v >= 2, 0 for v <= 1. */
static __always_inline __u32 ceil_log2(__u64 v)
{
	if (v <= 1)
		return 0;
	v -= 1;
	__u64 r, shift;

	r = sp_nonzero32(v >> 32) << 5; v >>= r;
	shift = sp_nonzero32(v >> 16) << 4; v >>= shift; r |= shift;
	shift = sp_nonzero32(v >> 8) << 3; v >>= shift; r |= shift;
	shift = sp_nonzero32(v >> 4) << 2; v >>= shift; r |= shift;
	shift = sp_nonzero32(v >> 2) << 1; v >>= shift; r |= shift;
	r |= (v >> 1) & 1;
	return r + 1;
}
