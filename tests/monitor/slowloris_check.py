"""Slow and half-open HTTP connections do not pin kclawd's descriptors.

    python3 slowloris_check.py PORT KCLAWD_PID TOKEN

1,000 connections each send half a request's headers and stop. Within a
few seconds kclawd holds at most the connection guard's cap of them
(monitor/mon_guard.c, MON_MAX_PENDING = 64, plus slack for the
scan interval), most of them see their connection closed, and a real
request is answered meanwhile. One connection that sends its headers a
byte a second is closed at the header deadline (10 s), not served.
"""

import os
import resource
import socket
import sys
import time
import urllib.request

port, pid, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
N = 1000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, N + 200)), hard))


def nfds():
    return len(os.listdir("/proc/%d/fd" % pid))


def health():
    req = urllib.request.Request("http://127.0.0.1:%d/api/health" % port)
    req.add_header("Authorization", "Bearer " + token)
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
    return time.monotonic() - t


base = nfds()
half = ("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % port).encode()
conns = []
for i in range(N):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(half)
    conns.append(s)
peak = nfds()
deadline = time.monotonic() + 8
while nfds() > base + 100 and time.monotonic() < deadline:
    time.sleep(0.1)
held = nfds() - base
print("kclawd fds: %d before, %d at the peak, %d more than before after the guard" % (base, peak, held))
assert held <= 100, "kclawd still holds %d more descriptors" % held
took = health()
print("a real request took %.3f s" % took)
assert took < 3, took
closed = 0
for s in conns:
    s.settimeout(0.01)
    try:
        if s.recv(1) == b"":
            closed += 1
    except (socket.timeout, BlockingIOError):
        pass
    except OSError:
        closed += 1
    s.close()
print("%d of %d slow connections were closed by kclawd" % (closed, N))
assert closed >= N - 100, closed

# The header deadline: a byte a second is not a request.
s = socket.create_connection(("127.0.0.1", port), timeout=1)
start = time.monotonic()
msg = half + b"a" * 100
gone = None
for b in msg:
    try:
        s.sendall(bytes([b]))
        s.settimeout(1)
        if s.recv(1) == b"":
            gone = time.monotonic() - start
            break
    except socket.timeout:
        continue
    except OSError:
        gone = time.monotonic() - start
        break
    if time.monotonic() - start > 20:
        break
s.close()
print("the dribbling connection was closed after %s s" % (None if gone is None else "%.1f" % gone))
assert gone is not None and 9 <= gone <= 14, gone
print("slowloris check ok")
