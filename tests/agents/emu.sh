# Sourced by the tests that start the provider emulator (llm_server.py).
#
# emu_start SRC DIR [ARGS...]: starts SRC/tests/agents/llm_server.py with
# ARGS, its port file and log in DIR (emu.port, emu.log); sets EMU (its
# pid) and EMU_URL (http://127.0.0.1:PORT). Returns 1, saying so, when it
# has not written its port within 10 s.
emu_start() {
	emu_src=$1 emu_dir=$2
	shift 2
	python3 "$emu_src/tests/agents/llm_server.py" --port-file "$emu_dir/emu.port" \
		"$@" >"$emu_dir/emu.log" 2>&1 &
	EMU=$!
	emu_i=0
	while [ ! -s "$emu_dir/emu.port" ]; do
		emu_i=$((emu_i + 1))
		[ $emu_i -lt 100 ] || {
			echo "the emulator did not start (see $emu_dir/emu.log)" >&2
			return 1
		}
		sleep 0.1
	done
	EMU_URL="http://127.0.0.1:$(cat "$emu_dir/emu.port")"
}
