"""A writer that fills its disk, for tests/tests/diagnoses.rs.

`fill_disk.py PATH TRIES GAP [BLOCK]`: prints "ready", waits for a byte on
stdin, opens PATH for writing and writes blocks of BLOCK bytes (default
4096) until the filesystem is full (ENOSPC), then TRIES more times, GAP
seconds apart:
- without BLOCK, tries write, pwrite64 and writev in turn, each failing
  with ENOSPC;
- with BLOCK, frees the last block written (ftruncate, the file offset
  left where it was) and writes two blocks with write or pwrite64 in turn:
  the first is short (only the pages freed are left), the second fails
  with ENOSPC.
Prints "done"."""

import errno
import os
import sys
import time


def main():
    path, tries, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    short = len(sys.argv) > 4
    block = b"\0" * (int(sys.argv[4]) if short else 4096)
    print("ready", flush=True)
    sys.stdin.read(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    end = 0
    try:
        while True:
            end += os.write(fd, block)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    if short:
        calls = [lambda at: os.write(fd, block), lambda at: os.pwrite(fd, block, at)]
    else:
        calls = [lambda at: os.write(fd, block), lambda at: os.pwrite(fd, block, 1 << 20), lambda at: os.writev(fd, [block])]
    for i in range(tries):
        time.sleep(gap)
        call = calls[i % len(calls)]
        if short:
            os.ftruncate(fd, end - len(block))
            end += call(end)
            os.lseek(fd, end, os.SEEK_SET)
        try:
            call(end)
            assert not short, "the disk was full"
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    os.close(fd)
    print("done", flush=True)


if __name__ == "__main__":
    main()
