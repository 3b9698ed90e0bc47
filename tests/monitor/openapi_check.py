"""docs/openapi.json against the running server (standard library only).

    python3 openapi_check.py URL TOKEN DONE_TASK SRC

1. The paths and methods the server routes (the mon_routes table of
   monitor/monitor.c) are exactly those the description has.
2. Every described GET under /api/ (ids filled in with DONE_TASK) answers
   with a status the description declares for it, and its JSON body has
   the declared shape (type, required, properties, items, enum, pattern,
   oneOf, $ref: the subset of JSON Schema the description uses); so do an
   unknown task (404), a bad id (400), a missing token (401), a submit
   that is not a tar (400) and a cancel of an unknown task (404).
3. A path the description lacks answers 404, a method it lacks on a
   described path 405.
"""

import json
import re
import sys
import urllib.error
import urllib.request

URL, TOKEN, TASK, SRC = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3], sys.argv[4]
SPEC = json.load(open(SRC + "/docs/openapi.json"))
failures = []


def fail(msg):
    failures.append(msg)


def resolve(schema):
    while "$ref" in schema:
        schema = SPEC["components"]["schemas"][schema["$ref"].split("/")[-1]]
    return schema


def type_ok(v, t):
    return {
        "object": isinstance(v, dict),
        "array": isinstance(v, list),
        "string": isinstance(v, str),
        "integer": isinstance(v, int) and not isinstance(v, bool),
        "number": isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": isinstance(v, bool),
        "null": v is None,
    }[t]


def check(v, schema, where):
    schema = resolve(schema)
    if "oneOf" in schema:
        errs = [e for s in schema["oneOf"] for e in [check_quiet(v, s, where)]]
        if sum(1 for e in errs if not e) != 1:
            fail("%s: matches %d of oneOf" % (where, sum(1 for e in errs if not e)))
        return
    t = schema.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(type_ok(v, x) for x in ts):
            fail("%s: %r is not %s" % (where, v if not isinstance(v, (dict, list)) else type(v).__name__, t))
            return
    if v is None:
        return
    if "enum" in schema and v not in schema["enum"]:
        fail("%s: %r not in %s" % (where, v, schema["enum"]))
    if "pattern" in schema and isinstance(v, str) and not re.search(schema["pattern"], v):
        fail("%s: %r does not match %s" % (where, v, schema["pattern"]))
    if isinstance(v, dict):
        for k in schema.get("required", []):
            if k not in v:
                fail("%s: no %r" % (where, k))
        for k, s in schema.get("properties", {}).items():
            if k in v:
                check(v[k], s, where + "." + k)
    if isinstance(v, list) and "items" in schema:
        for i, x in enumerate(v[:50]):
            check(x, schema["items"], "%s[%d]" % (where, i))


def check_quiet(v, schema, where):
    n = len(failures)
    check(v, schema, where)
    errs = failures[n:]
    del failures[n:]
    return errs


