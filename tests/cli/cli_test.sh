#!/bin/sh
# Drives the kclaw binary the way a user does: help for every subcommand,
# exit codes, --json output, clear errors.
set -u
K="$KCLAW_BIN/kclaw"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$K" --help >/dev/null || fail "kclaw --help"
for c in up submit status watch result cancel eval memory report main version; do
	out=$("$K" "$c" --help) || fail "kclaw $c --help exited $?"
	echo "$out" | grep -q "usage: kclaw" || fail "kclaw $c --help has no usage line"
done

"$K" frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command must exit 2"
"$K" frobnicate 2>&1 | grep -q "unknown command 'frobnicate'" || fail "unknown command message"
"$K" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no command must exit 2"

"$K" version --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["version"]' ||
	fail "version --json is not JSON with a version"
echo "cli ok"
