"""A Python inference service stand-in for the stack readers' tests
(tests/tests/stack_readers.rs): a loader thread holds `model_lock` in
load_weights() and the main thread blocks on it in infer(). Prints "ready"
once the loader holds the lock; exits after 30 s or when stdin closes.

`stand_in_lock.py HOLDS` (the daemon's capture tests, tests/tests/stacks.rs):
HOLDS is a comma-separated list of seconds, e.g. `1.5` or `0.8,1.4`. It
prints "ready", waits for SIGUSR1 (so that a tracer can attach first), then
stalls once per hold: the loader holds the lock that long while infer()
waits for it; then it prints "done" and exits. With STAND_IN_HOLD_IN_C set
to the path of c_extension_hold.c built as a shared library, the loader
holds the lock in that library's hold_in_c() (native code, computing)
instead of in time.sleep."""

import ctypes
import os
import signal
import sys
import threading
import time

model_lock = threading.Lock()
held = threading.Event()
HOLD_IN_C = ctypes.CDLL(os.environ["STAND_IN_HOLD_IN_C"]) if os.environ.get("STAND_IN_HOLD_IN_C") else None


def load_weights(seconds=30):
    with model_lock:
        held.set()
        if HOLD_IN_C is not None:
            HOLD_IN_C.hold_in_c(ctypes.c_double(seconds))
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1 if seconds < 30 else 0.2)


def watch_stdin():
    while sys.stdin.buffer.read1(64) if hasattr(sys.stdin.buffer, "read1") else sys.stdin.read(1):
        pass
    os._exit(0)


def infer():
    with model_lock:
        return "done"


def stall_rounds(holds):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
    print("ready", flush=True)
    signal.sigwait({signal.SIGUSR1})
    for hold in holds:
        held.clear()
        loader = threading.Thread(target=load_weights, args=(hold,), name="loader", daemon=True)
        loader.start()
        held.wait()
        infer()
        loader.join()
    print("done", flush=True)
    os._exit(0)


def main():
    if len(sys.argv) > 1:
        stall_rounds([float(h) for h in sys.argv[1].split(",")])
    threading.Thread(target=load_weights, name="loader", daemon=True).start()
    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
    held.wait()
    print("ready", flush=True)
    infer()
    os._exit(0)


if __name__ == "__main__":
    main()
