#!/usr/bin/env python3
"""A stand-in for the Sonic talking-head service, for sonic-probe's tests and demo.

It handles REQUESTS requests the way the field service did (faulty) or the
way it should (healthy), with the system calls the five problems of
docs/scenarios.md are made of:

  faulty, per request                      healthy
  1. opens lip_decoder.pth again, reads it   model opened, read and mapped once, kept
  2. maps the model and unmaps it again      -
  3. reads its speech.mp3 1 KiB at a time    one read of the whole file
  4. the main (request) thread waits STALL   an idle pool of workers blocked on a
     seconds on a lock the "loader" thread    queue for the whole run, and GIL-like
     holds                                    5 ms timed waits that time out
  5. tries a model path that does not exist  no missing files
  and reads its face.png in one 8 KiB call, like the field service. Every
  request has its own input files (data/req-N/), as in the field.

With --wait-go it sets everything up (files, threads), prints "ready" and
waits for a byte on stdin before the first request, so that a probe can
attach to exactly the requests. At the end it prints elapsed=SECONDS (from
the first request to the last) and, healthy, timed_waits=N (its 5 ms waits,
each of which timed out).
"""

import argparse
import ctypes
import mmap
import os
import queue
import sys
import threading
import time

MODEL_BYTES = 32 << 20  # larger than sonic-probe's 16 MiB large-mapping default
AUDIO_BYTES = 64 << 10
IMAGE_BYTES = 8 << 10
CHUNK = 1024

_libc = ctypes.CDLL(None, use_errno=True)


def name_thread(name):
    """Sets this thread's kernel name (comm), as PyTorch does for its threads."""
    _libc.prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)  # PR_SET_NAME


def paths(root, request):
    req = os.path.join(root, "data", f"req-{request}")
    return {
        "model": os.path.join(root, "models", "sonic", "lip_decoder.pth"),
        "missing": os.path.join(root, "models", "sonic", "lip_decoder_v2.pth"),
        "audio": os.path.join(req, "speech.mp3"),
        "image": os.path.join(req, "face.png"),
    }


def make_files(root, requests):
    model = paths(root, 0)["model"]
    os.makedirs(os.path.dirname(model), exist_ok=True)
    with open(model, "wb") as f:
        f.truncate(MODEL_BYTES)
    for i in range(requests):
        p = paths(root, i)
        os.makedirs(os.path.dirname(p["audio"]), exist_ok=True)
        with open(p["audio"], "wb") as f:
            f.write(b"ID3" + bytes(AUDIO_BYTES - 3))
        with open(p["image"], "wb") as f:
            f.write(b"\x89PNG" + bytes(IMAGE_BYTES - 4))


class Loader(threading.Thread):
    """The data-loader thread: holds the model lock for `stall` seconds per job."""

    def __init__(self, lock, stall):
        super().__init__(daemon=True)
        self.lock, self.stall = lock, stall
        self.jobs, self.holding = queue.Queue(), threading.Event()

    def run(self):
        name_thread("loader")
        while True:
            job = self.jobs.get()
            if job is None:
                return
            with self.lock:
                self.holding.set()
                time.sleep(self.stall)
            job.set()


def read_image(p):
    fd = os.open(p["image"], os.O_RDONLY)
    os.read(fd, IMAGE_BYTES)  # one 8 KiB read
    os.close(fd)


def faulty_request(p, lock, loader):
    # 1 + 2: the model, reloaded and remapped on every request.
    fd = os.open(p["model"], os.O_RDONLY)
    while os.read(fd, 1 << 20):
        pass
    mapped = mmap.mmap(fd, MODEL_BYTES, access=mmap.ACCESS_READ)
    os.close(fd)
    # 3: the audio, 1 KiB at a time.
    fd = os.open(p["audio"], os.O_RDONLY)
    while os.read(fd, CHUNK):
        pass
    os.close(fd)
    read_image(p)
    # 4: the request thread waits for the lock the loader holds.
    done = threading.Event()
    loader.holding.clear()
    loader.jobs.put(done)
    loader.holding.wait()
    with lock:
        pass
    done.wait()
    # 5: a model path that does not exist.
    try:
        os.open(p["missing"], os.O_RDONLY)
    except FileNotFoundError:
        pass
    mapped.close()  # the framework frees the model after the request


def pool_worker(tasks):
    name_thread("pool-worker")
    while tasks.get() is not None:
        pass


def healthy(root, requests, stall):
    model_fd = os.open(paths(root, 0)["model"], os.O_RDONLY)
    while os.read(model_fd, 1 << 20):
        pass
    model = mmap.mmap(model_fd, MODEL_BYTES, access=mmap.ACCESS_READ)
    tasks = queue.Queue()
    pool = [threading.Thread(target=pool_worker, args=(tasks,)) for _ in range(4)]
    for t in pool:
        t.start()
    gil = threading.Condition()
    timed_waits = 0
    for i in range(requests):
        p = paths(root, i)
        fd = os.open(p["audio"], os.O_RDONLY)
        os.read(fd, AUDIO_BYTES + 1)  # the whole file at once
        os.close(fd)
        read_image(p)
        # GIL-like: the request thread polls with 5 ms timed waits that time out.
        deadline = time.monotonic() + stall
        with gil:
            while time.monotonic() < deadline:
                gil.wait(0.005)
                timed_waits += 1
    for _ in pool:
        tasks.put(None)
    for t in pool:
        t.join()
    model.close()
    os.close(model_fd)
    return timed_waits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["faulty", "healthy"])
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--stall", type=float, default=1.5, help="seconds the loader holds the lock (faulty), or the request thread polls (healthy)")
    ap.add_argument("--dir", default="/tmp/sonic-sim")
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--name", help="process name (comm) to run under, to tell it from other python3 processes")
    args = ap.parse_args()
    if args.name:
        name_thread(args.name)

    make_files(args.dir, args.requests)
    lock = threading.Lock()
    loader = Loader(lock, args.stall)
    if args.mode == "faulty":
        loader.start()
    if args.wait_go:
        print("ready", flush=True)
        sys.stdin.buffer.read(1)
    start = time.monotonic()
    if args.mode == "faulty":
        for i in range(args.requests):
            faulty_request(paths(args.dir, i), lock, loader)
        loader.jobs.put(None)
        loader.join()
    else:
        # Each of these waits timed out (ETIMEDOUT): the tests count them.
        print(f"timed_waits={healthy(args.dir, args.requests, args.stall)}", flush=True)
    # The requests' own time (the benchmark's mixed workload: no tracer's or
    # interpreter's start-up in it).
    print(f"elapsed={time.monotonic() - start:.6f}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
