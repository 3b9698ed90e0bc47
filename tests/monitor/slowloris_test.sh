#!/bin/sh
# The HTTP server's connection guard against a real kclawd with a token
# (slowloris_check.py): 1,000 half-sent requests do not pin 1,000
# descriptors, a real request is served meanwhile, and a connection that
# dribbles its headers is closed at the header deadline.
set -u
B="$KCLAW_BIN"
H=$(mktemp -d /tmp/kc-slow-XXXXXX)
PORT=$(python3 "$KCLAW_SRC/tests/free_port.py" 1)
cat >"$H/kclaw.json" <<EOJ
{"token": "slow-test-token", "http_url": "http://127.0.0.1:$PORT"}
EOJ
(unset KCLAW_TOKEN KCLAW_HTTP_URL; exec "$B/kclawd" --home "$H") >"$H/log" 2>&1 &
ORCH=$!
cleanup() { kill "$ORCH" 2>/dev/null; wait 2>/dev/null; rm -rf "$H"; }
fail() { echo "FAIL: $*" >&2; tail -20 "$H/log" >&2; cleanup; exit 1; }
i=0
until curl -s -o /dev/null "http://127.0.0.1:$PORT/login"; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done
python3 "$KCLAW_SRC/tests/monitor/slowloris_check.py" "$PORT" "$ORCH" slow-test-token ||
	fail "slowloris check"
kill -0 "$ORCH" || fail "kclawd died"
cleanup
