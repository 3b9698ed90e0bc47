#!/usr/bin/env python3
"""torchref: the live PyTorch reference process of a `torch` task.

    python3 torchref.py --fd N

Speaks the JSON-lines protocol of docs/torchref.md over the socket (or any
bidirectional stream) on file descriptor N: one request per line, exactly
one reply per request. Ops: hello, load, inputs, check, baseline, unload.

The expected outputs, computed before the candidate runs, live in this
process's CUDA context and are never exported. The buffers the candidate
sees (inputs, parameters, outputs) are allocated here in one arena, a CUDA
allocation of its own, exported by one CUDA IPC handle; the model computes
with the shared parameters (checksummed, rebuilt when written) and draws
its inputs straight into the shared input buffers, so each tensor exists
once (docs/torchref.md "One copy of each tensor").

The request handlers are plain functions of a State (`handle(state, req)`
returns the reply as a dict), so tools/kernelbench/kb-ref-check.py runs them
in-process, without sockets. PyTorch is imported lazily (hello, load): a
machine without it answers NO_TORCH.

Logs go to stderr (one line per request, full tracebacks on errors);
anything the problem's code prints to stdout goes to stderr too.

This file is the process: the op table, the requests on a descriptor, the
warm process's socket and main. Its parts, beside it (installed together
under share/kclaw/torch):

    torchref_common.py   constants, dtypes, RefError, the log, PyTorch's
                         lazy import (and the `torch` and `KERN` globals
                         every part shares)
    torchref_cuda.py     the driver through ctypes, the arena's CUDA IPC,
                         the device kernels (compare, norms, checksums)
    torchref_task.py     the state; hello, load, unload, inputs
    torchref_measure.py  check and baseline
"""
import argparse
import ctypes
import errno
import json
import os
import queue
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback

from torchref_common import (
    LINE_MAX, RefError, describe_exc, is_fatal_cuda, is_oom, log, one_line, sanitize)
from torchref_task import State, _free_serials, op_hello, op_inputs, op_load, op_stage, op_unload
from torchref_measure import op_baseline, op_check


OPS = {"hello": op_hello, "load": op_load, "inputs": op_inputs, "stage": op_stage, "check": op_check,
       "baseline": op_baseline, "unload": op_unload}


def handle(st, req):
    """One request (a dict) -> its reply (a dict, JSON-ready but for
    non-finite numbers: see sanitize). Never raises for an ordinary
    failure; sets st.fatal after an error that poisons the CUDA context."""
    t0 = time.monotonic()
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if not isinstance(req, dict):
            raise RefError("INTERNAL", "a request must be a JSON object")
        fn = OPS.get(op)
        if fn is None:
            raise RefError("INTERNAL", "unknown op %r; the ops are %s" % (op, ", ".join(OPS)))
        reply = {"ok": True}
        reply.update(fn(st, req))
    except RefError as e:
        reply = {"ok": False, "code": e.code, "error": e.msg}
        if is_fatal_cuda(e.__cause__):
            st.fatal = True
    except Exception as e:
        log("%s failed:\n%s" % (op, traceback.format_exc()))
        if is_fatal_cuda(e):
            st.fatal = True
        what = "out of GPU memory" if is_oom(e) else "internal error"
        reply = {"ok": False, "code": "INTERNAL",
                 "error": "%s: %s %s" % (op, what, describe_exc(e))}
    if st.fatal:
        reply["error"] = reply.get("error", "") + " (the CUDA context is lost; the reference " \
                                                  "process exits after this reply)"
    log("%s%s -> %s %.2f ms" % (op, "" if op not in ("inputs", "stage", "check") else " serial %s" % req.get("serial"),
                               "ok" if reply.get("ok") else "%s: %s" % (reply["code"], reply["error"]),
                               1e3 * (time.monotonic() - t0)))
    return reply


def encode(reply):
    return (json.dumps(sanitize(reply), allow_nan=False, separators=(",", ":")) + "\n").encode()


# ----------------------------------------------------------- the process

def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def serve(fd, st=None):
    """Requests on fd until end of file: 0 at end of file, 1 when a reply
    cannot be written, 2 after an error that lost the CUDA context."""
    st = st if st is not None else State()
    rf = os.fdopen(os.dup(fd), "rb", buffering=1 << 16)
    try:
        while True:
            line = rf.readline(LINE_MAX + 1)
            if not line:
                log("end of file on fd %d" % fd)
                return 0
            if len(line) > LINE_MAX and not line.endswith(b"\n"):
                while True:
                    more = rf.readline(LINE_MAX + 1)
                    if not more or more.endswith(b"\n"):
                        break
                reply = {"ok": False, "code": "INTERNAL", "error": "request longer than 16 MiB"}
            else:
                try:
                    req = json.loads(line)
                except Exception as e:
                    req = None
                    reply = {"ok": False, "code": "INTERNAL",
                             "error": "request is not JSON (%s): %r" % (one_line(e, 120), line[:80])}
                if req is not None:
                    reply = handle(st, req)
            try:
                _write_all(fd, encode(reply))
            except OSError as e:
                log("cannot write the reply (%s)" % e)
                return 1
            if st.fatal:
                log("the CUDA context is lost: exiting so that a fresh process is started")
                return 2
    finally:
        rf.close()


# ------------------------------------------------------ the warm process

def _peer_uid(conn):
    cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", cred)[1]


