"""The request loop of `cargo xtask gpu-check` (xtask/src/gpu_check.rs), for
a machine with an NVIDIA GPU, its driver and PyTorch: each step runs a few
large matrix products on the GPU and reads a scalar back with `.item()`, the
classic needless synchronize, under PyTorch's own profiler, whose count of
the CUDA runtime calls is the check's oracle.

`gpu_check.py SECONDS`: names itself sp-gpu-check; initialises CUDA (the
runtime library is mapped then), prints "loaded"; after a go byte on stdin
runs steps for SECONDS under the profiler, prints "done" and a JSON line of
the runtime calls the profiler saw, by name; exits after another go byte.
If CUDA is not usable it prints "unusable: REASON" and exits 3."""

import ctypes
import json
import os
import sys
import time


def go():
    if not os.read(0, 1):
        os._exit(0)


def say(line):
    print(line, flush=True)


def step(torch, a, b):
    c = a @ b
    for _ in range(3):
        c = c @ b
    return c.sum().item()  # sp-sync-line


def main():
    seconds = float(sys.argv[1])
    ctypes.CDLL(None).prctl(15, b"sp-gpu-check", 0, 0, 0)  # PR_SET_NAME
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as e:
        say(f"unusable: PyTorch is not importable: {e}")
        sys.exit(3)
    if not torch.cuda.is_available():
        say(f"unusable: torch {torch.__version__} sees no CUDA device")
        sys.exit(3)
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev) / 64
    b = torch.randn(4096, 4096, device=dev) / 64
    step(torch, a, b)
    torch.cuda.synchronize()
    say(f"loaded {torch.__version__} {torch.cuda.get_device_name(0)}")
    go()
    steps = 0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            step(torch, a, b)
            steps += 1
    calls = {}
    for e in prof.events():
        if e.name.startswith("cu"):
            calls[e.name] = calls.get(e.name, 0) + 1
    say("done")
    say(json.dumps({"steps": steps, "calls": calls}))
    go()


main()
