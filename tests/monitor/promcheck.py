#!/usr/bin/env python3
"""A strict checker of the Prometheus text exposition format (0.0.4), for
kclaw's /metrics (tests/monitor/metrics_test.sh).

    promcheck.py FILE [EXPR ...]

FILE is a scraped /metrics ("-" for stdin). It fails (exit 1, one line per
problem) unless:
  - every line is a sample, "# HELP NAME TEXT" or "# TYPE NAME TYPE", and
    the text ends with a newline;
  - names and label names are valid, label values escaped (\\\\, \\", \\n
    only), values are numbers;
  - each family has one HELP and one TYPE, both before its first sample, and
    all its samples follow them together (families are not interleaved);
  - every sample belongs to a declared family (no untyped samples);
  - counters end in _total and nothing else does; no _sum/_count/_bucket
    sample outside a histogram or summary;
  - no time unit but seconds (_ms, _milliseconds, _microseconds, _minutes,
    _hours in a name are refused);
  - no series twice (same name and label set);
  - histograms: every label set has ascending cumulative buckets ending in
    le="+Inf", equal to its _count, and a _sum; summaries: _sum and _count;
  - counters are >= 0.
Each EXPR then asserts a value: NAME{LABELS}OP NUMBER with OP one of
==, >=, >, <=, for a series present; NAME{LABELS}=absent for one that must
not be there. "promcheck.py FILE --dump" prints the parsed series as JSON.
"""

import json
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LNAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
BAD_UNITS = re.compile(r"_(ms|milliseconds|millis|us|microseconds|ns|nanoseconds|minutes|hours|days)(_|$)")


def parse_labels(text, where, errors):
    """text is what lies between { and }; returns a list of (name, value)."""
    labels, i, n = [], 0, len(text)
    while i < n:
        m = re.compile(LNAME).match(text, i)
        if not m:
            errors.append(f"{where}: bad label name at {text[i:]!r}")
            return labels
        lname = m.group(0)
        if lname.startswith("__"):
            errors.append(f"{where}: label name {lname} is reserved")
        i = m.end()
        if text[i:i + 2] != '="':
            errors.append(f"{where}: label {lname} without =\"value\"")
            return labels
        i += 2
        val = []
        while i < n and text[i] != '"':
            if text[i] == "\\":
                if i + 1 >= n or text[i + 1] not in '\\"n':
                    errors.append(f"{where}: bad escape in label {lname}")
                    return labels
                val.append({"\\": "\\", '"': '"', "n": "\n"}[text[i + 1]])
                i += 2
            elif text[i] == "\n":
                errors.append(f"{where}: newline in label {lname}")
                return labels
            else:
                val.append(text[i])
                i += 1
        if i >= n:
            errors.append(f"{where}: unterminated value of label {lname}")
            return labels
        i += 1
        labels.append((lname, "".join(val)))
        if i < n:
            if text[i] != ",":
                errors.append(f"{where}: expected , after label {lname}")
                return labels
            i += 1
    names = [k for k, _ in labels]
    if len(set(names)) != len(names):
        errors.append(f"{where}: a label name repeats")
    return labels


def parse_value(s):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise ValueError(s)
    return float(s)


def family_of(name, types):
    """The declared family a sample name belongs to, or None."""
    if name in types:
        return name
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf):
            base = name[: -len(suf)]
            t = types.get(base)
            if t == "histogram" or (t == "summary" and suf != "_bucket"):
                return base
    return None


