#!/usr/bin/env python3
"""The reference's baseline stops by the sandbox's rule: torchref_measure's
_median_settled on the cases test_integrity.c gives timing.c's
sbx_median_settled (one slow run of ten settles, two do not; the 6th and
15th of twenty). No GPU or PyTorch needed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu-sandbox"))
import torchref_measure as trm  # noqa: E402  (imports no PyTorch)

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL: " + what)


ten = [3.2257, 3.2280, 3.2290, 3.2300, 3.2304, 3.2306, 3.2310, 3.2315, 3.2320, 3.9721]
two_slow = ten[:8] + [3.9000, 3.9721]
fast_one = [2.5] + ten[1:9] + [3.2330]
check(trm._median_settled(ten, 0.01), "one slow run of ten is outside the interval")
check(trm._median_settled(list(reversed(ten)), 0.01), "the order the runs came in does not matter")
check(trm._median_settled(fast_one, 0.01), "one fast run of ten is outside the interval")
check(not trm._median_settled(two_slow, 0.01), "two slow runs of ten: the 9th is one of them")
twenty = [1.0 + i * 1e-4 if i < 15 else 2.0 for i in range(20)]
check(trm._median_settled(twenty, 0.01), "five slow runs of twenty are outside the 6th..15th")
twenty[14] = 2.0
check(not trm._median_settled(twenty, 0.01), "six slow runs of twenty are not")
check(not trm._median_settled(ten[:1], 0.01), "one run settles nothing")
check(not trm._median_settled(ten, 0.0001), "a spread over ci is not settled")
if failures:
    sys.exit(1)
print("ok: _median_settled follows the sandbox's rule")
