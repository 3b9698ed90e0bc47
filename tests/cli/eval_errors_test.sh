#!/bin/sh
# `kclaw eval TASK CAND` on the common mistakes: each one ends with a clear
# message and its documented exit code (docs/cli.md), never an abort.
set -u
K="$KCLAW_BIN/kclaw"
EX="$KCLAW_SRC/examples/softmax_rows"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect CODE PATTERN CMD...: CMD exits CODE and its stderr matches PATTERN.
expect() {
	code=$1 pat=$2
	shift 2
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq "$code" ] || fail "$* exited $rc, not $code: $(cat "$T/err")"
	grep -q "$pat" "$T/err" || fail "$*: no '$pat' in: $(cat "$T/err")"
	! grep -q "AddressSanitizer\|runtime error\|free()" "$T/err" ||
		fail "$*: crashed: $(cat "$T/err")"
}
CO="--compile-only --arch sm_90"

# A mistyped candidate folder: not found, and what a candidate folder is.
expect 3 "candidate folder $T/nope" "$K" eval "$EX" "$T/nope" $CO
grep -q "kernel.cu and plan.json" "$T/err" || fail "no hint on the candidate"

# A mistyped task folder.
expect 3 "bundle folder $T/nothing" "$K" eval "$T/nothing" $CO
grep -q "task bundle folder" "$T/err" || fail "no hint on the task"

# A candidate without plan.json.
cp -r "$EX/candidates/2" "$T/c"
rm "$T/c/plan.json"
expect 3 "'plan.json' is missing" "$K" eval "$EX" "$T/c" $CO

# A malformed plan.json: the file and the line.
echo '{"steps": [' >"$T/c/plan.json"
expect 2 "plan.json: not valid JSON near line" "$K" eval "$EX" "$T/c" $CO

# A candidate without kernel.cu.
cp "$EX/candidates/2/plan.json" "$T/c/"
rm "$T/c/kernel.cu"
expect 3 "'kernel.cu' is missing" "$K" eval "$EX" "$T/c" $CO

# A `tensors` task, --compile-only and no candidate: usage, and the command
# to run.
mkdir "$T/tb"
python3 "$KCLAW_SRC/tests/cli/mknpy.py" "$T/tb" || fail "mknpy"
cat >"$T/tb/task.json" <<'JSON'
{"name": "double", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [4]},
  {"name": "y", "kind": "output", "dtype": "f32", "shape": [4]}],
 "tolerance": {"atol": 1e-6, "rtol": 1e-5, "max_rel_norm": 1e-5},
 "reference": {"kind": "tensors", "baseline_ms": 1.0,
   "sets": [{"seed": 1, "inputs": {"x": "x.npy"}, "expected": {"y": "y.npy"}}]}}
JSON
expect 2 "kclaw eval $T/tb CANDIDATE_DIR" "$K" eval "$T/tb" $CO

# A size limit names the file and its real size (the error formatter once
# overwrote the message it was wrapping: "context: 64 bytes, over ...").
mkdir "$T/big"
cp "$EX/task.json" "$EX/reference.cu" "$EX/reference.plan.json" "$T/big/"
truncate -s 64M "$T/big/context.py"
expect 1 "context: $T/big/context.py is 67108864 bytes, over the limit of" \
	"$K" eval "$T/big" $CO
[ "$(grep -c "task.json: context" "$T/err")" -eq 1 ] &&
	[ "$(grep -o "task.json" "$T/err" | wc -l)" -eq 1 ] ||
	fail "the size message repeats itself: $(cat "$T/err")"

# Bad options: usage.
expect 2 "needs a number" "$K" eval "$EX" --trials x
expect 2 "unknown option" "$K" eval "$EX" --frobnicate
expect 2 "too many arguments" "$K" eval "$EX" a b c
echo "eval errors ok"
