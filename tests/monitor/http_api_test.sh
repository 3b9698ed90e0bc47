#!/bin/sh
# The HTTP API end to end, against real kclawd processes:
#  1. docs/openapi.json against the server (openapi_check.py): the routes
#     served are the ones described and back, and every call's answer has
#     the declared status and shape, on a finished task with real LLM
#     usage (live_env.sh);
#  2. the Python client (client_test.py): result, the export's files
#     (identical to `kclaw result --out`), the report (identical to `kclaw
#     report --json`), events with catch-up and as a stream, errors as
#     exceptions; and on a second kclawd with a token: refused without it,
#     submit a bundle folder, wait with progress while it is cancelled, a
#     tensors bundle whose .npy files go up by content.
#  3. the shell example of docs/api.md (curl), run as written.
set -u
B="$KCLAW_BIN"
HERE="$KCLAW_SRC/tests/monitor"
. "$HERE/live_env.sh"
H=$(mktemp -d /tmp/kc-httpapi-XXXXXX)
PORT=$(python3 "$KCLAW_SRC/tests/free_port.py" 4)
TOK=
cleanup() {
	[ -z "$TOK" ] || kill "$TOK" 2>/dev/null
	live_stop
	wait 2>/dev/null
	rm -rf "$H"
}
fail() { echo "FAIL: $*" >&2; [ -f "$H/tok/log" ] && tail -20 "$H/tok/log" >&2; cleanup; exit 1; }

# A kclawd with a token (ipc:// sockets, no workers).
mkdir -p "$H/tok"
TPORT=$((PORT + 2))
cat >"$H/tok/kclaw.json" <<EOJ
{"token": "http-api-test-token", "http_url": "http://127.0.0.1:$TPORT"}
EOJ
(unset KCLAW_TOKEN KCLAW_HTTP_URL; exec "$B/kclawd" --home "$H/tok") >"$H/tok/log" 2>&1 &
TOK=$!

live_start || fail "the live task did not run"
A="http://127.0.0.1:$PORT"
i=0
until curl -s -o /dev/null "http://127.0.0.1:$TPORT/login"; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "the token kclawd never answered"; sleep 0.1
done

python3 "$HERE/openapi_check.py" "$A" "" "$TASK" "$KCLAW_SRC" || fail "openapi check"
python3 "$HERE/client_test.py" "$A" "$TASK" "$H/home" "http://127.0.0.1:$TPORT" \
	http-api-test-token "$KCLAW_SRC" "$B" || fail "client test"

# docs/api.md's curl example, as written there, on the token kclawd.
sed -n '/^```sh curl-example/,/^```$/p' "$KCLAW_SRC/docs/api.md" | sed '1d;$d' >"$H/example.sh"
[ "$(wc -l <"$H/example.sh")" -ge 10 ] || fail "docs/api.md has no curl example"
(cd "$KCLAW_SRC" && KCLAW_URL="http://127.0.0.1:$TPORT" KCLAW_TOKEN=http-api-test-token \
	EXAMPLE_OUT="$H/example-out" FOLLOW_S=3 timeout 60 sh -e "$H/example.sh") >"$H/example.log" 2>&1 ||
	{ cat "$H/example.log" >&2; fail "the curl example"; }
grep -q '"state":"cancelled"' "$H/example.log" || { cat "$H/example.log" >&2; fail "the curl example did not cancel"; }
echo "http api test ok"
cleanup
