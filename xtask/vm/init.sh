#!/bin/busybox sh
# PID 1 of the `cargo xtask vmtest` guest (see xtask/src/vmtest/mod.rs): mounts
# what sonic-probe and its tests need, exports /vmtest/env (--env), then runs
# /vmtest/command (`-- COMMAND`) if there is one, or else the test binaries
# listed in /vmtest/plan (one "BINARY TEST RETRY" a line, RETRY one of -, retry
# and retry-flaky-ok), prints each outcome, the kernel's warnings and the
# result on the serial console, powers off.
#
# Lines starting with SONIC-VMTEST- are read by xtask (guest.rs); keep them in
# step.

/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /run /root
# --install finds busybox through /proc/self/exe.
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin HOME=/root TMPDIR=/tmp

mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# /tmp stays on the initramfs (already writable): a repository cloned under
# /tmp has its files there, which a tmpfs mounted on /tmp would hide.
chmod 1777 /tmp
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf
ip link set lo up
# Kernel messages would cut into the test output on the same console: only
# warnings and worse reach it (a lockup's report and backtraces among them,
# which xtask reads there: a locked-up guest never runs kernel_log below).
echo 5 >/proc/sys/kernel/printk

echo "SONIC-VMTEST-KERNEL $(uname -r)"
# FUSE, a module in some of these kernels, for the tests' slow filesystem.
if [ -f "/lib/modules/$(uname -r)/fuse.ko" ]; then
    insmod "/lib/modules/$(uname -r)/fuse.ko" || echo "SONIC-VMTEST-WARNING cannot load fuse.ko"
fi
[ -e /sys/kernel/btf/vmlinux ] || echo "SONIC-VMTEST-WARNING no /sys/kernel/btf/vmlinux"

export SONIC_PROBE_BIN=/vmtest/target/sonic-probe SONIC_PROBE_REQUIRE_PRIVILEGED=1 RUST_BACKTRACE=1
# Tests whose oracle's conventions drift under emulation say so (threads.rs).
export SONIC_PROBE_UNDER_TCG=1
# --env NAME=VALUE, after the defaults above so that it can change them.
[ -f /vmtest/env ] && . /vmtest/env
set -o pipefail
# From here on, the kernel's log is what the tests (or the command) caused.
dmesg -c >/dev/null

# Kernel messages of level warning or worse since `dmesg -c`; any WARNING,
# BUG, oops or call trace (a WARN_ON, say, in the verifier) is named apart:
# xtask fails the run on those.
kernel_log() {
    dmesg -r >/tmp/kernel.log
    grep '^<[0-4]>' /tmp/kernel.log | sed 's/^/SONIC-VMTEST-KERNEL-LOG /'
    grep -E 'WARNING:|BUG:|kernel BUG|Oops|Call Trace|general protection fault' /tmp/kernel.log |
        sed 's/^/SONIC-VMTEST-KERNEL-BUG /'
}

finish() {
    sync
    poweroff -f
    # Should poweroff fail, PID 1 exiting panics the kernel: with panic=-1
    # and qemu's -no-reboot that ends the VM too.
    sleep 5
    exit 1
}

if [ -f /vmtest/command ]; then
    # Our binaries on PATH, ahead of the rest.
    export PATH=/vmtest/target:$PATH
    cd /root
    echo "SONIC-VMTEST-COMMAND $(tail -n 1 /vmtest/command | sed 's/^exec //')"
    # Through a pipe (as for the tests): no terminal, stdout and stderr in one.
    sh /vmtest/command </dev/null 2>&1 | cat
    rc=$?
    echo "SONIC-VMTEST-COMMAND-EXIT $rc"
    kernel_log
    finish
fi

# One test per run, so that each has its own start and end on the console.
# Output goes through a pipe, as under CI: a test's children inherit
# stdout and stderr, and a terminal there behaves differently (`trace -y`
# names a pipe but not a tty its process closed).
# A test that hangs is killed after $TEST_TIMEOUT s, and the others still run.
TEST_TIMEOUT=180
run() {
    timeout "$TEST_TIMEOUT" "/vmtest/target/deps/$1" --exact --test-threads=1 "$2" </dev/null 2>&1 |
        tee /tmp/vmtest-test.out
    rc=$?
    [ "$rc" -ne 143 ] || echo "SONIC-VMTEST-TIMEOUT $1::$2 killed after $TEST_TIMEOUT s"
    return "$rc"
}
failed=0
while read -r bin test retry; do
    [ -n "$test" ] || continue
    echo "SONIC-VMTEST-TEST $bin::$test"
    if run "$bin" "$test"; then
        result=ok
    elif [ "$retry" != retry ] && [ "$retry" != retry-flaky-ok ]; then
        result=FAILED
    elif ! grep -q SONIC-TIMING /tmp/vmtest-test.out; then
        # Only a failed timing bound is retried, never a wrong count: the
        # tests mark their timing assertions' messages (sonic_probe_tests::
        # TIMING).
        echo "SONIC-VMTEST-NO-RETRY $bin::$test: not a timing failure"
        result=FAILED
    else
        echo "SONIC-VMTEST-RETRY $bin::$test"
        if ! run "$bin" "$test"; then
            result=FAILED
        elif [ "$retry" = retry-flaky-ok ]; then
            # Passed on the retry, and allowed to (xtask's ALLOWED_FLAKY).
            result=ok-on-retry
        else
            # Passed on the retry only: flaky, a failure.
            result=FLAKY
        fi
    fi
    echo "SONIC-VMTEST-DONE $bin::$test $result"
    case "$result" in
    ok | ok-on-retry) ;;
    *) failed=$((failed + 1)) ;;
    esac
done </vmtest/plan

kernel_log

if [ "$failed" -eq 0 ]; then
    echo "SONIC-VMTEST-RESULT pass"
else
    echo "SONIC-VMTEST-RESULT fail $failed"
fi
finish
