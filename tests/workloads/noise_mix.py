#!/usr/bin/env python3
"""What a GPU node runs besides inference: the background the findings must stay quiet on.

sonic-probe watches the whole host by default, so its detectors see every
short-lived tool, interpreter start-up and cron-like job of the node, not only
the inference service. This mix reproduces that churn for the tests, the demo
and the benchmark (issue 15), each part as it really runs:

  shell      a bash loop running short-lived coreutils (ls, cat, date, wc,
             grep, sleep) with translated messages asked for
             (LANGUAGE=de_DE:fr_FR:de: a tool that prints a message looks up
             its catalogs under /usr/share/locale, missing for de_DE),
             commands that fail (ls of a missing path, cat of a config file
             that is not there), and redirections that close descriptors
             that were never open (close -> EBADF), and a write to a full
             device (date >/dev/full: write -> ENOSPC, once per tool)
  python     Python start-ups (python3 -c ...): interpreter, locale, a tool
             probing candidate config paths before it finds one, and its
             agent's sockets before it gives up on them (a Unix socket
             path with no file -> ENOENT, a local port nobody serves ->
             ECONNREFUSED)
  getent     name-service lookups (passwd, group, hosts)
  git        git status / log / rev-parse in a small repository (git probes
             its missing config files on every start)
  agent      a long-lived monitoring agent reading /proc and /sys every
             interval, like node_exporter or a GPU/DCGM agent
  statejob   a periodic job rewriting a state file (write a temporary file,
             rename it over the old one) and reading it back
  logrotate  a long-lived shell appending to a log, rotated and compressed
             when it has grown

--comm-prefix P runs every tool of the mix under a name starting with P
(through symlinks: ls runs as Pls, bash as Pbash, ...), so that a test on a
shared machine can tell the mix's findings from everything else's; the
tools behave the same under any name.

--load scales every rate (1 = the default; 10 = ten times as many tools,
start-ups and scans per second). The mix runs until --duration passes (0:
until SIGTERM/SIGINT) and takes every process it started with it: it leads
its own process group and kills the group when it ends.

Usage (the benchmark, the demo and the tests run it the same way):

  python3 tests/workloads/noise_mix.py [--load 1] [--duration 0] [--dir DIR] [--comm-prefix P]

It prints "ready" once every part has started.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Base intervals at load 1, in seconds.
SHELL_EVERY = 0.5
PYTHON_EVERY = 1.0
GETENT_EVERY = 1.0
GIT_EVERY = 1.5
AGENT_EVERY = 1.0
STATE_EVERY = 1.0
LOG_EVERY = 0.1
ROTATE_EVERY = 4.0

# Environment of the node's tools: translated messages asked for, so that
# every coreutils start looks up its message catalogs.
TOOL_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LANGUAGE": "de_DE:fr_FR:de",
    "HOME": "/nonexistent-home",
}

PYTHON_TOOL = r"""
import json, locale, os, socket, sys
locale.setlocale(locale.LC_ALL, "")
for family, addr in ((socket.AF_UNIX, "/run/nodetool/agent.sock"), (socket.AF_INET, ("127.0.0.1", 1))):
    with socket.socket(family) as s:
        s.connect_ex(addr)
for p in ("~/.config/nodetool/config.json", "/etc/nodetool/config.json", "/usr/etc/nodetool.json", "%s"):
    try:
        with open(os.path.expanduser(p)) as f:
            json.load(f)
        break
    except FileNotFoundError:
        continue
