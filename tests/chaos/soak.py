#!/usr/bin/env python3
"""soak: a deployment under load for a long time, processes killed at
random, an outsider on its sockets; nothing may be lost or stall.

    soak.py [--minutes 60] [--latency 5] [--agents 4] [--in-flight 8]
            [--kill-every 150] [--outage-every S [--outage-s 60]]
            [--seed N] [--out DIR]

A benchmark, not a test (ctest does not run it): `kclaw up` with the real
kclawd on tcp:// with a token, --agents kclaw-agent workers per role
calling the provider emulator over HTTP (tests/agents/llm_server.py in its
model-like mode over examples/recordings, cycling, every reply after
--latency seconds) and the real kclaw-sandbox. Its child is the scripted
timing table of tests/mainjob (table_child.c) unless KCLAW_SANDBOX_BIN
names another sandbox (the real one on a GPU machine, with --bundles
naming tasks it can run). While it runs:

- a submitter keeps --in-flight tasks going (copies of the six examples,
  ids soak_<n>, each with the rounds its recording covers);
- a killer sends SIGKILL every --kill-every seconds (+-50 %) to a random
  process of a random class: kclawd, an agent, the sandbox parent, the
  sandbox child (the supervisor is not killed: a fleet's own supervisor
  would restart it);
- an outsider, without the token, connects to the API and work sockets
  and hangs up at once, sends wrong-token requests and reconnects, and
  holds idle connections, in turns, all the time;
- with --outage-every, the model provider is down (the emulator stopped,
  connections refused) for --outage-s seconds every so often;
- a prober asks `kclaw status --json` every second: a stall is the time
  from one answered probe to the next;
- RSS of every process is sampled every 10 s.

At the end it stops submitting, waits for the tasks in flight, and
prints (and writes to OUT/soak.json): tasks submitted, ended by state,
lost (submitted but unknown or unfinished: must be 0), the longest stall
(must be under 60 s), every kill and how long until the class was back
to its count, RSS per class (the supervisor over the whole run, the
longest-lived process of each other class: first and last sample after
two minutes, and the slope in MB per hour). Exit status 0 when nothing was
lost, no stall reached 60 s and every kill was recovered from.

Environment: KCLAW_BIN (a build's bin folder; a release build is the one
to soak: the sanitizers' quarantine grows RSS by design), KCLAW_SRC (the
source tree; default: this file's).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaos  # noqa: E402  (the process classes and the kclaw runner)

BUNDLES = ("bias_gelu", "softmax_rows", "layernorm", "sum_reduce",
           "matmul_bias_relu", "conv2d_5x5")
STALL_MAX_S = 60
RECOVER_MAX_S = 60


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def prepare(t, src, bundles, latency):
    """The bundles, the emulator in its model-like mode, the table and the
    sandbox that runs the table child (unless KCLAW_SANDBOX_BIN is set),
    and kclaw.json: tcp:// with a token."""
    with open(os.path.join(src, "examples/recordings/main.json")) as f:
        rounds = {x["bundle"]: x["rounds"] for x in json.load(f)["tasks"]}
    for name in bundles:
        dst = os.path.join(t, "bundles", name)
        shutil.copytree(os.path.join(src, "examples", name), dst)
        with open(dst + "/task.json") as f:
            spec = json.load(f)
        spec.setdefault("budget", {})["rounds"] = rounds.get(name, 4)
        with open(dst + "/task.json", "w") as f:
            json.dump(spec, f, indent=1)
    if not os.environ.get("KCLAW_SANDBOX_BIN"):
        subprocess.run([sys.executable, os.path.join(
            src, "tests/mainjob/mainjob.py"), "table", t + "/table",
            t + "/expect.json"], check=True)
        with open(t + "/sandbox", "w") as f:
            f.write("#!/bin/sh\nexec '%s/kclaw-sandbox' --child "
                    "'%s/mainjob_table_child' \"$@\"\n" % (chaos.BIN,
                                                           chaos.BIN))
        os.chmod(t + "/sandbox", 0o755)
        os.environ.update({"KCLAW_SANDBOX_BIN": t + "/sandbox",
                           "MAINJOB_TABLE": t + "/table",
                           "KCLAW_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
    emu = Emulator(t, src, latency)
    url = emu.start()
    for k in ("KCLAW_LLM_REPLAY", "KCLAW_LLM_RECORD", "KCLAW_HOME"):
        os.environ.pop(k, None)
    os.environ.update({"KCLAW_LLM_MODEL": "kclaw-emu-1",
                       "KCLAW_LLM_BASE_URL": url + "/v1",
                       "KCLAW_LLM_API_KEY": "sk-soak-not-secret"})
    home = t + "/home"
    os.makedirs(home)
    api, work = free_port(), free_port()
    token = "soak-" + os.urandom(12).hex()
    path = home + "/kclaw.json"
    with open(path, "w") as f:
        json.dump({"api_url": "tcp://127.0.0.1:%d" % api,
                   "work_url": "tcp://127.0.0.1:%d" % work,
                   "token": token}, f)
    os.chmod(path, 0o600)
    return home, emu, (api, work)


class Emulator:
    """The provider emulator in its model-like mode; stop() and start()
    again on the same port stand for a provider that was down."""

    def __init__(self, t, src, latency):
        self.t, self.src, self.latency = t, src, latency
        self.proc, self.port = None, 0

    def start(self):
        pf = self.t + "/emu.port"
        if os.path.exists(pf):
            os.unlink(pf)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(self.src,
                                          "tests/agents/llm_server.py"),
             "--port-file", pf, "--port", str(self.port),
             "--latency", str(self.latency)],
            stdout=open(self.t + "/emulator.log", "a"),
            stderr=subprocess.STDOUT)
        for _ in range(400):
            if os.path.exists(pf) and os.path.getsize(pf):
                break
            time.sleep(0.05)
        self.port = int(open(pf).read().strip())
        url = "http://127.0.0.1:%d" % self.port
        body = json.dumps({"actions": [], "model": {
            "recordings": os.path.join(self.src, "examples/recordings"),
            "cycle": True}}).encode()
        urllib.request.urlopen(urllib.request.Request(
            url + "/_script", data=body,
            headers={"Content-Type": "application/json"})).read()
        return url

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# ----------------------------------------------------------- the threads