def check(text):
    errors = []
    types, helps = {}, {}
    series = {}  # (name, frozenset(labels)) -> value
    order = []  # families in the order their samples came
    closed = set()  # families whose block ended
    block = None  # the family of the last HELP/TYPE line
    if text and not text.endswith("\n"):
        errors.append("the text does not end with a newline")
    for no, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        where = f"line {no}"
        if line == "":
            continue
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (" + NAME + r")(?: (.*))?", line)
            if not m:
                errors.append(f"{where}: a comment that is neither HELP nor TYPE: {line!r}")
                continue
            kind, name, rest = m.group(1), m.group(2), m.group(3) or ""
            if name in closed or (name in order and name != block):
                errors.append(f"{where}: {kind} for {name} after its samples")
            if kind == "HELP":
                if name in helps:
                    errors.append(f"{where}: second HELP for {name}")
                helps[name] = rest
            else:
                if name in types:
                    errors.append(f"{where}: second TYPE for {name}")
                if rest not in TYPES:
                    errors.append(f"{where}: unknown type {rest!r} for {name}")
                if rest == "untyped":
                    errors.append(f"{where}: {name} is untyped")
                types[name] = rest
            # Metadata starts the block of a family: the previous ends.
            if block is not None and block != name:
                closed.add(block)
            block = name
            continue
        m = re.fullmatch(r"(" + NAME + r")(?:\{(.*)\})? (\S+)(?: (-?\d+))?", line)
        if not m:
            errors.append(f"{where}: not a sample: {line!r}")
            continue
        name, ltext, vtext = m.group(1), m.group(2), m.group(3)
        labels = parse_labels(ltext, where, errors) if ltext else []
        try:
            value = parse_value(vtext)
        except ValueError:
            errors.append(f"{where}: {name}: value {vtext!r} is not a number")
            continue
        fam = family_of(name, types)
        if fam is None:
            errors.append(f"{where}: sample {name} has no TYPE before it")
            continue
        if fam not in helps:
            errors.append(f"{where}: family {fam} has no HELP before its samples")
        if fam != block:
            errors.append(f"{where}: sample of {fam} is not in the block of its HELP/TYPE "
                          f"(it follows {block}'s: families interleaved)")
        elif fam not in order:
            order.append(fam)
        key = (name, frozenset(labels))
        if key in series:
            errors.append(f"{where}: duplicate series {line.rsplit(' ', 1)[0]}")
        series[key] = value
        t = types[fam]
        if t == "counter" and (math.isnan(value) or value < 0):
            errors.append(f"{where}: counter {name} is {vtext}")
    # Names: units, _total, suffixes.
    for fam, t in types.items():
        if BAD_UNITS.search(fam):
            errors.append(f"{fam}: time is measured in seconds (_seconds), not in the unit its name says")
        if t == "counter" and not fam.endswith("_total"):
            errors.append(f"{fam}: a counter's name must end in _total")
        if t != "counter" and fam.endswith("_total"):
            errors.append(f"{fam}: a {t} named _total")
        if t not in ("histogram", "summary") and re.search(r"_(sum|count|bucket)$", fam):
            errors.append(f"{fam}: a {t} named like a histogram/summary series")
        if fam not in helps:
            errors.append(f"{fam}: no HELP")
    for fam in helps:
        if fam not in types:
            errors.append(f"{fam}: HELP without TYPE")
    # Histograms and summaries.
    for fam, t in types.items():
        if t not in ("histogram", "summary"):
            continue
        groups = {}
        for (name, labels), v in series.items():
            if family_of(name, types) != fam:
                continue
            rest = frozenset((k, x) for k, x in labels if k not in ("le", "quantile"))
            groups.setdefault(rest, {"bucket": [], "sum": None, "count": None, "base": 0})
            g = groups[rest]
            if name == fam + "_bucket":
                le = dict(labels).get("le")
                if le is None:
                    errors.append(f"{fam}: a bucket without le")
                    continue
                try:
                    g["bucket"].append((parse_value(le), v))
                except ValueError:
                    errors.append(f"{fam}: le={le!r} is not a number")
            elif name == fam + "_sum":
                g["sum"] = v
            elif name == fam + "_count":
                g["count"] = v
            elif name == fam:
                g["base"] += 1
                if t == "histogram":
                    errors.append(f"{fam}: a histogram sample without a suffix")
                elif "quantile" not in dict(labels):
                    errors.append(f"{fam}: a summary sample without quantile")
        for rest, g in groups.items():
            lbl = dict(rest)
            if g["sum"] is None or g["count"] is None:
                errors.append(f"{fam}{lbl}: _sum and _count must both be there")
            if t == "histogram":
                b = g["bucket"]
                if not b or b[-1][0] != math.inf:
                    errors.append(f"{fam}{lbl}: buckets must end with le=\"+Inf\"")
                    continue
                les = [x for x, _ in b]
                if les != sorted(les) or len(set(les)) != len(les):
                    errors.append(f"{fam}{lbl}: buckets not in ascending le")
                vals = [x for _, x in b]
                if vals != sorted(vals):
                    errors.append(f"{fam}{lbl}: buckets are not cumulative")
                if g["count"] is not None and b[-1][1] != g["count"]:
                    errors.append(f"{fam}{lbl}: le=\"+Inf\" {b[-1][1]} differs from _count {g['count']}")
    return errors, series


def lookup(series, expr):
    m = re.fullmatch(r"(" + NAME + r")(\{.*\})?(==|>=|<=|>|=)(absent|[-+0-9.eE]+)", expr)
    if not m:
        return f"bad expression {expr!r}"
    name, ltext, op, want = m.groups()
    errs = []
    labels = frozenset(parse_labels(ltext[1:-1], expr, errs) if ltext else [])
    if errs:
        return errs[0]
    have = series.get((name, labels))
    if want == "absent":
        return None if have is None else f"{expr}: present ({have})"
    if have is None:
        return f"{expr}: no such series"
    want = float(want)
    ok = {"==": abs(have - want) <= 1e-9 * max(1.0, abs(want)), ">=": have >= want,
          "<=": have <= want, ">": have > want}.get(op)
    return None if ok else f"{expr}: the value is {have}"


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    text = sys.stdin.read() if sys.argv[1] == "-" else open(sys.argv[1]).read()
    errors, series = check(text)
    if "--dump" in sys.argv[2:]:
        json.dump({f"{n}{dict(sorted(l))}": v for (n, l), v in series.items()}, sys.stdout, indent=1)
        print()
    for expr in sys.argv[2:]:
        if expr == "--dump":
            continue
        e = lookup(series, expr)
        if e:
            errors.append(e)
    for e in errors:
        print("promcheck: " + e)
    if not errors:
        print(f"promcheck: ok, {len(series)} series in {len(types_of(text))} families")
    return 1 if errors else 0


def types_of(text):
    return re.findall(r"^# TYPE (\S+)", text, re.M)


if __name__ == "__main__":
    sys.exit(main())
