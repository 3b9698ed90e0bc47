#!/usr/bin/env python3
"""A stand-in for gpu-sandbox/torchref.py, for CI (no PyTorch, no GPU).

    python3 torchref_standin.py --fd N

Same command line and protocol as the real reference process
(docs/torchref.md): one JSON object per line over the socket on fd N, one
reply per request, exit on end of file. Its numbers are fake but
deterministic, its IPC handles are 128 hex zeros, and it checks the
requests' fields as strictly as the protocol states them (a missing or
mistyped field is an INTERNAL error naming it), so a test of the child's
client (gpu-sandbox/torchref.c) sees what the client sent.

load's reply has, besides the protocol's fields, `declared`: the tensors
the request declared, echoed back. A scalar named `s` has the value 2.5
(other scalars 1.5, or 2 for integer ones); `flops` is twice the output
elements.

Misbehaviour, chosen by KCLAW_STANDIN_MODE:
  ok (default)      behaves
  crash_on_inputs   exit(3) on the first inputs request, without a reply
  hang_on_check     sleeps forever on check
  garbage           replies a line that is not JSON to load
  no_torch          hello (and every other request) -> NO_TORCH
  slow_hello        sleeps 2 s before hello's reply
  bad_task          load -> BAD_TASK
  compile_failed    baseline compile / max-autotune -> COMPILE_FAILED
  wrong             check: the first output has bad elements
  no_stage          stage -> staged: false (nothing drawn ahead)
With KCLAW_STANDIN_ONCE=PATH the misbehaviour happens only while PATH does
not exist (it is created then): a restarted stand-in behaves.
With KCLAW_STANDIN_LOG=PATH every request line received is appended there.
"""
import argparse
import ctypes
import json
import os
import signal
import sys
import time

MODES = ("ok", "crash_on_inputs", "hang_on_check", "garbage", "no_torch", "slow_hello",
         "bad_task", "compile_failed", "wrong", "no_stage")
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "i64": 8, "i8": 1, "u8": 1,
               "bool": 1}
KINDS = ("input", "parameter", "output", "scalar")
HANDLE = "0" * 128
LINE_MAX = 16 << 20
BASELINE_MS = {"eager": 1.0, "compile": 0.8, "max-autotune": 0.7}
# A matched-precision baseline's time, as a fraction of the f32 one.
PRECISION_MS = {"f32": 1.0, "tf32": 0.5, "f16": 0.25, "bf16": 0.25}


def log(msg):
    sys.stderr.write("torchref-standin[%d]: %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


class Bad(Exception):
    def __init__(self, code, msg):
        Exception.__init__(self, msg)
        self.code, self.msg = code, msg


def need(req, field, kind):
    if field not in req:
        raise Bad("INTERNAL", "%s request lacks '%s'" % (req.get("op"), field))
    v = req[field]
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "num": isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": isinstance(v, bool),
          "str": isinstance(v, str),
          "list": isinstance(v, list)}[kind]
    if not ok:
        raise Bad("INTERNAL", "%s request: '%s' must be %s, not %r" % (req.get("op"), field,
                                                                         kind, v))
    return v


