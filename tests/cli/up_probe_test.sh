#!/bin/sh
# `kclaw up` asks the model endpoint for its models with the key before it
# starts, and says what answered or why not, then goes on: the model
# listed, a model not listed, a refused key (401, with what to set), an
# endpoint that does not answer. The LLM emulator serves /v1/models.
set -u
K="$KCLAW_BIN/kclaw"
T=$(mktemp -d /tmp/kc-upprobe-XXXXXX)
H="$T/home"
LLM=
unset KCLAW_LLM_REPLAY KCLAW_HTTP_URL KCLAW_AGENT_BIN KCLAW_HOME KCLAW_LLM_API
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
cleanup() { "$K" --home "$H" up --stop >/dev/null 2>&1; kill $LLM 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; cleanup; exit 1; }
mkdir -p "$H"

. "$KCLAW_SRC/tests/agents/emu.sh"
emu_start "$KCLAW_SRC" "$T" || fail "the emulator never started"
LLM=$EMU URL="$EMU_URL/v1"
echo '{"actions": [], "key": "kc-right-key", "models": [{"id": "other-model"}, {"id": "test-model"}]}' |
	curl -sf -X POST --data-binary @- "$URL/../_script" >/dev/null || fail "scripting the emulator"

# up: its output must hold $1; it goes on (exit 0) and is stopped.
up_says() {
	"$K" --home "$H" up --detach >"$T/out" 2>"$T/err" ||
		fail "up refused ($2): $(cat "$T/out" "$T/err")"
	grep -qF -- "$1" "$T/out" || fail "$2: $(cat "$T/out" "$T/err")"
	grep -q "kc-right-key\|kc-wrong-key" "$T/out" "$T/err" && fail "$2: the key is printed"
	"$K" --home "$H" up --stop >/dev/null 2>&1 || fail "stop ($2)"
}

export KCLAW_LLM_BASE_URL="$URL" KCLAW_LLM_MODEL=test-model KCLAW_LLM_API_KEY=kc-right-key
up_says "model: $URL/models answers and lists test-model" "listed"
KCLAW_LLM_MODEL=gone-model up_says \
	"warning: $URL/models answers but does not list model gone-model (it lists other-model, test-model)" "not listed"
KCLAW_LLM_API_KEY=kc-wrong-key up_says \
	"warning: the model endpoint $URL/models refused the key (HTTP 401); set KCLAW_LLM_API_KEY" "401"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KCLAW_LLM_BASE_URL="http://127.0.0.1:$port/v1" up_says \
	"warning: the model endpoint http://127.0.0.1:$port/v1/models did not answer (" "unreachable"
grep -qi "refused\|connect" "$T/out" || fail "unreachable: no cause: $(cat "$T/out")"
cleanup
echo "up probe ok"
