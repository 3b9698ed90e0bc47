# Writes the two .npy files of the tests' `tensors` bundle (no NumPy needed).
import struct
import sys


def npy(path, vals):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(vals)
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.write(struct.pack("<%df" % len(vals), *vals))


npy(sys.argv[1] + "/x.npy", [1, 2, 3, 4])
npy(sys.argv[1] + "/y.npy", [2, 4, 6, 8])
