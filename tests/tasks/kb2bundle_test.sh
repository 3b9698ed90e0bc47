#!/bin/sh
# ctest entry for the KernelBench bridge's tests (tests/tasks/kb2bundle_test.py).
exec python3 "$KCLAW_SRC/tests/tasks/kb2bundle_test.py" -v
