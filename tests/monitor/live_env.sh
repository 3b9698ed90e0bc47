# Sourced by the monitor tests: a service with a finished task that has
# real LLM usage, without a GPU. The real kclawd serving the dashboard on
# http://127.0.0.1:$PORT, kclaw-agent workers calling the provider emulator
# (tests/agents/llm_server.py in its model-like mode, scripted from
# examples/recordings by tests/mainjob/live.py: usage with reasoning and
# cached tokens, a malformed reply re-asked), and the real kclaw-sandbox
# whose child answers from the main job's table (the test double at the
# process boundary). `kclaw main softmax_rows --live --keep` runs the task
# to DONE in a few seconds and leaves the service up.
#
# Needs: B (bin folder), KCLAW_SRC, H (an empty folder), PORT; sets EMU
# (the emulator's pid), URL (its address) and TASK (the task's id). The
# caller's cleanup runs live_stop.

live_start() {
	. "$KCLAW_SRC/tests/agents/emu.sh"
	emu_start "$KCLAW_SRC" "$H" || return 1
	URL=$EMU_URL
	python3 "$KCLAW_SRC/tests/mainjob/live.py" script "$URL" \
		"$KCLAW_SRC/examples/recordings" >/dev/null || return 1
	python3 "$KCLAW_SRC/tests/mainjob/mainjob.py" table "$H/table" \
		"$H/expect.json" >/dev/null || return 1
	cat >"$H/sandbox" <<EOS
#!/bin/sh
exec "$B/kclaw-sandbox" --child "$B/mainjob_table_child" "\$@"
EOS
	chmod +x "$H/sandbox"
	mkdir -p "$H/home"
	cat >"$H/home/kclaw.json" <<EOJ
{"http_url": "http://127.0.0.1:$PORT",
 "prices": {"kclaw-emu*": {"prompt": 2, "completion": 8,
            "cached_prompt": 0.5, "reasoning": 6}}}
EOJ
	(
		unset KCLAW_LLM_REPLAY KCLAW_LLM_RECORD KCLAW_HTTP_URL
		export KCLAW_HOME="$H/home" KCLAW_SANDBOX_BIN="$H/sandbox" \
			MAINJOB_TABLE="$H/table" \
			KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1 \
			KCLAW_LLM_MODEL=kclaw-emu-1 KCLAW_LLM_BASE_URL="$URL/v1" \
			KCLAW_LLM_API_KEY=sk-monitor-test KCLAW_LLM_BACKOFF_MS=50 \
			KCLAW_LLM_MAX_TRIES=3
		"$B/kclaw" --home "$H/home" main softmax_rows --live \
			--manifest "$KCLAW_SRC/examples/recordings/main.json" \
			--skip-gpu-check --keep --json --timeout-s 60 \
			--examples "$KCLAW_SRC/examples" >"$H/main.json" 2>"$H/main.log"
	) || { tail -n 20 "$H/main.log" >&2; return 1; }
	TASK=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"][0]["id"])' \
		"$H/main.json") || { head -c 600 "$H/main.json" >&2; return 1; }
}

live_stop() {
	"$B/kclaw" --home "$H/home" up --stop >/dev/null 2>&1
	[ -z "${EMU:-}" ] || kill "$EMU" 2>/dev/null
}
