/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/* Bucket numbers without loops or a clz instruction (BPF has none). */
#pragma once

/* ceil(log2(v)) for v >= 2, 0 for v <= 1. */
static __always_inline __u32 ceil_log2(__u64 v)
{
	if (v <= 1)
		return 0;
	v -= 1;
	__u32 r = 0, shift;

	shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r + 1;
}
