"""Connects that fail, for tests/tests/diagnoses.rs (a model store that
refuses, times out, or a Unix socket nobody serves).

`connect_failures.py ROUNDS GAP TARGET...`: prints "ready", waits for a byte
on stdin, then ROUNDS times, GAP seconds apart, connects a new socket to each
TARGET, closing it after: `tcp:HOST:PORT` (blocking), `syn1:HOST:PORT`
(blocking, one SYN retry: a connect that times out gives up after 3 s),
`nonblock:HOST:PORT` (non-blocking: EINPROGRESS, or connected at once) or
`unix:PATH`. Failures
are expected and ignored. Prints "done"."""

import socket
import sys
import time


def connect(target):
    kind, _, rest = target.partition(":")
    if kind == "unix":
        s, addr = socket.socket(socket.AF_UNIX), rest
    else:
        host, _, port = rest.rpartition(":")
        s, addr = socket.socket(), (host, int(port))
        s.setblocking(kind != "nonblock")
        if kind == "syn1":
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, 1)
    with s:
        s.connect_ex(addr)


def main():
    rounds, gap, targets = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    print("ready", flush=True)
    sys.stdin.read(1)
    for i in range(rounds):
        if i:
            time.sleep(gap)
        for t in targets:
            connect(t)
    print("done", flush=True)


if __name__ == "__main__":
    main()
