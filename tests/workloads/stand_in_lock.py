"""A Python inference service stand-in for the stack readers' tests
(tests/tests/stack_readers.rs): a loader thread holds `model_lock` in
load_weights() and the main thread blocks on it in infer(). Prints "ready"
once the loader holds the lock; exits after 30 s or when stdin closes."""

import os
import sys
import threading
import time

model_lock = threading.Lock()
held = threading.Event()


def load_weights():
    with model_lock:
        held.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.2)


def watch_stdin():
    while sys.stdin.buffer.read1(64) if hasattr(sys.stdin.buffer, "read1") else sys.stdin.read(1):
        pass
    os._exit(0)


def infer():
    with model_lock:
        return "done"


def main():
    threading.Thread(target=load_weights, name="loader", daemon=True).start()
    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
    held.wait()
    print("ready", flush=True)
    infer()
    os._exit(0)


if __name__ == "__main__":
    main()
