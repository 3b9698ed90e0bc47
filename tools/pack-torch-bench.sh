#!/bin/sh
# Packs what tools/bench/torch_ops_bench.py needs on a GPU machine that has
# PyTorch but not kclaw's build dependencies: the exporter's test driver
# kc-export-test (a non-sanitized build) and every shared library it needs
# that the machine is not sure to have, with a wrapper that finds them.
#
#   tools/pack-torch-bench.sh [OUT_DIR [BUILD_DIR]]    (default .carry/torch-bench)
#
# Then, on the GPU machine, from the repository's root:
#   python3 tools/bench/torch_ops_bench.py --export OUT_DIR/kc-export-test --out LOGS
set -eu
cd "$(dirname "$0")/.."
out=${1:-.carry/torch-bench}
build=${2:-build-sandbox-rel}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKC_SANITIZE=OFF \
	-DKC_TESTS=ON >/dev/null
cmake --build "$build" -j 2 --target kc-export-test >/dev/null

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/bin/kc-export-test" "$out/bin/"
skip='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux.*|linux-vdso|libgcc_s|libstdc\+\+)\.so'
ldd "$out/bin/kc-export-test" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
	name=$(basename "$lib")
	if echo "$name" | grep -Eq "$skip"; then
		continue
	fi
	cp -L "$lib" "$out/lib/$name"
done
cat >"$out/kc-export-test" <<'RUN'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}" exec "$here/bin/kc-export-test" "$@"
RUN
chmod +x "$out/kc-export-test"
echo "packed $out ($(du -sh "$out" | cut -f1))"