def request(method, path, token=TOKEN, body=None, ctype=None):
    req = urllib.request.Request(URL + path, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def call(method, tmpl, path, want=None, **kw):
    """Calls path and checks the answer against tmpl's description."""
    op = SPEC["paths"][tmpl][method.lower()]
    status, ctype, body = request(method, path, **kw)
    where = "%s %s -> %d" % (method, path, status)
    if want is not None and status != want:
        fail("%s: wanted %d (%s)" % (where, want, body[:200]))
    resp = op["responses"].get(str(status))
    if resp is None:
        fail("%s: status not described" % where)
        return status, body
    content = resp.get("content", {})
    if "application/json" in ctype.split(";")[0]:
        if "application/json" not in content:
            fail("%s: JSON not described" % where)
        else:
            check(json.loads(body), content["application/json"]["schema"], where)
    elif content and ctype.split(";")[0] not in content:
        fail("%s: Content-Type %s not described (%s)" % (where, ctype, list(content)))
    return status, body


# 1. The route table and the description agree.
src = open(SRC + "/monitor/monitor.c").read()
table = src[src.index("mon_routes[] = {"):]
table = table[:table.index("};")]
served = set(re.findall(r'\{"([A-Z]+)", "([^"]+)", MON_[A-Z_]+\}', table))
described = {(m.upper(), p) for p, ops in SPEC["paths"].items() for m in ops}
for m, p in sorted(served - described):
    fail("served but not described: %s %s" % (m, p))
for m, p in sorted(described - served):
    fail("described but not served: %s %s" % (m, p))
if len(served) < 15:
    fail("the route table was not read (%d routes)" % len(served))

# 2. Every described GET of the API, on a finished task.
sub = {"id": TASK, "file": "kernel.tar"}
for tmpl, ops in sorted(SPEC["paths"].items()):
    if "get" not in ops or not tmpl.startswith("/api/") or tmpl == "/api/events/stream":
        continue
    path = re.sub(r"\{(\w+)\}", lambda mm: sub[mm.group(1)], tmpl)
    call("GET", tmpl, path, 200)
for f in SPEC["paths"]["/api/result/{id}/{file}"]["get"]["parameters"][1]["schema"]["enum"]:
    call("GET", "/api/result/{id}/{file}", "/api/result/%s/%s" % (TASK, f), 200)
call("GET", "/api/events", "/api/events?since=0&limit=5&task=" + TASK, 200)
call("GET", "/api/report", "/api/report?tasks=%s&by=level" % TASK, 200)
call("GET", "/api/tasks", "/api/tasks?state=done", 200)
# Errors.
call("GET", "/api/tasks/{id}", "/api/tasks/nosuchtask", 404)
call("GET", "/api/tasks/{id}", "/api/tasks/bad.id", 400)
call("GET", "/api/result/{id}", "/api/result/nosuchtask", 404)
call("GET", "/api/result/{id}/{file}", "/api/result/%s/nosuch.txt" % TASK, 404)
call("POST", "/api/tasks/{id}/cancel", "/api/tasks/nosuchtask/cancel", 404, body=b"")
call("POST", "/api/tasks", "/api/tasks", 400, body=b"not a tar archive" * 40,
     ctype="application/x-tar")
if TOKEN:
    call("GET", "/api/health", "/api/health", 401, token=None)
    call("GET", "/api/tasks", "/api/tasks", 401, token="wrong")
    call("POST", "/api/tasks", "/api/tasks", 401, token=None, body=b"x" * 1000)
# The stream: its head and the first event.
req = urllib.request.Request(URL + "/api/events/stream?since=0&task=" + TASK)
req.add_header("Authorization", "Bearer " + TOKEN)
with urllib.request.urlopen(req, timeout=10) as r:
    if not r.headers.get("Content-Type", "").startswith("text/event-stream"):
        fail("the stream's Content-Type: %s" % r.headers.get("Content-Type"))
    data = None
    while data is None:
        line = r.readline().decode()
        if not line:
            break
        if line.startswith("data: "):
            data = json.loads(line[6:])
    if data is None:
        fail("the stream sent no event")
    else:
        check(data, {"$ref": "#/components/schemas/Event"}, "stream event")

# 3. Undescribed paths and methods.
for path in ("/api/nosuch", "/api/tasks/%s/nosuch" % TASK, "/api/result", "/api/events/x"):
    st, _, _ = request("GET", path)
    if st != 404:
        fail("GET %s (not described) -> %d, not 404" % (path, st))
for method, path in (("DELETE", "/api/tasks/" + TASK), ("POST", "/api/health"),
                     ("PUT", "/api/tasks"), ("POST", "/api/result/" + TASK),
                     ("GET", "/api/tasks/%s/cancel" % TASK)):
    st, _, _ = request(method, path, body=b"" if method != "GET" else None)
    if st != 405:
        fail("%s %s (not described) -> %d, not 405" % (method, path, st))

for f in failures:
    print("FAIL: " + f, file=sys.stderr)
if failures:
    print("openapi check: %d failure(s)" % len(failures), file=sys.stderr)
    sys.exit(1)
print("openapi check ok: %d routes" % len(served))
