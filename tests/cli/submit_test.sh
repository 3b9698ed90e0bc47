#!/bin/sh
# `kclaw submit` twice: the same bundle while its task runs is a duplicate
# (said, and its id returned) unless --new; --task-id with the same bundle
# returns the id, with another bundle it is refused. Compared by content,
# also for tensors bundles (the orchestrator keeps their .npy as blobs).
set -u
B="$KCLAW_BIN"
K="$B/kclaw"
T=$(mktemp -d /tmp/kc-submit-XXXXXX)
cleanup() { kill "$ORCH" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; tail -5 "$T/kclawd.log" >&2; cleanup; exit 1; }

mkdir -p "$T/home"
(cd "$T/home" && exec "$B/kclawd" --home "$T/home") >"$T/kclawd.log" 2>&1 &
ORCH=$!
export KCLAW_HOME="$T/home"
i=0
until "$K" status --json >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done
EX="$KCLAW_SRC/examples"
# No agents run, so every task stays unfinished (running).

A=$("$K" submit "$EX/sum_reduce" 2>"$T/err") || fail "first submit: $(cat "$T/err")"
[ -n "$A" ] || fail "no id"
[ ! -s "$T/err" ] || fail "a first submit says: $(cat "$T/err")"

# The same bundle again: its id, and why.
id=$("$K" submit "$EX/sum_reduce" 2>"$T/err") || fail "second submit exited $?"
[ "$id" = "$A" ] || fail "a duplicate returned $id, not $A"
grep -q "duplicate of the running task $A" "$T/err" || fail "not said: $(cat "$T/err")"
grep -q -- "--new" "$T/err" || fail "--new not mentioned"
"$K" submit "$EX/sum_reduce" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d == {"task_id": "'"$A"'", "duplicate": True}, d' || fail "--json of a duplicate"

# --new: another task.
N=$("$K" submit "$EX/sum_reduce" --new 2>"$T/err") || fail "--new: $(cat "$T/err")"
[ -n "$N" ] && [ "$N" != "$A" ] || fail "--new returned $N"

# The same name with other content is not a duplicate.
cp -r "$EX/sum_reduce" "$T/sum2"
sed 's/"trials": *[0-9]*/"trials": 5/' "$EX/sum_reduce/task.json" >"$T/sum2/task.json"
cmp -s "$T/sum2/task.json" "$EX/sum_reduce/task.json" &&
	python3 - "$T/sum2/task.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["trials"] = 5
json.dump(d, open(sys.argv[1], "w"))
PY
C=$("$K" submit "$T/sum2" 2>"$T/err") || fail "changed bundle: $(cat "$T/err")"
[ "$C" != "$A" ] && [ "$C" != "$N" ] || fail "a changed bundle was taken for a duplicate"

# --task-id: same bundle twice gives the id; another bundle is refused.
id=$("$K" submit "$EX/bias_gelu" --task-id mine 2>"$T/err") || fail "--task-id: $(cat "$T/err")"
[ "$id" = mine ] || fail "--task-id returned $id"
id=$("$K" submit "$EX/bias_gelu" --task-id mine 2>"$T/err") || fail "again: $(cat "$T/err")"
[ "$id" = mine ] || fail "--task-id again returned $id"
grep -q "task mine already holds this bundle" "$T/err" || fail "not said: $(cat "$T/err")"
"$K" submit "$EX/softmax_rows" --task-id mine >"$T/out" 2>"$T/err"
[ $? -eq 1 ] || fail "another bundle under an existing --task-id must exit 1"
[ ! -s "$T/out" ] || fail "a refused submit printed an id: $(cat "$T/out")"
grep -q "task mine exists with a different bundle (bias_gelu" "$T/err" ||
	fail "no clear refusal: $(cat "$T/err")"
"$K" submit "$EX/softmax_rows" --task-id x --new >/dev/null 2>"$T/err"
[ $? -eq 2 ] || fail "--new with --task-id must be a usage error"

# A tensors bundle: sent inline, stored as blobs, still recognised; other
# tensor contents are another bundle.
mkdir "$T/tb"
python3 "$KCLAW_SRC/tests/cli/mknpy.py" "$T/tb" || fail mknpy
cat >"$T/tb/task.json" <<'JSON'
{"name": "double", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [4]},
  {"name": "y", "kind": "output", "dtype": "f32", "shape": [4]}],
 "tolerance": {"atol": 1e-6, "rtol": 1e-5, "max_rel_norm": 1e-5},
 "reference": {"kind": "tensors", "baseline_ms": 1.0,
   "sets": [{"seed": 1, "inputs": {"x": "x.npy"}, "expected": {"y": "y.npy"}}]}}
JSON
D=$("$K" submit "$T/tb" 2>"$T/err") || fail "tensors: $(cat "$T/err")"
id=$("$K" submit "$T/tb" 2>"$T/err") || fail "tensors again: $(cat "$T/err")"
[ "$id" = "$D" ] || fail "a tensors duplicate returned $id, not $D"
cp "$T/tb/x.npy" "$T/x.npy"
cp "$T/tb/y.npy" "$T/tb/x.npy"
id=$("$K" submit "$T/tb" 2>"$T/err") || fail "tensors changed: $(cat "$T/err")"
[ "$id" != "$D" ] || fail "other tensor contents were taken for a duplicate"

# A finished task is no reason to refuse: cancelled, the bundle goes again.
"$K" cancel "$A" >/dev/null 2>&1 || fail "cancel"
"$K" cancel "$N" >/dev/null 2>&1 || fail "cancel"
id=$("$K" submit "$EX/sum_reduce" 2>"$T/err") || fail "after cancel: $(cat "$T/err")"
[ "$id" != "$A" ] && [ "$id" != "$N" ] || fail "a cancelled task was taken as running"
cleanup
echo "submit ok"
