#!/bin/sh
# The proof that a refactor of the sandbox changed nothing on the GPU: the
# GPU suite, the adversarial suite, timing_agree.py and kclaw-sandbox-bench
# from two packs (tools/pack-gpu-suite.sh), one built before the change and
# one after, then their verdicts and figures side by side.
#
#   tools/gpu-before-after.sh before|after   runs .carry/gpu-<which> into
#                                            $OUT/<which> (one pack a call,
#                                            each under 10 minutes)
#   tools/gpu-before-after.sh compare BEFORE_DIR AFTER_DIR
#                                            prints the comparison; exit 1
#                                            when a verdict changed
#
# Build the packs on any machine first:
#   git worktree add /tmp/kc-before <commit before the change>
#   (cd /tmp/kc-before && tools/pack-gpu-suite.sh "$PWD/.carry/gpu-before")
#   tools/pack-gpu-suite.sh .carry/gpu-after
set -eu
cd "$(dirname "$0")/.."
case "${1:-}" in
before | after)
	out=${OUT:-.}/$1
	mkdir -p "$out"
	rc=0
	".carry/gpu-$1/run-gpu-suite.sh" "$out" >"$out/run.log" 2>&1 || rc=$?
	tail -5 "$out/run.log"
	echo "$1: run-gpu-suite.sh exited $rc (logs in $out)"
	;;
compare)
	exec python3 tools/compare-gpu-logs.py "$2" "$3"
	;;
*)
	echo "usage: $0 before|after | compare BEFORE_DIR AFTER_DIR" >&2
	exit 2
	;;
esac
