#!/usr/bin/env python3
"""Prints a TCP port P of 127.0.0.1 such that P .. P+SPAN-1 are all free now.

    python3 tests/free_port.py [SPAN]

For the shell tests that listen on PORT, PORT+1, ... A port derived from
the shell's pid can meet another test's listener when ctest runs tests in
parallel, or any process's ephemeral port; these are below the ephemeral
range (32768-60999 on Linux), so no outgoing connection takes one
meanwhile, and each is bound once to prove it free. The C tests use
kt_free_ports (tests/kc_test.h).
"""
import os
import random
import socket
import sys


def free_span(span):
    rng = random.Random(os.getpid())
    for _ in range(200):
        base = rng.randrange(10000, 32000 - span)
        held = []
        try:
            for p in range(base, base + span):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    sys.exit("free_port.py: no %d free consecutive ports in 10000-32000" % span)


if __name__ == "__main__":
    print(free_span(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
