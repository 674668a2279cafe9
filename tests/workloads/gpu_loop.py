"""A sync-bound Python request loop for the gpu_wait tests
(tests/tests/gpu.rs): infer() calls the stand-in libcuda.so.1's
cuStreamSynchronize through ctypes, as a PyTorch loop's `.item()` waits in
CUDA's synchronize, so that the finding's Python line can be checked
against this file (the line marked `sp-sync-line`).

`gpu_loop.py NAME LIB STEP...`: sets its name to NAME, and after a go byte
on stdin each time: prints "ready"; (go) loads LIB, prints "loaded"; (go)
runs the steps, prints "done"; (go) exits. A step is `sync:N:MS` (N
synchronizes of MS milliseconds each, back to back) or `sleep:MS`."""

import ctypes
import os
import sys
import time


def go():
    if not os.read(0, 1):
        os._exit(0)


def say(line):
    print(line, flush=True)


def infer(cuda, ms):
    return cuda.cuStreamSynchronize(ctypes.c_void_p(ms))  # sp-sync-line


def main():
    name, lib, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    libc = ctypes.CDLL(None)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    say("ready")
    go()
    cuda = ctypes.CDLL(lib)
    cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    say("loaded")
    go()
    for step in steps:
        kind, *args = step.split(":")
        if kind == "sync":
            for _ in range(int(args[0])):
                infer(cuda, int(args[1]))
        else:
            time.sleep(int(args[0]) / 1000)
    say("done")
    go()


main()
