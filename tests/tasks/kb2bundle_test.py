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


# Refusals of a loader that predates the torch reference kind (scalars,
# source_name): the test that loads such a bundle is skipped with the
# loader's message instead of failing, until common/bundle.c reads them.
OLD_LOADER = ("unknown kind 'torch'", "unknown field 'source_name'", "unknown kind 'scalar'",
              "unknown dtype 'bool'")


def load_or_skip(test, folder):
    """load_with_kclaw, skipping the test where kclaw's loader does not
    read the torch kind's fields yet. A loader that only lacks
    `source_name` loads the bundle without it (the rest is still checked)."""
    rc, out, err = load_with_kclaw(folder)
    if rc != 0 and "unknown field 'source_name'" in err:
        path = os.path.join(folder, "task.json")
        task = json.loads(slurp(path))
        for t in task["tensors"]:
            t.pop("source_name", None)
        with open(path, "w") as f:
            json.dump(task, f, indent=1)
        print("  (kclaw's loader does not read source_name yet: loading without it)",
              file=sys.stderr)
        rc, out, err = load_with_kclaw(folder)
    if rc != 0 and any(s in err for s in OLD_LOADER):
        test.skipTest("kclaw's loader (common/bundle.c) does not read this yet: %s" % err.strip())
    return rc, out, err


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

    def test_task_names_carry_the_level(self):
        # A problem in a folder named level<n> (KernelBench's layout) is
        # named L<n>_..., the prefix `kclaw report --by level` groups by.
        self.assertEqual(kb.task_name("/kb/level1/19_ReLU.py"), "L1_19_ReLU")
        self.assertEqual(kb.task_name("kb/level3/1_MLP.py"), "L3_1_MLP")
        self.assertEqual(kb.task_name("/kb/level12/x y.py"), "L12_x_y")
        self.assertEqual(kb.task_name("/kb/levels/19_ReLU.py"), "19_ReLU")
        self.assertEqual(kb.task_name("/kb/level1/sub/19_ReLU.py"), "19_ReLU")
        self.assertEqual(len(kb.task_name("/kb/level2/" + "a" * 200 + ".py")), 128)

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

    def test_task_json_names_the_parameters_sources(self):
        path, _ = self.make()
        task = json.loads(slurp(path))
        self.assertEqual(task["tensors"], [
            {"name": "x", "kind": "input", "dtype": "f32", "shape": [4, 5]},
            {"name": "scale_weight", "kind": "parameter", "dtype": "f32", "shape": [5],
             "source_name": "scale.weight"},
            {"name": "out", "kind": "output", "dtype": "f32", "shape": [4, 5]}])
        self.assertEqual(task["reference"]["kind"], "tensors")

    def test_kclaw_loads_what_the_bridge_writes(self):
        path, sets = self.make()
        rc, out, err = load_or_skip(self, self.dir)
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
        rc, _, err = load_or_skip(self, self.dir)
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
        with self.assertRaisesRegex(kb.BridgeError, "has no scalars"):
            kb.write_bundle(self.dir, "t", "", None, t + [kb.Tensor("s", "scalar", "f32", [1])],
                            {}, [(1, {"x": b"\0" * 8}, {"y": b"\0" * 8})],
                            {"atol": 0, "rtol": 0, "max_rel_norm": 0}, 1.0)


