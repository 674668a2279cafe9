"""A writer that fills its disk, for tests/tests/diagnoses.rs.

`fill_disk.py PATH TRIES GAP`: prints "ready", waits for a byte on stdin,
opens PATH for writing and writes 4 KiB blocks until the filesystem is full
(ENOSPC), then TRIES more times, GAP seconds apart, tries write, pwrite64
and writev in turn, each failing with ENOSPC. Prints "done"."""

import errno
import os
import sys
import time


def main():
    path, tries, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    block = b"\0" * 4096
    print("ready", flush=True)
    sys.stdin.read(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            os.write(fd, block)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    calls = [lambda: os.write(fd, block), lambda: os.pwrite(fd, block, 1 << 20), lambda: os.writev(fd, [block])]
    for i in range(tries):
        time.sleep(gap)
        try:
            calls[i % 3]()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    os.close(fd)
    print("done", flush=True)


if __name__ == "__main__":
    main()