class Loop(threading.Thread):
    """A daemon thread calling step() until stop is set; step returns how
    long to wait before the next call."""

    def __init__(self, stop):
        super().__init__(daemon=True)
        self.stop = stop

    def run(self):
        while not self.stop.is_set():
            try:
                wait = self.step()
            except Exception as e:  # a soak goes on; the log says why
                log("%s: %s: %s" % (type(self).__name__, type(e).__name__,
                                    e))
                wait = 1
            self.stop.wait(wait)


class Prober(Loop):
    def __init__(self, stop, home):
        super().__init__(stop)
        self.home = home
        self.last_ok = time.monotonic()
        self.stalls = []  # (started at, seconds) over 5 s
        self.max_stall = 0.0
        self.probes = self.answered = 0
        self.statuses = None

    def step(self):
        t0 = time.monotonic()
        self.probes += 1
        st = chaos.statuses(self.home)
        now = time.monotonic()
        if st is not None:
            self.answered += 1
            gap = now - self.last_ok
            self.max_stall = max(self.max_stall, gap)
            if gap > 5:
                self.stalls.append((time.strftime("%H:%M:%S"), round(gap, 1)))
                log("stall: %.1f s without an answer" % gap)
            self.last_ok = now
            self.statuses = st
        return max(0.0, 1.0 - (now - t0))

    def open_gap(self):
        return time.monotonic() - self.last_ok