class Declare(unittest.TestCase):
    """What a torch bundle declares, from what the problem gave (the part
    of the conversion that needs no PyTorch)."""

    def test_inputs_scalars_parameters_outputs(self):
        ts = kb.declare_tensors(
            ["A", "s", "n"],
            [("tensor", "f32", [4, 8]), ("scalar", 3.14), ("scalar", 7)],
            [("linear.weight", "f32", [8, 8]), ("bn.num_batches_tracked", "i64", [])],
            [("f32", [4, 8])])
        self.assertEqual([(t.name, t.kind, t.dtype, t.shape) for t in ts], [
            ("A", "input", "f32", [4, 8]), ("s", "scalar", "f32", [1]),
            ("n", "scalar", "i64", [1]), ("linear_weight", "parameter", "f32", [8, 8]),
            ("bn_num_batches_tracked", "parameter", "i64", [1]), ("out", "output", "f32", [4, 8])])
        self.assertEqual(ts[1].value, 3.14)
        self.assertEqual(ts[3].source_name, "linear.weight")
        self.assertEqual(ts[1].json(), {"name": "s", "kind": "scalar", "dtype": "f32", "shape": [1],
                                        "value": 3.14})
        self.assertEqual(ts[2].json()["value"], 7)
        self.assertEqual(ts[3].json()["source_name"], "linear.weight")
        self.assertNotIn("source_name", ts[0].json())
        self.assertNotIn("source_name", ts[5].json())

    def test_scalar_dtypes(self):
        self.assertEqual(kb.scalar_dtype(2.5), "f32")
        self.assertEqual(kb.scalar_dtype(3), "i64")
        self.assertEqual(kb.scalar_dtype(True), "i64")
        if numpy is not None:
            self.assertEqual(kb.scalar_dtype(numpy.float32(1.5)), "f32")
            self.assertEqual(kb.scalar_dtype(numpy.int64(2)), "i64")
        for bad in ("x", None, [1], 1j):
            with self.assertRaisesRegex(kb.BridgeError, "tensors and numbers"):
                kb.scalar_dtype(bad)
        with self.assertRaisesRegex(kb.BridgeError, "scalar s: dtype f16"):
            kb.Tensor("s", "scalar", "f16", [1])
        with self.assertRaisesRegex(kb.BridgeError, "kind weird"):
            kb.Tensor("s", "weird", "f32", [1])

    def test_names_collide_and_fall_back(self):
        # forward(*args): x0, x1; an input called "out" pushes the output to out_2;
        # a tuple result gives out0, out1; C words are prefixed.
        ts = kb.declare_tensors(["out", "int"], [("tensor", "f16", [2]), ("tensor", "bf16", [2]),
                                                 ("tensor", "bool", [3])],
                                [], [("f32", [2]), ("i64", [])])
        self.assertEqual([t.name for t in ts], ["out", "t_int", "x2", "out0", "out1"])
        ts = kb.declare_tensors(["x"], [("tensor", "f32", [2])], [], [("f32", [])])
        self.assertEqual([(t.name, t.shape) for t in ts], [("x", [2]), ("out", [1])])
        ts = kb.declare_tensors(["out"], [("tensor", "f32", [2])], [], [("f32", [2])])
        self.assertEqual([t.name for t in ts], ["out", "out_2"])
        with self.assertRaisesRegex(kb.BridgeError, "returned no tensor"):
            kb.declare_tensors(["x"], [("tensor", "f32", [2])], [], [])

    def test_description_names_scalars(self):
        ts = kb.declare_tensors(["A", "s"], [("tensor", "f32", [4]), ("scalar", 3.14)], [],
                                [("f32", [4])])
        d = kb.describe("5_Matrix_scalar_multiplication.py", ts)
        self.assertIn("A f32[4], s f32 scalar = 3.14", d)
        self.assertIn("out f32[4]", d)