def _bind(path):
    """A listening Unix socket at path, owner-only; None when another
    process already listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        try:
            sock.bind(path)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                probe.close()
                sock.close()
                return None
            except OSError:
                probe.close()
            os.unlink(path)  # a stale socket: nobody listens
            sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


# A request still running this long after its sandbox hung up ends the
# warm process (KCLAW_TORCHREF_ORPHAN_S).
ORPHAN_S = 10

BUSY = {"ok": False, "code": "BUSY",
        "error": "the warm reference process serves another sandbox; start a private one"}


def listen(path, idle_s, serve_conn):
    """The warm reference process (docs/torchref.md "Warm process"): serves
    one connection at a time on the Unix socket at path (mode 0600; peers
    of another user are refused), answers BUSY to a second one while the
    first is served, and exits after idle_s seconds without a connection.
    serve_conn(fd) serves one connection and returns serve()'s code; 2
    (the CUDA context is lost) ends the process. Returns the exit code."""
    sock = _bind(path)
    if sock is None:
        log("another process listens on %s: exiting" % path)
        return 0
    log("listening on %s (idle exit after %d s)" % (path, idle_s))
    lock = threading.Lock()
    busy = [False]
    active = [None]   # the connection being served
    conns = queue.Queue()

    def watchdog():
        # A private process dies with its sandbox child (PR_SET_PDEATHSIG);
        # this one outlives it, so a request that still runs well after its
        # sandbox hung up (a hung forward, the child killed at its deadline)
        # ends the process instead of holding the GPU for good.
        since = None
        seen = None
        try:
            orphan_s = float(os.environ.get("KCLAW_TORCHREF_ORPHAN_S") or ORPHAN_S)
        except ValueError:
            orphan_s = ORPHAN_S
        while True:
            time.sleep(min(1.0, orphan_s / 4))
            with lock:
                c = active[0]
                hup = False
                if c is not None:
                    try:
                        p = select.poll()
                        p.register(c.fileno(), select.POLLRDHUP)
                        hup = any(ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
                                  for _, ev in p.poll(0))
                    except (OSError, ValueError):
                        hup = False
            if c is not seen or not hup:
                seen, since = c, (time.monotonic() if hup else None)
                continue
            if since is None:
                since = time.monotonic()
            if time.monotonic() - since > orphan_s:
                log("a request still runs %d s after its sandbox hung up: exiting" % orphan_s)
                try:
                    os.unlink(path)
                except OSError:
                    pass
                os._exit(1)

    def refuse(conn):
        # BUSY, then the request read before closing: a peer whose hello
        # meets a closed socket sees end of file, not the reason.
        try:
            conn.sendall(encode(BUSY))
            conn.settimeout(2)
            conn.recv(LINE_MAX)
        except OSError:
            pass
        conn.close()

    def acceptor():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            try:
                if _peer_uid(conn) != os.getuid():
                    log("refused a connection of another user")
                    conn.close()
                    continue
            except OSError:
                conn.close()
                continue
            with lock:
                was = busy[0]
                busy[0] = True
            if was:
                threading.Thread(target=refuse, args=(conn,), daemon=True).start()
                continue
            conns.put(conn)

    threading.Thread(target=acceptor, name="accept", daemon=True).start()
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    while True:
        try:
            conn = conns.get(timeout=idle_s)
        except queue.Empty:
            with lock:
                if busy[0]:
                    continue
                busy[0] = True  # no new session from here on
            try:
                os.unlink(path)
            except OSError:
                pass
            log("idle for %d s: exiting" % idle_s)
            return 0
        with lock:
            active[0] = conn
        rc = serve_conn(conn.fileno())
        with lock:
            active[0] = None
            busy[0] = False
        conn.close()
        if rc == 2:
            try:
                os.unlink(path)
            except OSError:
                pass
            return 1


def _serve_warm(st):
    def one(fd):
        log("a sandbox connected")
        rc = serve(fd, st)
        # The loaded task (model, arena, compiled modules) stays for the next
        # evaluation; what belonged to this one goes.
        _free_serials(st)
        return rc
    return one


def _pdeathsig():
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            log("prctl(PR_SET_PDEATHSIG) failed: errno %d" % ctypes.get_errno())
    except Exception as e:
        log("prctl(PR_SET_PDEATHSIG) unavailable: %s" % e)
    if os.getppid() != parent or parent == 1:
        log("the parent is gone: exiting")
        sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="The live PyTorch reference process (docs/torchref.md).")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--fd", type=int, help="the socket's file descriptor (a private process)")
    g.add_argument("--listen", metavar="PATH", help="a Unix socket to serve sandboxes on, one at a "
                   "time (the warm process)")
    ap.add_argument("--idle-s", type=int, default=600, help="with --listen: exit after this many "
                    "seconds without a connection (default 600)")
    a = ap.parse_args(argv)
    fd = a.fd
    if a.listen is None:
        _pdeathsig()
        try:
            os.fstat(fd)
        except OSError as e:
            sys.exit("torchref: --fd %d is not open (%s)" % (fd, e))
        if fd <= 2:
            nfd = os.dup(fd)
            os.close(fd)
            fd = nfd
    # Whatever the problem's code prints goes to the log, never to a
    # channel someone reads as protocol.
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except OSError:
        pass
    log("started, pid %d, %s, Python %s" % (os.getpid(), "fd %d" % fd if a.listen is None else
                                             "socket %s" % a.listen, sys.version.split()[0]))
    try:
        if a.listen is not None:
            rc = listen(a.listen, max(1, a.idle_s), _serve_warm(State()))
        else:
            rc = serve(fd)
    except KeyboardInterrupt:
        rc = 130
    sys.stderr.flush()
    os._exit(0 if rc == 0 else 1)  # no atexit or CUDA teardown: the child may already be gone


if __name__ == "__main__":
    main()
