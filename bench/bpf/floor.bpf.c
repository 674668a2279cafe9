// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * The floor for benchmarks: empty programs on the tracepoints sonic-probe
 * uses. What a system call costs with these attached is the price of
 * attaching at all (the kernel's slow path into raw tracepoints and the
 * BPF trampoline); sonic-probe's own cost is measured against it.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("tp_btf/sys_enter")
int BPF_PROG(floor_enter, struct pt_regs *regs, long id)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(floor_exit, struct pt_regs *regs, long ret)
{
	return 0;
}

SEC("uprobe")
int floor_uprobe(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int floor_uretprobe(struct pt_regs *ctx)
{
	return 0;
}