class TorchBundle(unittest.TestCase):
    """A torch-reference bundle as the bridge writes it."""

    SOURCE = ("import torch\n\nclass Model(torch.nn.Module):\n"
              "    def forward(self, A, s):\n        return A * s\n\n"
              "def get_inputs():\n    return [torch.rand(64, 32), 3.14]\n\n"
              "def get_init_inputs():\n    return []\n")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kb2bundle_torch_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def make(self, **kw):
        ts = kb.declare_tensors(["A", "s"], [("tensor", "f32", [64, 32]), ("scalar", 3.14)],
                                [("scale.weight", "f32", [32])], [("f32", [64, 32])])
        args = dict(tolerance={"atol": 1e-3, "rtol": 1e-3, "max_rel_norm": 1e-3}, init_seed=42,
                    trials=4, seed=7, provenance={"shapes_from": "meta"})
        args.update(kw)
        return kb.write_torch_bundle(self.dir, "5_Matrix_scalar", kb.describe("p.py", ts),
                                     self.SOURCE, ts, **args), ts

    def test_task_json(self):
        path, _ = self.make()
        self.assertEqual(path, os.path.join(self.dir, "task.json"))
        task = json.loads(slurp(path))
        self.assertEqual(task["reference"], {"kind": "torch", "source": "model.py", "init_seed": 42})
        self.assertEqual(task["context"], "model.py")
        self.assertEqual(task["trials"], 4)
        self.assertEqual(task["seed"], 7)
        self.assertEqual(task["tolerance"], {"atol": 1e-3, "rtol": 1e-3, "max_rel_norm": 1e-3})
        self.assertEqual(task["name"], "5_Matrix_scalar")
        self.assertEqual(task["tensors"], [
            {"name": "A", "kind": "input", "dtype": "f32", "shape": [64, 32]},
            {"name": "s", "kind": "scalar", "dtype": "f32", "shape": [1], "value": 3.14},
            {"name": "scale_weight", "kind": "parameter", "dtype": "f32", "shape": [32],
             "source_name": "scale.weight"},
            {"name": "out", "kind": "output", "dtype": "f32", "shape": [64, 32]}])
        self.assertNotIn("precision", task)
        self.assertEqual(slurp(os.path.join(self.dir, "model.py")), self.SOURCE)
        self.assertEqual(sorted(os.listdir(self.dir)), ["kb2bundle.json", "model.py", "task.json"])
        prov = json.loads(slurp(os.path.join(self.dir, "kb2bundle.json")))
        self.assertEqual(prov["sources"]["scale_weight"], "scale.weight")
        self.assertEqual(prov["scalars"], {"s": 3.14})
        self.assertEqual(prov["provenance"], {"shapes_from": "meta"})

    def test_defaults(self):
        path, _ = self.make(tolerance=None, init_seed=1, trials=3, seed=1, provenance=None)
        task = json.loads(slurp(path))
        self.assertEqual(task["tolerance"], kb.DEFAULT_TOLERANCE)
        self.assertEqual(task["budget"], {"rounds": 15})
        self.assertEqual(task["reference"]["init_seed"], 1)

    def test_refusals(self):
        out = [kb.Tensor("y", "output", "f32", [2])]
        with self.assertRaisesRegex(kb.BridgeError, "returned no tensor"):
            kb.write_torch_bundle(self.dir, "t", "", self.SOURCE, [kb.Tensor("x", "input", "f32", [2])])
        with self.assertRaisesRegex(kb.BridgeError, "source is empty"):
            kb.write_torch_bundle(self.dir, "t", "", "  \n", out)
        with self.assertRaisesRegex(kb.BridgeError, "trials must be"):
            kb.write_torch_bundle(self.dir, "t", "", self.SOURCE, out, trials=0)
        with self.assertRaisesRegex(kb.BridgeError, "used twice"):
            kb.write_torch_bundle(self.dir, "t", "", self.SOURCE, out + out)
        self.assertEqual(os.listdir(self.dir), [])

    def test_kclaw_loads_it(self):
        self.make()
        rc, out, err = load_or_skip(self, self.dir)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertIn("name 5_Matrix_scalar", lines)
        # (bundle_check prints the reference kind as cuda or tensors only)
        self.assertIn("tensor A input f32 64,32", lines)
        self.assertIn("tensor s scalar f32 1", lines)
        self.assertIn("tensor scale_weight parameter f32 32", lines)
        self.assertIn("tensor out output f32 64,32", lines)


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


@unittest.skipIf(torch is None, "PyTorch is not installed here: the torch-bundle conversion "
                 "(meta device, no GPU) runs where it is")
