#!/usr/bin/env python3
"""Checks `kclaw ... --json` output against the convention of docs/cli.md
("JSON output").

    json_check.py doc FILE [RC]     one document (RC: the exit status, 0)
    json_check.py lines FILE        JSON lines (a stream: watch)
    json_check.py error FILE RC     the error document of a failed command

Every value of an enum field is lower case; no string is empty (missing is
null); no bytes are printed (no base64 field, bytes as NAME_bytes); an
error is {"error": {"code", "exit", "message"}} with exit == RC != 0.
Prints what it checked; exits 1 with the first violation."""
import json
import sys

ENUMS = {"state", "status", "kind", "role", "dtype", "dist", "eval_status",
         "code"}
BYTES = {"fsm", "payload", "data"}  # the proto's bytes fields
ERROR_CODES = {1: "failed", 2: "usage", 3: "not_found", 4: "unreachable",
               5: "not_implemented"}


def fail(msg):
    print("json_check: " + msg, file=sys.stderr)
    sys.exit(1)


def walk(x, path, seen):
    if isinstance(x, dict):
        for k, v in x.items():
            p = path + "." + k
            if k in BYTES:
                fail("%s: a bytes field is printed (want %s_bytes)" % (p, k))
            if k.endswith("_bytes") and k[:-6] in BYTES and \
                    v is not None and not isinstance(v, int):
                fail("%s: %r is not a length" % (p, v))
            if k in ENUMS and isinstance(v, str):
                if v != v.lower():
                    fail("%s: enum %r is not lower case" % (p, v))
                seen.add(k)
            walk(v, p, seen)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            walk(v, "%s[%d]" % (path, i), seen)
    elif isinstance(x, str) and x == "":
        fail("%s: empty string (missing values are null)" % path)


def parse(text, what):
    try:
        return json.loads(text)
    except ValueError as e:
        fail("%s is not JSON (%s): %r" % (what, e, text[:300]))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    rc = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    text = open(path).read()
    seen = set()
    if mode == "lines":
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            fail("%s: no lines" % path)
        for i, line in enumerate(lines):
            walk(parse(line, "%s line %d" % (path, i + 1)), "$", seen)
        print("ok: %d lines, enums %s" % (len(lines), sorted(seen)))
        return
    if text.count("\n") != 1 or not text.endswith("\n"):
        fail("%s: want one JSON document on one line, got %r" %
             (path, text[:300]))
    doc = parse(text, path)
    walk(doc, "$", seen)
    if mode == "error":
        if rc == 0:
            fail("an error exited 0")
        e = doc.get("error") if isinstance(doc, dict) else None
        if not isinstance(e, dict) or set(e) != {"code", "exit", "message"}:
            fail("not an error document: %r" % doc)
        if e["exit"] != rc or e["code"] != ERROR_CODES.get(rc, "failed"):
            fail("error %r does not match exit %d" % (e, rc))
        if not e["message"] or e["message"].startswith("usage:"):
            fail("error without its message: %r" % e)
        print("ok: error %s (exit %d): %s" % (e["code"], rc, e["message"]))
        return
    if isinstance(doc, dict) and "error" in doc and len(doc) == 1:
        fail("an error document where the answer was wanted: %r" % doc)
    print("ok: document, enums %s" % sorted(seen))


main()
