"""kclaw_client - drive a kclaw deployment over its HTTP API (docs/api.md).

Standard library only. The orchestrator serves the API when it runs with
--http (or "http_url" in kclaw.json); with a token set, pass it here.

    from kclaw_client import Client
    c = Client("http://127.0.0.1:8470", token="...")
    task = c.submit("examples/softmax_rows")          # a bundle folder
    rec = c.wait(task, progress=lambda ev: print(ev["kind"], ev["detail"]))
    if rec["state"] == "done":
        c.download(task, "out/")                       # kclaw result --out's files
    print(c.report([task]))

Every answer is the JSON that `kclaw ... --json` prints (lower-case enums,
null for what is not known). Every failure raises KclawError (or one of
its subclasses), with the CLI's error code ("not_found", "usage", ...),
its exit status and the server's message.
"""

import io
import json
import os
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "KclawError", "NotFound", "Unauthorized", "BadRequest",
           "Unreachable", "FINAL_STATES"]

FINAL_STATES = ("done", "failed", "cancelled")


class KclawError(Exception):
    """A refused or failed request: code is the CLI's error code."""

    def __init__(self, message, code="failed", exit=1, status=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.exit = exit
        self.status = status


class NotFound(KclawError):
    """No such task (or file)."""


class Unauthorized(KclawError):
    """The deployment asks for a token and this one is missing or wrong."""


class BadRequest(KclawError):
    """The request (or the bundle) was refused as it is: see message."""


class Unreachable(KclawError):
    """The HTTP server or the orchestrator behind it did not answer."""


def _error_class(status, code):
    if status == 401:
        return Unauthorized
    if code == "not_found":
        return NotFound
    if code == "usage":
        return BadRequest
    if code == "unreachable":
        return Unreachable
    return KclawError


class Client:
    """One deployment's HTTP API at url ("http://HOST:PORT")."""

    def __init__(self, url, token=None, timeout=30):
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("KCLAW_TOKEN")
        self.timeout = timeout

    # ------------------------------------------------------------ HTTP

    def _request(self, method, path, body=None, ctype=None, timeout=None):
        req = urllib.request.Request(self.url + path, data=body, method=method)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
                msg, code, ex = err["message"], err["code"], err["exit"]
            except (ValueError, KeyError, TypeError):
                msg, code, ex = raw.decode("utf-8", "replace") or e.reason, "failed", 1
            raise _error_class(e.code, code)(msg, code, ex, e.code) from None
        except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
            raise Unreachable("%s: %s" % (self.url, getattr(e, "reason", e)),
                              "unreachable", 4) from None

    def _json(self, method, path, body=None, ctype=None):
        with self._request(method, path, body, ctype) as r:
            return json.loads(r.read())

    @staticmethod
    def _id(task):
        if not task or not all(c.isalnum() or c in "-_" for c in task):
            raise BadRequest("bad task id %r" % (task,), "usage", 2)
        return task

    # ------------------------------------------------------------- API

    def health(self):
        """The orchestrator's Health: version, processes, last_seq."""
        return self._json("GET", "/api/health")

    def tasks(self, state=None, limit=None):
        """Every task's record (List), optionally of one state."""
        q = {k: v for k, v in (("state", state), ("limit", limit)) if v is not None}
        path = "/api/tasks" + ("?" + urllib.parse.urlencode(q) if q else "")
        return self._json("GET", path)["tasks"]

    def submit(self, bundle, task_id=None):
        """Submits a bundle (a folder with task.json, or the bytes of a tar
        archive of one); returns the task's id. task_id makes it
        idempotent, as `kclaw submit --task-id` does."""
        if isinstance(bundle, (bytes, bytearray)):
            data = bytes(bundle)
        else:
            if not os.path.isfile(os.path.join(bundle, "task.json")):
                raise BadRequest("%s has no task.json" % bundle, "usage", 2)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
                for name in sorted(os.listdir(bundle)):
                    t.add(os.path.join(bundle, name), arcname=name,
                          filter=_regular_only)
            data = buf.getvalue()
        path = "/api/tasks"
        if task_id:
            path += "?task_id=" + urllib.parse.quote(self._id(task_id))
        return self._json("POST", path, data, "application/x-tar")["task_id"]

    def status(self, task):
        """The task's record (Status)."""
        return self._json("GET", "/api/tasks/" + self._id(task))["task"]

    def cancel(self, task):
        """Cancels the task; returns its state."""
        return self._json("POST", "/api/tasks/%s/cancel" % self._id(task), b"")["state"]

    def result(self, task):
        """The task's best kernel and every candidate (Result)."""
        return self._json("GET", "/api/result/" + self._id(task))

    def result_file(self, task, name):
        """One file of the export (kernel.cu, plan.json, model_new.py, ...,
        or kernel.tar with them all) as bytes."""
        with self._request("GET", "/api/result/%s/%s" % (self._id(task),
                           urllib.parse.quote(name))) as r:
            return r.read()

    def download(self, task, out_dir):
        """Writes the files `kclaw result TASK --out DIR` writes into
        out_dir; returns their names."""
        data = self.result_file(task, "kernel.tar")
        os.makedirs(out_dir, exist_ok=True)
        names = []
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for m in t.getmembers():
                base = os.path.basename(m.name)
                if not m.isfile() or not base or base.startswith("."):
                    continue
                with open(os.path.join(out_dir, base), "wb") as f:
                    f.write(t.extractfile(m).read())
                names.append(base)
        return names

    def report(self, tasks=None, by_level=False):
        """`kclaw report --json` over tasks (default: every finished one)."""
        q = {}
        if tasks:
            q["tasks"] = ",".join(self._id(t) for t in tasks)
        if by_level:
            q["by"] = "level"
        return self._json("GET", "/api/report" + ("?" + urllib.parse.urlencode(q) if q else ""))

    def events(self, since=0, task=None, follow=True, timeout=None):
        """The events after sequence number `since` (of one task, or all),
        oldest first; with follow, then the live ones as they happen
        (Server-Sent Events), reconnecting from the last one seen when the
        stream breaks. timeout (seconds) ends a followed stream that long
        after the call, None never. A generator of event dicts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not follow:
            while True:
                q = {"since": since, "limit": 1000}
                if task:
                    q["task"] = self._id(task)
                evs = self._json("GET", "/api/events?" + urllib.parse.urlencode(q))["events"]
                if not evs:
                    return
                for ev in evs:
                    since = max(since, ev["seq"])
                    yield ev
        while deadline is None or time.monotonic() < deadline:
            q = {"since": since}
            if task:
                q["task"] = self._id(task)
            # The server sends a keepalive every 15 s: a read that waits
            # longer means a broken stream.
            wait = 20 if deadline is None else max(0.1, min(20, deadline - time.monotonic()))
            try:
                r = self._request("GET", "/api/events/stream?" + urllib.parse.urlencode(q),
                                  timeout=wait)
            except Unreachable:
                time.sleep(0.5)
                continue
            try:
                for ev in _sse(r, deadline):
                    since = max(since, ev.get("seq") or 0)
                    yield ev
            except (socket.timeout, ConnectionError, OSError):
                pass  # quiet stream or a broken one: ask again from since
            finally:
                r.close()

    def wait(self, task, progress=None, timeout=None):
        """Waits for the task to end; returns its final record. progress,
        if given, is called with every event of the task as it happens."""
        deadline = None if timeout is None else time.monotonic() + timeout
        rec = self.status(task)
        if rec["state"] in FINAL_STATES and progress is None:
            return rec
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        for ev in self.events(0, task=task, follow=True, timeout=left):
            if progress is not None:
                progress(ev)
            # The finishing event (task_finished, task_cancelled) and the
            # state change after it carry the final state.
            if ev.get("state") in FINAL_STATES:
                break
        rec = self.status(task)
        if rec["state"] not in FINAL_STATES:
            raise KclawError("task %s still %s after %ss" % (task, rec["state"], timeout),
                             "failed", 1)
        return rec


def _regular_only(info):
    """Bundles hold files and folders only (the server refuses links)."""
    if not (info.isfile() or info.isdir()):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "kclaw"
    return info


def _sse(resp, deadline):
    """The events of a text/event-stream response, as dicts."""
    data = []
    while deadline is None or time.monotonic() < deadline:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                text = "\n".join(data)
                data = []
                try:
                    ev = json.loads(text)
                except ValueError:
                    continue
                if "error" not in ev:
                    yield ev
            continue
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