class TorchEndToEnd(unittest.TestCase):
    """Converts the problems of tools/kernelbench/problems/ into torch
    bundles: shapes from the meta device, no GPU."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kb2bundle_torch_e2e_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_problems(self):
        want = {
            "1_relu": None,
            "2_linear_gelu": [("linear_weight", "parameter", "f32", [128, 256], "linear.weight"),
                              ("linear_bias", "parameter", "f32", [128], "linear.bias")],
            "3_residual_layernorm": [("x", "input", "f32", [16, 96], None),
                                     ("residual", "input", "f32", [16, 96], None),
                                     ("block_0_weight", "parameter", "f32", [96], "block.0.weight"),
                                     ("out0", "output", "f32", [16, 96], None),
                                     ("out1", "output", "f32", [16, 96], None)],
            "4_sum_to_scalar": [("out", "output", "f32", [1], None)],
        }
        for name, expect in want.items():
            with self.subTest(problem=name):
                src = os.path.join(SRC, "tools", "kernelbench", "problems", name + ".py")
                out = os.path.join(self.dir, name)
                path = kb.convert_torch(src, out, log=lambda m: print("  %s: %s" % (name, m)))
                task = json.loads(slurp(path))
                self.assertEqual(task["reference"]["kind"], "torch")
                self.assertEqual(slurp(os.path.join(out, "model.py")), slurp(src))
                prov = json.loads(slurp(os.path.join(out, "kb2bundle.json")))
                self.assertEqual(prov["provenance"]["shapes_from"], "meta")
                got = {t["name"]: t for t in task["tensors"]}
                for tname, kind, dt, shape, source in expect or []:
                    self.assertEqual(got[tname]["kind"], kind)
                    self.assertEqual(got[tname]["dtype"], dt)
                    self.assertEqual(got[tname]["shape"], shape)
                    self.assertEqual(got[tname].get("source_name"), source)

    def test_scalar_input(self):
        src = os.path.join(self.dir, "5_scalar.py")
        with open(src, "w") as f:
            f.write(TorchBundle.SOURCE)
        path = kb.convert_torch(src, os.path.join(self.dir, "b"), log=print)
        task = json.loads(slurp(path))
        self.assertEqual([(t["name"], t["kind"], t["dtype"]) for t in task["tensors"]],
                         [("A", "input", "f32"), ("s", "scalar", "f32"), ("out", "output", "f32")])


class Batch(unittest.TestCase):
    """kb2bundle --batch, the converter of `kclaw kernelbench`: its first
    line says whether it can work, in JSON, before it reads a request."""

    def run_batch(self, stdin):
        return subprocess.run([sys.executable, os.path.join(SRC, "tools", "kernelbench",
                                                            "kb2bundle.py"), "--batch"],
                              input=stdin, capture_output=True, text=True, timeout=120)

    @unittest.skipIf(torch is not None, "PyTorch is installed here")
    def test_without_pytorch_it_refuses_first(self):
        p = self.run_batch('{"problem": "x.py", "out": "/nonexistent"}\n')
        self.assertEqual(p.returncode, 3, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 1, p.stdout)
        first = json.loads(lines[0])
        self.assertIs(first["ready"], False)
        self.assertIn("PyTorch is not installed for %s" % sys.executable, first["error"])
        self.assertIn("KCLAW_PYTHON", first["error"])

    @unittest.skipIf(torch is None, "PyTorch is not installed here")
    def test_with_pytorch_one_answer_per_request(self):
        with tempfile.TemporaryDirectory() as d:
            prob = os.path.join(d, "level1", "1_Relu.py")
            os.makedirs(os.path.dirname(prob))
            with open(prob, "w") as f:
                f.write("import torch\nclass Model(torch.nn.Module):\n"
                        "    def forward(self, x):\n        return torch.relu(x)\n"
                        "def get_inputs():\n    return [torch.randn(64)]\n"
                        "def get_init_inputs():\n    return []\n")
            reqs = "".join(json.dumps({"problem": p, "out": os.path.join(d, "b%d" % i)}) + "\n"
                           for i, p in enumerate([prob, os.path.join(d, "missing.py")]))
            out = [json.loads(l) for l in self.run_batch(reqs).stdout.splitlines()]
            self.assertIs(out[0]["ready"], True)
            self.assertIs(out[1]["ok"], True)
            self.assertTrue(os.path.exists(out[1]["task_json"]))
            self.assertIs(out[2]["ok"], False)
            self.assertEqual(len(out), 3)


if __name__ == "__main__":
    unittest.main()