class Submitter(Loop):
    def __init__(self, stop, home, t, bundles, in_flight, prober):
        super().__init__(stop)
        self.home, self.t, self.bundles = home, t, bundles
        self.in_flight, self.prober = in_flight, prober
        self.submitted = []
        self.pending = None  # an id whose Submit did not answer yet
        self.t0 = time.monotonic()
        self.progress = []

    def step(self):
        st = self.prober.statuses
        if st is None:
            return 1
        final = {x["id"] for x in st["tasks"] if x["state"] in chaos.FINAL}
        running = [x for x in self.submitted if x not in final]
        if len(running) >= self.in_flight and self.pending is None:
            return 2
        # An interrupted Submit is repeated with its id: the same task.
        tid = self.pending or "soak_%d" % (len(self.submitted) + 1)
        b = self.bundles[(len(self.submitted)) % len(self.bundles)]
        r = chaos.kclaw(self.home, "submit", os.path.join(self.t, "bundles", b),
                        "--task-id", tid, check=False, timeout=60)
        if r.returncode != 0:
            if self.pending != tid:
                log("submit %s: exit %d: %s" % (tid, r.returncode,
                                                 r.stderr.strip()[:300]))
            self.pending = tid
            return 1
        self.pending = None
        self.submitted.append(tid)
        self.progress.append((round(time.monotonic() - self.t0),
                              len(self.submitted)))
        return 0.2


class Killer(Loop):
    def __init__(self, stop, sup, every, rng):
        super().__init__(stop)
        self.sup, self.every, self.rng = sup, every, rng
        self.kills = []  # {class, pid, at, recovered_s}
        self.baseline = {}
        self.first = True

    def step(self):
        if self.first:
            self.first = False
            return self.rng.uniform(0.5, 1.5) * self.every
        procs = chaos.classify(self.sup)
        # A class's full count: the most seen of it at any kill's moment.
        self.baseline = {c: max(len(v), self.baseline.get(c, 0))
                         for c, v in procs.items()}
        cls = self.rng.choice(chaos.CLASSES)
        pids = sorted(procs[cls])
        if not pids:
            return 5
        pid = self.rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return 5
        t0 = time.monotonic()
        k = {"class": cls, "pid": pid, "at": time.strftime("%H:%M:%S"),
             "recovered_s": None}
        self.kills.append(k)
        log("killed %s pid %d" % (cls, pid))
        # Recovered: the class has its count again, the victim gone.
        while time.monotonic() - t0 < 2 * RECOVER_MAX_S:
            now = chaos.classify(self.sup)[cls]
            if pid not in now and len(now) >= self.baseline[cls]:
                k["recovered_s"] = round(time.monotonic() - t0, 1)
                break
            time.sleep(0.5)
        log("%s back after %s s" % (cls, k["recovered_s"]))
        return self.rng.uniform(0.5, 1.5) * self.every


class Outage(Loop):
    """The model provider down (connections refused) for outage_s, every
    `every` seconds (+-50 %)."""

    def __init__(self, stop, emu, every, outage_s, rng):
        super().__init__(stop)
        self.emu, self.every, self.outage_s, self.rng = (emu, every,
                                                         outage_s, rng)
        self.outages = []
        self.first = True

    def step(self):
        if self.first:
            self.first = False
            return self.rng.uniform(0.5, 1.5) * self.every
        log("the model provider goes down for %.0f s" % self.outage_s)
        self.emu.stop()
        self.outages.append(time.strftime("%H:%M:%S"))
        time.sleep(self.outage_s)
        self.emu.start()
        log("the model provider is back")
        return self.rng.uniform(0.5, 1.5) * self.every


