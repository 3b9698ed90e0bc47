#!/usr/bin/env python3
"""Tests of the KernelBench bridge (tools/kernelbench/kb2bundle.py).

The torch-free parts (names, .npy files, task.json) are tested everywhere,
and what they write is loaded by kclaw's own bundle loader
(tasks_bundle_check, from $KCLAW_BIN). The conversion of the problems in
tools/kernelbench/problems/ runs end to end only where PyTorch imports; it
uses the GPU when PyTorch sees one, else the CPU.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("KCLAW_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("KCLAW_BIN") or os.path.join(SRC, "build", "bin")
sys.path.insert(0, os.path.join(SRC, "tools", "kernelbench"))

import kb2bundle as kb  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
except ImportError:
    torch = None


def load_with_kclaw(folder):
    """Runs kclaw's loader on a bundle: (exit status, stdout, stderr)."""
    exe = os.path.join(BIN, "tasks_bundle_check")
    if not os.path.exists(exe):
        raise AssertionError("%s is missing; build the target tasks_bundle_check" % exe)
    p = subprocess.run([exe, folder], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def slurp(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def f32_bytes(values):
    return struct.pack("<%df" % len(values), *values)


def f32_values(data):
    return list(struct.unpack("<%df" % (len(data) // 4), data))


class Names(unittest.TestCase):
    def test_state_dict_names_become_identifiers(self):
        taken = set()
        self.assertEqual(kb.c_identifier("layers.0.weight", taken), "layers_0_weight")
        self.assertEqual(kb.c_identifier("0.bias", taken), "t_0_bias")
        self.assertEqual(kb.c_identifier("conv-1/w", taken), "conv_1_w")
        self.assertEqual(kb.c_identifier("", taken), "t")
        self.assertEqual(kb.c_identifier("__x", taken), "x")

    def test_reserved_words_are_prefixed(self):
        taken = set()
        for word in ("int", "float", "class", "threadIdx", "lambda"):
            self.assertEqual(kb.c_identifier(word, taken), "t_" + word)

    def test_collisions_get_suffixes(self):
        taken = set()
        self.assertEqual(kb.c_identifier("a.b", taken), "a_b")
        self.assertEqual(kb.c_identifier("a_b", taken), "a_b_2")
        self.assertEqual(kb.c_identifier("a..b", taken), "a_b_3")
        self.assertEqual(taken, {"a_b", "a_b_2", "a_b_3"})

    def test_long_names_stay_within_63(self):
        taken = set()
        long = "m" * 100
        a = kb.c_identifier(long, taken)
        b = kb.c_identifier(long, taken)
        self.assertEqual(len(a), 63)
        self.assertLessEqual(len(b), 63)
        self.assertNotEqual(a, b)

    def test_task_names(self):
        self.assertEqual(kb.task_name("/p/19_ReLU.py"), "19_ReLU")
        self.assertEqual(kb.task_name("a b+c.py"), "a_b_c")
        self.assertEqual(kb.task_name(".hidden.py"), "hidden")

    def test_forward_argument_names(self):
        class M:
            def forward(self, a, residual, scale=1.0):
                pass

            def forward_var(self, *args):
                pass

        self.assertEqual(kb.forward_arg_names(M().forward, 2), ["a", "residual"])
        self.assertEqual(kb.forward_arg_names(M().forward_var, 2), ["x0", "x1"])


class Npy(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kb2bundle_npy_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_round_trip_and_layout(self):
        path = os.path.join(self.dir, "sub", "x.npy")
        data = f32_bytes([float(i) / 3 for i in range(12)])
        kb.write_npy(path, "<f4", [3, 4], data)
        raw = slurp(path, "rb")
        self.assertEqual(raw[:8], b"\x93NUMPY\x01\x00")
        hlen = struct.unpack("<H", raw[8:10])[0]
        self.assertEqual((10 + hlen) % 64, 0, "data starts on a 64-byte boundary")
        self.assertTrue(raw[10 + hlen - 1:10 + hlen] == b"\n")
        descr, shape, body = kb.read_npy(path)
        self.assertEqual((descr, shape, body), ("<f4", (3, 4), data))

    def test_one_dim_and_byte_types(self):
        path = os.path.join(self.dir, "v.npy")
        kb.write_npy(path, "|i1", [5], bytes([1, 2, 3, 4, 255]))
        self.assertIn(b"'shape': (5,)", slurp(path, "rb"))
        self.assertEqual(kb.read_npy(path), ("|i1", (5,), bytes([1, 2, 3, 4, 255])))

    def test_wrong_size_and_unknown_descr_are_refused(self):
        with self.assertRaisesRegex(kb.BridgeError, "8 bytes of data for shape"):
            kb.write_npy(os.path.join(self.dir, "b.npy"), "<f4", [3], b"\0" * 8)
        with self.assertRaisesRegex(kb.BridgeError, "not one kclaw reads"):
            kb.write_npy(os.path.join(self.dir, "c.npy"), "<c8", [1], b"\0" * 8)

    @unittest.skipIf(numpy is None, "NumPy is not installed here; the bridge's own "
                     ".npy writer is checked against kclaw's reader instead")
    def test_numpy_reads_it(self):
        path = os.path.join(self.dir, "n.npy")
        kb.write_npy(path, "<f4", [2, 3], f32_bytes([1, 2, 3, 4, 5, 6]))
        a = numpy.load(path)
        self.assertEqual(a.shape, (2, 3))
        self.assertEqual(a.dtype, numpy.float32)
        self.assertEqual(a.ravel().tolist(), [1, 2, 3, 4, 5, 6])


class Bundle(unittest.TestCase):
    """A ReLU-with-scale task computed in plain Python, written by the bridge
    and read back by kclaw's loader."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kb2bundle_bundle_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def make(self, seeds=(1, 2), shape=(4, 5)):
        n = shape[0] * shape[1]
        w = [0.5 + i / 10 for i in range(shape[1])]
        tensors = [kb.Tensor("x", "input", "f32", shape),
                   kb.Tensor("scale_weight", "parameter", "f32", [shape[1]], "scale.weight"),
                   kb.Tensor("out", "output", "f32", shape)]
        sets = []
        for seed in seeds:
            rng = random.Random(seed)
            x = [rng.gauss(0, 1) for _ in range(n)]
            y = [max(v, 0.0) * w[i % shape[1]] for i, v in enumerate(x)]
            sets.append((seed, {"x": f32_bytes(x)}, {"out": f32_bytes(y)}))
        path = kb.write_bundle(self.dir, "relu_scale", kb.describe("relu_scale.py", tensors),
                               "class Model: pass\n", tensors,
                               {"scale_weight": f32_bytes(w)}, sets,
                               {"atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-2},
                               1.5, 0.5)
        return path, sets

    def test_kclaw_loads_what_the_bridge_writes(self):
        path, sets = self.make()
        rc, out, err = load_with_kclaw(self.dir)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertIn("name relu_scale", lines)
        self.assertIn("reference tensors", lines)
        self.assertIn("baseline_ms 1.5", lines)
        self.assertIn("torch_compile_ms 0.5", lines)
        self.assertIn("tensor x input f32 4,5", lines)
        self.assertIn("tensor scale_weight parameter f32 5", lines)
        self.assertIn("tensor out output f32 4,5", lines)
        real = os.path.realpath(self.dir)
        self.assertIn("set 1 2 input x %s/set1/x.npy" % real, lines)
        self.assertIn("set 1 2 input scale_weight %s/params/scale_weight.npy" % real, lines)
        self.assertIn("set 0 1 expected out %s/set0/out.npy" % real, lines)
        self.assertIn("context_bytes 18", lines)
        # The expected outputs are the ones computed, bit for bit.
        _, shape, body = kb.read_npy(os.path.join(self.dir, "set1", "out.npy"))
        self.assertEqual(shape, (4, 5))
        self.assertEqual(body, sets[1][2]["out"])
        task = json.loads(slurp(path))
        self.assertIn("scale_weight f32[5] <- scale.weight", task["description"])
        prov = json.loads(slurp(os.path.join(self.dir, "kb2bundle.json")))
        self.assertEqual(prov["sources"]["scale_weight"], "scale.weight")
        self.assertEqual(task["trials"], 2)

    def test_kclaw_refuses_a_mismatched_file(self):
        self.make()
        kb.write_npy(os.path.join(self.dir, "set0", "x.npy"), "<f4", [5, 4],
                     f32_bytes([0.0] * 20))
        rc, _, err = load_with_kclaw(self.dir)
        self.assertEqual(rc, 1)
        self.assertIn("set0/x.npy' has shape [5, 4] but the tensor's shape is [4, 5]", err)

    def test_refusals_before_writing(self):
        t = [kb.Tensor("x", "input", "f32", [2])]
        with self.assertRaisesRegex(kb.BridgeError, "returned no tensor"):
            kb.write_bundle(self.dir, "t", "", None, t, {}, [(1, {"x": b"\0" * 8}, {})],
                            {"atol": 0, "rtol": 0, "max_rel_norm": 0}, 1.0)
        with self.assertRaisesRegex(kb.BridgeError, "dtype c64 is not one of"):
            kb.Tensor("z", "input", "c64", [2])
        t.append(kb.Tensor("y", "output", "f32", [2]))
        with self.assertRaisesRegex(kb.BridgeError, "baseline_ms must be"):
            kb.write_bundle(self.dir, "t", "", None, t, {},
                            [(1, {"x": b"\0" * 8}, {"y": b"\0" * 8})],
                            {"atol": 0, "rtol": 0, "max_rel_norm": 0}, 0)


@unittest.skipIf(torch is None, "PyTorch is not installed here: the end-to-end "
                 "conversion runs where it is (the GPU machine), e.g. "
                 "python3 tests/tasks/kb2bundle_test.py -v")
class EndToEnd(unittest.TestCase):
    """Converts each problem of tools/kernelbench/problems/ and checks the
    bundle against a fresh evaluation of the model."""

    device = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kb2bundle_e2e_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def convert(self, name, seeds=2):
        out = os.path.join(self.dir, name)
        path = kb.convert(os.path.join(SRC, "tools", "kernelbench", "problems", name + ".py"),
                          out, seeds=seeds, device=self.device,
                          compile_=self.device == "cuda", warmup=2, iters=10,
                          log=lambda m: print("  %s: %s" % (name, m)))
        rc, stdout, err = load_with_kclaw(out)
        self.assertEqual(rc, 0, err)
        return out, json.loads(slurp(path)), stdout.splitlines()

    def tensor(self, path, dtype=None):
        descr, shape, body = kb.read_npy(path)
        dt = {"<f4": torch.float32, "<i8": torch.int64}[descr]
        return torch.frombuffer(bytearray(body), dtype=dt).reshape(shape)

    def recompute(self, out, task, mod):
        """Evaluates the problem's model on the stored inputs and parameters."""
        torch.manual_seed(1)
        model = mod.Model(*mod.get_init_inputs()).eval()
        sources = json.loads(slurp(os.path.join(out, "kb2bundle.json")))["sources"]
        by_key = {src: name for name, src in sources.items()}
        state = {key: self.tensor(os.path.join(out, "params", by_key[key] + ".npy"))
                 for key in model.state_dict()}
        model.load_state_dict(state)
        for s in task["reference"]["sets"]:
            ins = [self.tensor(os.path.join(out, s["inputs"][t["name"]]))
                   for t in task["tensors"] if t["kind"] == "input"]
            with torch.no_grad():
                got = model(*ins)
            got = list(got) if isinstance(got, tuple) else [got]
            exp = [self.tensor(os.path.join(out, s["expected"][t["name"]]))
                   for t in task["tensors"] if t["kind"] == "output"]
            self.assertEqual(len(got), len(exp))
            for g, e in zip(got, exp):
                torch.testing.assert_close(g.reshape(e.shape), e, atol=1e-4, rtol=1e-4)

    def test_problems(self):
        for name in ("1_relu", "2_linear_gelu", "3_residual_layernorm", "4_sum_to_scalar"):
            with self.subTest(problem=name):
                out, task, lines = self.convert(name)
                mod = kb._load_problem(os.path.join(SRC, "tools", "kernelbench",
                                                    "problems", name + ".py"))
                self.recompute(out, task, mod)
                self.assertGreater(task["reference"]["baseline_ms"], 0)
                self.assertEqual(len(task["reference"]["sets"]), 2)
                self.assertEqual(slurp(os.path.join(out, "context.py")),
                                 slurp(os.path.join(SRC, "tools", "kernelbench", "problems",
                                                   name + ".py")))
                if name == "2_linear_gelu":
                    self.assertIn("tensor linear_weight parameter f32 128,256", lines)
                    self.assertIn("tensor linear_bias parameter f32 128", lines)
                if name == "3_residual_layernorm":
                    self.assertIn("tensor x input f32 16,96", lines)
                    self.assertIn("tensor residual input f32 16,96", lines)
                    self.assertIn("tensor block_0_weight parameter f32 96", lines)
                    self.assertIn("tensor out0 output f32 16,96", lines)
                    self.assertIn("tensor out1 output f32 16,96", lines)
                if name == "4_sum_to_scalar":
                    self.assertIn("tensor out output f32 1", lines)
                print("  %s on %s: eager %.4f ms, torch.compile %s ms" % (
                    name, self.device, task["reference"]["baseline_ms"],
                    task["reference"].get("torch_compile_ms", "n/a")))


if __name__ == "__main__":
    unittest.main()
