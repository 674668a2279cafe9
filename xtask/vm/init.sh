#!/bin/busybox sh
# PID 1 of the `cargo xtask vmtest` guest (see xtask/src/vmtest.rs): mounts
# what sonic-probe and its tests need, runs the test binaries listed in
# /vmtest/plan (one "BINARY TEST [retry]" a line), prints each outcome and the
# result on the serial console, powers off.
#
# Lines starting with SONIC-VMTEST- are read by xtask; keep them in step.

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
# Kernel messages would cut into the test output on the same console.
echo 1 >/proc/sys/kernel/printk

echo "SONIC-VMTEST-KERNEL $(uname -r)"
[ -e /sys/kernel/btf/vmlinux ] || echo "SONIC-VMTEST-WARNING no /sys/kernel/btf/vmlinux"

export SONIC_PROBE_BIN=/vmtest/target/sonic-probe SONIC_PROBE_REQUIRE_PRIVILEGED=1 RUST_BACKTRACE=1
# One test per run, so that each has its own start and end on the console.
# Output goes through a pipe, as under CI: a test's children inherit
# stdout and stderr, and a terminal there behaves differently (`trace -y`
# names a pipe but not a tty its process closed).
# A test that hangs is killed after $TEST_TIMEOUT s, and the others still run.
TEST_TIMEOUT=180
set -o pipefail
run() {
    timeout "$TEST_TIMEOUT" "/vmtest/target/deps/$1" --exact --test-threads=1 "$2" </dev/null 2>&1 | cat
    rc=$?
    [ "$rc" -ne 143 ] || echo "SONIC-VMTEST-TIMEOUT $1::$2 killed after $TEST_TIMEOUT s"
    return "$rc"
}
boot_log=$(dmesg | wc -l)
failed=0
while read -r bin test retry; do
    [ -n "$test" ] || continue
    echo "SONIC-VMTEST-TEST $bin::$test"
    if run "$bin" "$test"; then
        echo "SONIC-VMTEST-DONE $bin::$test ok"
    elif [ "$retry" = retry ] && echo "SONIC-VMTEST-RETRY $bin::$test" && run "$bin" "$test"; then
        echo "SONIC-VMTEST-DONE $bin::$test ok-on-retry"
    else
        echo "SONIC-VMTEST-DONE $bin::$test FAILED"
        failed=$((failed + 1))
    fi
done </vmtest/plan

# Kernel warnings and errors logged while the tests ran (the console hid them).
dmesg -r | tail -n +$((boot_log + 1)) | grep '^<[0-4]>' | sed 's/^/SONIC-VMTEST-KERNEL-LOG /'

if [ "$failed" -eq 0 ]; then
    echo "SONIC-VMTEST-RESULT pass"
else
    echo "SONIC-VMTEST-RESULT fail $failed"
fi
sync
poweroff -f
# Should poweroff fail, PID 1 exiting panics the kernel: with panic=-1 and
# qemu's -no-reboot that ends the VM too.
sleep 5