class Outsider(Loop):
    """Without the token: hang-ups, wrong-token requests and idle
    connections on the API and work sockets, in turns."""

    def __init__(self, stop, ports):
        super().__init__(stop)
        self.ports = ports
        self.held = []
        self.counts = {"hangups": 0, "wrong_token": 0, "idle": 0}
        self.turn = 0

    def connect(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        return s

    def step(self):
        self.turn += 1
        port = self.ports[self.turn % 2]
        kind = (self.turn // 2) % 3
        try:
            if kind == 0:
                for _ in range(20):
                    self.connect(port).close()
                    self.counts["hangups"] += 1
            elif kind == 1:
                for _ in range(10):
                    s = self.connect(port)
                    # SP over TCP: the REQ protocol's header, then one
                    # request whose body is no protobuf with the token.
                    s.sendall(b"\x00SP\x00\x00\x30\x00\x00")
                    body = b"\x80\x00\x00\x01" + os.urandom(64)
                    s.sendall(struct.pack(">Q", len(body)) + body)
                    try:
                        s.recv(4096)
                    except OSError:
                        pass
                    s.close()
                    self.counts["wrong_token"] += 1
            else:
                for c in self.held:
                    c.close()
                self.held = [self.connect(port) for _ in range(8)]
                self.counts["idle"] += 8
        except OSError:
            pass
        return 0.5


class Sampler(Loop):
    """RSS (kB) of the supervisor and of every process of each class."""

    def __init__(self, stop, sup):
        super().__init__(stop)
        self.sup = sup
        self.t0 = time.monotonic()
        self.series = {}  # (class, pid) -> [(s, kB)]

    def step(self):
        now = time.monotonic() - self.t0
        procs = chaos.classify(self.sup)
        procs["supervisor"] = [self.sup]
        for cls, pids in procs.items():
            for pid in pids:
                kb = rss_kb(pid)
                if kb is not None:
                    self.series.setdefault((cls, pid), []).append((now, kb))
        return 10


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_summary(series, warm_s=120):
    """Per class, its longest-lived process: RSS after warm_s (first,
    last, max, MB/hour by least squares over the samples after warm_s)."""
    out = {}
    for (cls, pid), pts in series.items():
        pts = [p for p in pts if p[0] - pts[0][0] >= warm_s] or pts[-1:]
        span = pts[-1][0] - pts[0][0]
        if cls in out and out[cls]["span_s"] >= span:
            continue
        n = len(pts)
        mx = sum(p[0] for p in pts) / n
        my = sum(p[1] for p in pts) / n
        var = sum((p[0] - mx) ** 2 for p in pts)
        slope = (sum((p[0] - mx) * (p[1] - my) for p in pts) / var
                 if var > 0 else 0.0)
        out[cls] = {"pid": pid, "span_s": round(span), "samples": n,
                    "first_mb": round(pts[0][1] / 1024, 1),
                    "last_mb": round(pts[-1][1] / 1024, 1),
                    "max_mb": round(max(p[1] for p in pts) / 1024, 1),
                    "mb_per_hour": round(slope * 3600 / 1024, 2)}
    return out


# --------------------------------------------------------------- the run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--latency", type=float, default=5,
                    help="seconds per model reply (default 5)")
    ap.add_argument("--agents", type=int, default=4,
                    help="agent processes per role (default 4)")
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--kill-every", type=float, default=150,
                    help="mean seconds between kills (default 150)")
    ap.add_argument("--outage-every", type=float, default=0,
                    help="mean seconds between model provider outages "
                    "(default 0: none)")
    ap.add_argument("--outage-s", type=float, default=60,
                    help="how long each outage lasts (default 60)")
    ap.add_argument("--bundles", default=",".join(BUNDLES))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--drain-s", type=float, default=600,
                    help="how long the tasks in flight may take to end")
    ap.add_argument("--out", help="keep the home and logs here")
    a = ap.parse_args()
    chaos.BIN = os.environ.get("KCLAW_BIN")
    src = os.environ.get("KCLAW_SRC") or os.path.dirname(os.path.dirname(
        HERE))
    if not chaos.BIN:
        sys.exit("soak: set KCLAW_BIN to a build's bin folder")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4),
                                                            "little")
    t = a.out or tempfile.mkdtemp(prefix="kc-soak.")
    os.makedirs(t, exist_ok=True)
    bundles = a.bundles.split(",")
    log("soak: %.0f min, latency %.1f s, %d agents per role, %d in flight, "
        "a kill every %.0f s on average, seed %d, in %s" % (
            a.minutes, a.latency, a.agents, a.in_flight, a.kill_every, seed,
            t))
    home, emu, ports = prepare(t, src, bundles, a.latency)
    stop, drain = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        chaos.kclaw(home, "up", "--detach", "--agents", str(a.agents),
                    timeout=120)
        with open(home + "/run/up.pid") as f:
            sup = int(f.read())
        prober = Prober(drain, home)
        sampler = Sampler(drain, sup)
        submitter = Submitter(stop, home, t, bundles, a.in_flight, prober)
        killer = Killer(stop, sup, a.kill_every, random.Random(seed))
        outsider = Outsider(stop, ports)
        threads = [prober, sampler, submitter, killer, outsider]
        outage = None
        if a.outage_every > 0:
            outage = Outage(stop, emu, a.outage_every, a.outage_s,
                            random.Random(seed + 1))
            threads.append(outage)
        for th in threads:
            th.start()
        t0 = time.monotonic()
        while not stop.is_set() and time.monotonic() - t0 < a.minutes * 60:
            stop.wait(30)
            log("%d submitted, probes %d/%d answered, longest stall %.1f s"
                % (len(submitter.submitted), prober.answered, prober.probes,
                   prober.max_stall))
        stop.set()
        for th in (submitter, killer, outsider, outage):
            if th is not None:
                th.join(timeout=2 * RECOVER_MAX_S + a.outage_s + 70)
        log("draining: waiting for the tasks in flight")
        deadline = time.monotonic() + a.drain_s
        states = {}
        while time.monotonic() < deadline:
            st = prober.statuses
            if st is not None:
                states = {x["id"]: x["state"] for x in st["tasks"]}
                if all(states.get(x) in chaos.FINAL
                       for x in submitter.submitted):
                    break
            time.sleep(2)
        drain.set()
        prober.join(timeout=30)
        sampler.join(timeout=30)
        lost = [x for x in submitter.submitted
                if states.get(x) not in chaos.FINAL]
        ended = {}
        for x in submitter.submitted:
            ended[states.get(x)] = ended.get(states.get(x), 0) + 1
        unrecovered = [k for k in killer.kills if k["recovered_s"] is None]
        out = {
            "minutes": a.minutes, "latency_s": a.latency,
            "agents_per_role": a.agents, "seed": seed,
            "submitted": len(submitter.submitted), "ended": ended,
            "lost": lost, "probes": prober.probes,
            "answered": prober.answered,
            "longest_stall_s": round(prober.max_stall, 1),
            "stalls_over_5s": prober.stalls, "kills": killer.kills,
            "outsider": outsider.counts,
            "model_outages": outage.outages if outage else [],
            "rss": rss_summary(sampler.series),
            # Every sample: [class, pid, seconds since the start, kB].
            "rss_samples": [[c, pid, round(t_), kb] for (c, pid), pts in
                            sorted(sampler.series.items())
                            for t_, kb in pts],
            # Tasks submitted by then: [seconds since the start, count].
            "submitted_at": submitter.progress,
        }
        with open(os.path.join(t, "soak.json"), "w") as f:
            json.dump(out, f, indent=1)
        rec = [k["recovered_s"] for k in killer.kills
               if k["recovered_s"] is not None]
        log("tasks: %d submitted, ended %s, lost %d" % (
            out["submitted"], ended, len(lost)))
        log("probes: %d, answered %d, longest stall %.1f s (%d over 5 s)" % (
            prober.probes, prober.answered, prober.max_stall,
            len(prober.stalls)))
        log("kills: %d (%s), recovered in %s s (max), %d not recovered" % (
            len(killer.kills), ", ".join(
                "%s %d" % (c, sum(k["class"] == c for k in killer.kills))
                for c in chaos.CLASSES), max(rec) if rec else "-",
            len(unrecovered)))
        log("outsider: %s" % outsider.counts)
        if outage:
            log("model provider outages of %.0f s: %d (%s)" % (
                a.outage_s, len(outage.outages), ", ".join(outage.outages)))
        for cls, r in sorted(out["rss"].items()):
            log("rss %-12s pid %d over %d s: %.1f -> %.1f MB (max %.1f), "
                "%+.2f MB/hour" % (cls, r["pid"], r["span_s"], r["first_mb"],
                                   r["last_mb"], r["max_mb"],
                                   r["mb_per_hour"]))
        ok = not lost and prober.max_stall < STALL_MAX_S and not unrecovered
        log("soak: %s (%s)" % ("ok" if ok else "FAILED",
                               os.path.join(t, "soak.json")))
        return 0 if ok else 1
    finally:
        stop.set()
        drain.set()
        chaos.kclaw(home, "up", "--stop", check=False, timeout=120)
        emu.stop()


if __name__ == "__main__":
    sys.exit(main())
