"""Fetches NVIDIA's CUDA runtime library from PyPI, pinned, for the GPU tests
(sonic_probe_tests::cuda_runtime) and the benchmark's GPU section: its
libcudart.so.12 is the real library (without a driver each call returns an
error at once, through its real entry points).

`fetch_cuda_runtime.py DIR`: unless DIR/site-packages holds it already,
downloads the wheel with pip and unpacks it there, as a virtualenv's
site-packages would hold it (nvidia/cuda_runtime/lib/libcudart.so.12);
prints the library's path. Unpacked aside and renamed into place, so that
fetches running at once race harmlessly."""

import os
import shutil
import subprocess
import sys
import zipfile

PACKAGE = "nvidia-cuda-runtime-cu12==12.9.79"
LIB = "site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"


def main():
    target = sys.argv[1]
    lib = os.path.join(target, LIB)
    if not os.path.exists(lib):
        tmp = os.path.join(target, f"tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        wheels = os.path.join(tmp, "wheel")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", wheels, PACKAGE],
            check=True,
        )
        wheel = next(os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl"))
        site = os.path.join(tmp, "site-packages")
        zipfile.ZipFile(wheel).extractall(site)
        try:
            os.rename(site, os.path.join(target, "site-packages"))
        except OSError:
            pass  # another fetch was first
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.exists(lib):
            sys.exit(f"{lib} missing after unpacking {wheel}")
    print(lib)


main()