class Standin:
    def __init__(self, mode, once):
        self.mode = mode
        self.once = once
        self.task = None
        self.serial = None
        self.keep = False
        self.seed = 0
        self.kept = 0
        self.held = False
        self.compiled = set()
        self.inputs_seen = 0
        self.staged = {}

    def misbehave(self, mode):
        """Whether the scripted misbehaviour `mode` happens now."""
        if self.mode != mode:
            return False
        if self.once:
            if os.path.exists(self.once):
                return False
            with open(self.once, "w") as f:
                f.write("%d\n" % os.getpid())
        return True

    def hello(self, req):
        dev = req.get("device", 0)
        if isinstance(dev, bool) or not isinstance(dev, int):
            raise Bad("INTERNAL", "hello: 'device' must be an integer")
        if self.misbehave("slow_hello"):
            time.sleep(2)
        return {"torch": "0.0.0-standin", "device_name": "Stand-in GPU", "l2_bytes": 50331648}

    def load(self, req):
        need(req, "key", "str")
        need(req, "source", "str")
        need(req, "init_seed", "int")
        tensors = need(req, "tensors", "list")
        if "scalars" in req:
            need(req, "scalars", "list")
        decl = []
        for i, t in enumerate(tensors):
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise Bad("INTERNAL", "load: tensors[%d] has no name" % i)
            if t.get("kind") not in KINDS:
                raise Bad("BAD_TASK", "load: tensor '%s' has kind %r" % (t["name"], t.get("kind")))
            if t["kind"] != "scalar" and t.get("dtype") not in DTYPE_BYTES:
                raise Bad("BAD_TASK", "load: tensor '%s' has dtype %r" % (t["name"], t.get("dtype")))
            shape = t.get("shape", [1])
            if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
                raise Bad("BAD_TASK", "load: tensor '%s' has shape %r" % (t["name"], shape))
            if t["kind"] == "parameter" and not isinstance(t.get("source_name"), str):
                raise Bad("INTERNAL", "load: parameter '%s' has no source_name" % t["name"])
            decl.append(t)
        if self.misbehave("bad_task"):
            raise Bad("BAD_TASK", "the stand-in refuses this task (KCLAW_STANDIN_MODE=bad_task)")
        names = [t["name"] for t in decl if t["kind"] == "scalar"] + \
            [s for s in req.get("scalars", []) if s not in {t["name"] for t in decl}]
        scalars = {}
        for n in names:
            d = next((t for t in decl if t["name"] == n), {})
            scalars[n] = 2.5 if n == "s" else (2 if d.get("dtype") in ("i32", "i64") else 1.5)
        bufs, flops = [], 0
        for t in decl:
            if t["kind"] == "scalar":
                continue
            n = 1
            for d in t.get("shape", [1]):
                n *= d
            bufs.append({"name": t["name"], "handle": HANDLE, "offset": 0,
                         "bytes": n * DTYPE_BYTES[t["dtype"]]})
            if t["kind"] == "output":
                flops += 2 * n
        if not any(t["kind"] == "output" for t in decl):
            raise Bad("BAD_TASK", "load: no tensor has kind output")
        self.task = decl
        self.serial = None
        self.kept = 0
        self.staged = {}
        self.held = False
        return {"buffers": bufs, "scalars": scalars, "flops": float(flops), "declared": decl}

    def need_task(self, op):
        if self.task is None:
            raise Bad("INTERNAL", "%s before load: no task is loaded" % op)

    def outputs(self):
        return [t for t in self.task if t["kind"] == "output"]

    def exp_norm(self, seed=None):
        return 1.0 + ((self.seed if seed is None else seed) % 1000) / 1000.0

    def serial_req(self, req):
        """An inputs or stage request's fields: (serial, seed, variant, keep)."""
        op = req.get("op")
        self.need_task(op)
        serial = need(req, "serial", "int")
        seed = need(req, "seed", "int")
        variant = need(req, "variant", "int")
        keep = need(req, "keep", "bool")
        if not 0 <= variant <= 6:
            raise Bad("INTERNAL", "%s: unknown variant %d" % (op, variant))
        return serial, seed, variant, keep

    def inputs(self, req):
        serial, seed, variant, keep = self.serial_req(req)
        self.inputs_seen += 1
        if self.inputs_seen == 1 and self.misbehave("crash_on_inputs"):
            log("crashing on the first inputs request (KCLAW_STANDIN_MODE=crash_on_inputs)")
            sys.stderr.flush()
            os._exit(3)
        staged = self.staged.pop(serial, None)
        self.serial, self.seed, self.keep = serial, seed, keep
        if staged is not None and staged[0] == (seed, variant, keep):
            return {"outputs": staged[1]}
        return {"outputs": self.expect(seed, keep)}

    def expect(self, seed, keep):
        res = []
        for t in self.outputs():
            var = None
            if keep and self.kept > 0:
                var = 0.25
            norm = self.exp_norm(seed)
            res.append({"name": t["name"], "exp_norm": norm if keep else None, "var_norm": var})
        if keep:
            self.kept += 1
        return res

    def stage(self, req):
        """inputs' reply for a later inputs of the same serial, seed,
        variant and keep, made now; staged: false in mode no_stage."""
        serial, seed, variant, keep = self.serial_req(req)
        if self.mode == "no_stage":
            return {"staged": False, "gpu_ms": 0.0}
        self.staged[serial] = ((seed, variant, keep), self.expect(seed, keep))
        return {"staged": True, "gpu_ms": 0.5}

    def check(self, req):
        self.need_task("check")
        serial = need(req, "serial", "int")
        need(req, "atol", "num")
        need(req, "rtol", "num")
        need(req, "max_rel_norm", "num")
        hold = need(req, "hold", "bool")
        compare_held = need(req, "compare_held", "bool")
        if self.misbehave("hang_on_check"):
            log("hanging on check (KCLAW_STANDIN_MODE=hang_on_check)")
            while True:
                time.sleep(3600)
        if self.serial is None or serial != self.serial:
            raise Bad("INTERNAL", "check of serial %d: only the latest serial (%s) can be checked"
                      % (serial, self.serial))
        if compare_held and not self.held:
            raise Bad("INTERNAL", "check with compare_held but no earlier check held outputs")
        wrong = self.misbehave("wrong")
        res = []
        for i, t in enumerate(self.outputs()):
            n = 1
            for d in t.get("shape", [1]):
                n *= d
            r = {"name": t["name"], "count": n, "bad": 0, "nan": 0, "worst": 0,
                 "expected": 1.0, "got": 1.0, "max_abs": 0.0, "max_rel": 0.0, "err_norm": 0.0,
                 "exp_norm": self.exp_norm(), "held_diff_max": None, "held_diff_count": None}
            if wrong and i == 0:
                r.update({"bad": max(1, n // 2), "nan": 1 if n > 1 else 0, "worst": n - 1,
                          "expected": 1.0, "got": None, "max_abs": None, "max_rel": None,
                          "err_norm": 3.0})
            if compare_held:
                r["held_diff_max"], r["held_diff_count"] = 0.0, 0
            res.append(r)
        if hold:
            self.held = True
        return {"outputs": res}

    def baseline(self, req):
        self.need_task("baseline")
        mode = need(req, "mode", "str")
        need(req, "warmup", "int")
        iters = need(req, "iters", "int")
        need(req, "flush", "bool")
        need(req, "seed", "int")
        precision = req.get("precision", "f32")
        if mode not in BASELINE_MS:
            raise Bad("INTERNAL", "baseline: unknown mode %r" % mode)
        if precision not in PRECISION_MS:
            raise Bad("INTERNAL", "baseline: unknown precision %r" % (precision,))
        if precision != "f32" and mode != "eager":
            raise Bad("INTERNAL", "baseline: a matched precision is timed in eager mode only")
        if iters < 1:
            raise Bad("INTERNAL", "baseline: iters must be at least 1")
        if mode != "eager" and self.misbehave("compile_failed"):
            raise Bad("COMPILE_FAILED", "torch.compile (%s) failed: the stand-in says so" % mode)
        setup = 0.0
        if mode != "eager" and mode not in self.compiled:
            self.compiled.add(mode)
            setup = 1.5
        m = BASELINE_MS[mode] * PRECISION_MS[precision]
        return {"median_ms": m, "mean_ms": m * 1.01, "min_ms": m * 0.9, "max_ms": m * 1.2,
                "stddev_ms": 0.01, "iterations": iters, "setup_s": setup, "precision": precision}

    def unload(self, req):
        self.task = None
        self.serial = None
        self.held = False
        self.compiled = set()
        return {}

    def handle(self, req):
        op = req.get("op") if isinstance(req, dict) else None
        fn = {"hello": self.hello, "load": self.load, "inputs": self.inputs, "stage": self.stage,
              "check": self.check,
              "baseline": self.baseline, "unload": self.unload}.get(op)
        try:
            if fn is None:
                raise Bad("INTERNAL", "unknown op %r" % (op,))
            if self.mode == "no_torch" and (not self.once or self.misbehave("no_torch")):
                raise Bad("NO_TORCH", "PyTorch does not import here (stand-in, "
                          "KCLAW_STANDIN_MODE=no_torch); install PyTorch with CUDA")
            reply = {"ok": True}
            reply.update(fn(req))
        except Bad as e:
            reply = {"ok": False, "code": e.code, "error": e.msg}
        return reply


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def serve_conn(s, fd, reqlog):
    """One connection's requests until end of file (torchref.serve's codes:
    0 at end of file)."""
    rf = os.fdopen(os.dup(fd), "rb")
    try:
        while True:
            line = rf.readline(LINE_MAX + 1)
            if not line:
                log("end of file")
                return 0
            if reqlog:
                with open(reqlog, "ab") as f:
                    f.write(line if line.endswith(b"\n") else line + b"\n")
            try:
                req = json.loads(line)
            except ValueError as e:
                reply = {"ok": False, "code": "INTERNAL", "error": "request is not JSON: %s" % e}
            else:
                if isinstance(req, dict) and req.get("op") == "load" and s.misbehave("garbage"):
                    log("replying garbage to load (KCLAW_STANDIN_MODE=garbage)")
                    write_all(fd, b"this is not JSON {{{\n")
                    continue
                reply = s.handle(req)
            try:
                write_all(fd, (json.dumps(reply, separators=(",", ":")) + "\n").encode())
            except OSError:
                return 1
    finally:
        rf.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description="Stand-in for torchref.py (CI).")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--fd", type=int)
    g.add_argument("--listen")
    ap.add_argument("--idle-s", type=int, default=600)
    a = ap.parse_args(argv)
    if a.listen is None:
        parent = os.getppid()
        try:
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception as e:
            log("prctl unavailable: %s" % e)
        if os.getppid() != parent:
            sys.exit(1)
    mode = os.environ.get("KCLAW_STANDIN_MODE", "ok") or "ok"
    if mode not in MODES:
        sys.exit("torchref-standin: unknown KCLAW_STANDIN_MODE %r; use one of %s"
                 % (mode, ", ".join(MODES)))
    reqlog = os.environ.get("KCLAW_STANDIN_LOG")
    s = Standin(mode, os.environ.get("KCLAW_STANDIN_ONCE"))
    if a.listen is not None:
        # The warm process's socket, sessions and idle exit are the real
        # torchref.py's (listen), around the stand-in's requests.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "gpu-sandbox"))
        import torchref
        log("started, socket %s, mode %s" % (a.listen, mode))
        return torchref.listen(a.listen, max(1, a.idle_s), lambda fd: serve_conn(s, fd, reqlog))
    log("started, fd %d, mode %s" % (a.fd, mode))
    return serve_conn(s, a.fd, reqlog)


if __name__ == "__main__":
    sys.exit(main())
