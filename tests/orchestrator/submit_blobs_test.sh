#!/bin/sh
# A task is imported by content: `kclaw submit` sends a tensors bundle's
# .npy files with the spec, the orchestrator stores them as blobs (sha256),
# and the task no longer needs the bundle folder. A path outside the
# orchestrator's bundle roots is refused.
set -u
B="$KCLAW_BIN"
T=$(mktemp -d /tmp/kc-subblob-XXXXXX)
cleanup() { kill "$ORCH" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; tail -5 "$T/kclawd.log" >&2; cleanup; exit 1; }

python3 "$KCLAW_SRC/tests/mainjob/mainjob.py" tensors-bundle bias_gelu \
	"$T/kb/bias_gelu" 0.165 0.05 >/dev/null || fail "making the bundle"
mkdir -p "$T/home"
(cd "$T/home" && exec "$B/kclawd" --home "$T/home") >"$T/kclawd.log" 2>&1 &
ORCH=$!
export KCLAW_HOME="$T/home"
i=0
until "$B/kclaw" status --json >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done

# By path: outside the roots (the home and kclawd's cwd), refused.
if "$B/kclaw" submit --remote "$T/kb/bias_gelu" >"$T/remote.txt" 2>&1; then
	fail "a bundle outside the roots was accepted by path"
fi
grep -q "outside the allowed roots" "$T/remote.txt" || fail "no clear refusal: $(cat "$T/remote.txt")"

# By content: accepted, and the tensors are blobs in the store.
TASK=$("$B/kclaw" submit "$T/kb/bias_gelu" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["task_id"])') || fail "submit"
rm -rf "$T/kb"
"$B/kclaw" status "$TASK" --json >"$T/status.json" || fail "status"
python3 - "$T/status.json" <<'PY' || fail "the stored spec does not hold blobs"
import json, re, sys
rec = json.load(open(sys.argv[1]))
rec = rec.get("task", rec)
sets = rec["spec"]["reference"]["sets"]
tds = [td for s in sets for td in s["inputs"] + s["expected"]]
assert tds, "no tensors"
for td in tds:
    assert re.fullmatch(r"[0-9a-f]{64}", td["blob"]), td
PY
echo "submit_blobs ok"
cleanup
