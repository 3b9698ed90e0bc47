#!/bin/sh
# tools/package.sh makes a tarball that runs where it is unpacked: every
# binary, share/kclaw, and in lib/ the non-system libraries (libnng,
# libprotobuf-c, librocksdb, libcurl and their own dependencies), which the
# unpacked binaries load from there.
set -u
T=$(mktemp -d /tmp/kc-package-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

tgz=$(sh "$KCLAW_SRC/tools/package.sh" "$KCLAW_BIN/.." "$T/out" 2>"$T/err") ||
	fail "package.sh: $(cat "$T/err")"
[ -f "$tgz" ] || fail "package.sh printed '$tgz', which is no file"
mkdir "$T/unpacked"
tar -C "$T/unpacked" -xzf "$tgz" || fail "tar"
R=$(ls -d "$T"/unpacked/kclaw-*)
for b in kclaw kclawd kclaw-agent kclaw-sandbox kclaw-sandbox-child; do
	[ -x "$R/bin/$b" ] || fail "$b missing"
done
for l in libnng libprotobuf-c librocksdb libcjson libcurl; do
	ls "$R"/lib/$l.so* >/dev/null 2>&1 || fail "$l not carried"
done
ls "$R"/lib/libc.so* "$R"/lib/libcuda.so* >/dev/null 2>&1 && fail "system libraries carried"

# Each carried library, also one needed only by another carried library,
# is loaded from lib/ (not from this machine's /usr/lib).
for b in "$R"/bin/*; do
	ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r n path; do
		if [ -e "$R/lib/$n" ] && [ "$path" != "$R/bin/../lib/$n" ] &&
			[ "$path" != "$R/lib/$n" ]; then
			echo "$(basename "$b"): $n from $path"
		fi
	done
done >"$T/wrong"
[ ! -s "$T/wrong" ] || fail "not loaded from lib/: $(cat "$T/wrong")"

# It runs and finds its files, from elsewhere, in a clean environment.
cd "$T" || fail cd
env -i PATH=/usr/bin:/bin KCLAW_HOME="$T/home" "$R/bin/kclaw" memory import \
	>"$T/import" 2>&1 || fail "memory import: $(cat "$T/import")"
grep -q "imported $R/share/kclaw/knowledge" "$T/import" ||
	fail "not the packed knowledge: $(cat "$T/import")"
[ -f "$R/share/kclaw/kernelbench/kb2bundle.py" ] || fail "kb2bundle.py is not packed"
echo "package ok"