"""

AGENT = r"""
import ctypes, glob, os, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[2].encode()[:15], 0, 0, 0)
every = float(sys.argv[1])
def read(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return b""
while True:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            read(f"/proc/{pid}/stat")
            read(f"/proc/{pid}/status")
    for p in ("/proc/meminfo", "/proc/loadavg", "/proc/stat", "/proc/diskstats", "/proc/net/dev"):
        read(p)
    for p in glob.glob("/sys/class/net/*/statistics/*_bytes") + glob.glob("/sys/fs/cgroup/*.stat"):
        read(p)
    time.sleep(every)
"""


TOOLS = ["bash", "ls", "cat", "date", "wc", "grep", "sleep", "getent", "git", "mv", "gzip"]


def tool_dir(work, prefix):
    """A directory of PREFIX+tool links to the node's tools (PATH first)."""
    d = os.path.join(work, "bin")
    os.makedirs(d, exist_ok=True)
    for t in TOOLS + ["python3"]:
        real = sys.executable if t == "python3" else shutil.which(t, path=TOOL_ENV["PATH"])
        link = os.path.join(d, prefix + t)
        if real and not os.path.lexists(link):
            os.symlink(real, link)
    return d


def bash_loop(p, body, every, env, cwd):
    script = f"while :; do {body}; {p}sleep {every:.3f}; done"
    return subprocess.Popen([f"{p}bash", "-c", script], env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", type=float, default=1.0, help="rate multiplier (default 1)")
    ap.add_argument("--duration", type=float, default=0.0, help="seconds to run (0: until signalled)")
    ap.add_argument("--dir", help="working directory (default: a new temporary one, removed at the end)")
    ap.add_argument("--comm-prefix", default="", help="run every tool under a name starting with this")
    args = ap.parse_args()
    if args.load <= 0:
        ap.error("--load must be positive")

    if os.getpid() != os.getpgrp():
        os.setpgrp()
    own_dir = args.dir is None
    work = args.dir or tempfile.mkdtemp(prefix="sonic-noise-")
    os.makedirs(work, exist_ok=True)
    env = dict(TOOL_ENV)
    p = args.comm_prefix
    if p:
        env["PATH"] = tool_dir(work, p) + ":" + env["PATH"]
    scale = 1.0 / args.load

    # A small git repository and a config file the Python tool finds last.
    repo = os.path.join(work, "repo")
    if not os.path.isdir(os.path.join(repo, ".git")):
        os.makedirs(repo, exist_ok=True)
        git_env = dict(env, GIT_AUTHOR_NAME="n", GIT_AUTHOR_EMAIL="n@n", GIT_COMMITTER_NAME="n",
                       GIT_COMMITTER_EMAIL="n@n")
        with open(os.path.join(repo, "README"), "w") as f:
            f.write("node config\n")
        for cmd in (["git", "init", "-q"], ["git", "add", "README"], ["git", "commit", "-qm", "init"]):
            subprocess.run(cmd, cwd=repo, env=git_env, check=True, stdout=subprocess.DEVNULL)
    tool_conf = os.path.join(work, "nodetool.json")
    with open(tool_conf, "w") as f:
        f.write('{"interval": 1}\n')

    python = f"{p}python3" if p else (sys.executable or "python3")
    popen_env = dict(env)
    parts = [
        bash_loop(p, f"{p}ls /usr/share >/dev/null; {p}cat /etc/hostname >/dev/null; {p}date >/dev/null; "
                  f"{p}wc -l /etc/passwd >/dev/null; {p}grep -q root /etc/passwd; "
                  f"{p}ls /nonexistent-dir 2>/dev/null; {p}cat /etc/noise-tool.conf 2>/dev/null; exec 9>&-; true 8<&-; "
                  f"{p}date >/dev/full 2>/dev/null",
                  SHELL_EVERY * scale, env, work),
        bash_loop(p, f"{python} -c '{PYTHON_TOOL % tool_conf}'", PYTHON_EVERY * scale, env, work),
        bash_loop(p, f"{p}getent passwd root >/dev/null; {p}getent group root >/dev/null; "
                  f"{p}getent hosts localhost >/dev/null",
                  GETENT_EVERY * scale, env, work),
        bash_loop(p, f"{p}git -C {repo} status --short >/dev/null; {p}git -C {repo} log -1 --oneline >/dev/null; "
                  f"{p}git -C {repo} rev-parse HEAD >/dev/null",
                  GIT_EVERY * scale, env, work),
        subprocess.Popen([shutil.which(python, path=env["PATH"]) or python, "-c", AGENT,
                          f"{AGENT_EVERY * scale:.3f}", f"{p}node-agent"], env=popen_env, cwd=work,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        bash_loop(p, f"{p}date +%s > state.json.tmp && {p}mv -f state.json.tmp state.json; "
                  f"{p}cat state.json >/dev/null",
                  STATE_EVERY * scale, env, work),
        bash_loop(p, f'echo "$({p}date +%T) request served" >> app.log', LOG_EVERY * scale, env, work),
        bash_loop(p, f"if [ -f app.log ]; then {p}mv -f app.log app.log.1 && {p}gzip -f app.log.1; fi",
                  ROTATE_EVERY * scale, env, work),
    ]

    def stop(*_):
        # Everything this mix started is in its process group.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            os.killpg(os.getpgrp(), signal.SIGTERM)
        except ProcessLookupError:
            pass
        for p in parts:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
        if any(p.poll() is not None for p in parts):
            print("a part of the mix exited", file=sys.stderr, flush=True)
            break
    stop()


if __name__ == "__main__":
    main()
