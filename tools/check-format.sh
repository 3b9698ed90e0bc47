#!/bin/sh
# Fails when a C/C++ file of the project is not clang-formatted.
cd "$(dirname "$0")/.." || exit 1
files=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null)
[ -z "$files" ] && files=$(find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print)
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
