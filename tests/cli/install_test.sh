#!/bin/sh
# `cmake --install` puts every binary in PREFIX/bin and the prompts, the
# expert knowledge and the examples in PREFIX/share/kclaw; the installed
# binaries find them there with the source tree out of view (KCLAW_SRC and
# KCLAW_BIN unset, the working folder elsewhere, no other KCLAW_*).
set -u
BUILD="$KCLAW_BIN/.."
T=$(mktemp -d /tmp/kc-install-XXXXXX)
P="$T/prefix"
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 ||
	fail "cmake --install: $(tail -5 "$T/install.log")"
for b in kclaw kclawd kclaw-agent kclaw-sandbox kclaw-sandbox-child \
	kclaw-monitor kclaw-sandbox-bench; do
	[ -x "$P/bin/$b" ] || fail "$b is not installed in bin/"
done
[ -f "$P/share/kclaw/prompts/system.md" ] || fail "no prompts installed"
ls "$P"/share/kclaw/knowledge/* >/dev/null 2>&1 || fail "no knowledge installed"
[ -f "$P/share/kclaw/examples/softmax_rows/task.json" ] || fail "no examples"
[ -d "$P/share/kclaw/examples/recordings" ] || fail "no recordings"
[ ! -L "$P/share/kclaw/prompts" ] || fail "installed prompts are a link"
[ -f "$P/share/kclaw/kernelbench/kb2bundle.py" ] || fail "no kb2bundle.py installed"

# Run from elsewhere, with a clean environment.
mkdir "$T/elsewhere"
cd "$T/elsewhere" || fail "cd"
run() { env -i PATH=/usr/bin:/bin HOME="$T" KCLAW_HOME="$T/home" "$@"; }

# The knowledge: `kclaw memory import` takes the installed folder.
run "$P/bin/kclaw" memory import >"$T/import" 2>&1 ||
	fail "memory import: $(cat "$T/import")"
grep -q "imported $P/share/kclaw/knowledge as knowledge version" "$T/import" ||
	fail "memory import did not use the installed knowledge: $(cat "$T/import")"
run "$P/bin/kclaw" memory stats >"$T/stats" 2>&1 || fail "memory stats: $(cat "$T/stats")"

# The prompts: an agent starts with the installed templates.
run KCLAW_LLM_REPLAY="$P/share/kclaw/examples/recordings" \
	timeout 3 "$P/bin/kclaw-agent" --role planner >"$T/agent" 2>&1
grep -q "serving" "$T/agent" || fail "the agent did not start: $(cat "$T/agent")"

# KCLAW_SHARE_DIR overrides where the files are.
mv "$P/share/kclaw" "$T/moved"
run timeout 3 "$P/bin/kclaw-agent" --role planner >"$T/agent" 2>&1
grep -q "prompts folder $P/share/kclaw/prompts does not exist.*KCLAW_SHARE_DIR" \
	"$T/agent" || fail "no clear error without the files: $(cat "$T/agent")"
run KCLAW_SHARE_DIR="$T/moved" KCLAW_LLM_REPLAY="$T/moved/examples/recordings" \
	timeout 3 "$P/bin/kclaw-agent" --role planner >"$T/agent" 2>&1
grep -q "serving" "$T/agent" || fail "KCLAW_SHARE_DIR ignored: $(cat "$T/agent")"
mv "$T/moved" "$P/share/kclaw"

# The main job's CI variant from the prefix: examples, recordings, prompts
# and knowledge all come from share/kclaw.
rm -rf "$T/home"
run "$P/bin/kclaw" main --no-gpu-ok >"$T/main" 2>&1 ||
	fail "kclaw main --no-gpu-ok exited $?: $(tail -20 "$T/main")"
for log in "$T"/home/run/agent-*.log; do
	! grep -q "error" "$log" || fail "$(basename "$log"): $(grep error "$log")"
	grep -q "serving" "$log" || fail "$(basename "$log") never served"
done
# `kclaw kernelbench` finds the installed kb2bundle.py (here without
# PyTorch it refuses, naming it, before anything starts).
mkdir -p "$T/kb/level1"
printf 'class Model: pass\n' >"$T/kb/level1/1_A.py"
if ! run python3 -c 'import torch' 2>/dev/null; then
	run "$P/bin/kclaw" kernelbench "$T/kb" --levels 1 --out "$T/kbout" >/dev/null 2>"$T/kb.err"
	[ $? -eq 1 ] || fail "kernelbench without PyTorch: $(cat "$T/kb.err")"
	grep -q "the converter ($P/share/kclaw/kernelbench/kb2bundle.py) cannot convert: PyTorch" "$T/kb.err" ||
		fail "kernelbench did not find the installed kb2bundle.py: $(cat "$T/kb.err")"
fi
echo "install ok"
