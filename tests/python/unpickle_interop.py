#!/usr/bin/env python3
"""mixprec's reader of torch.save files (src/torch/checkpoint/unpickle.h) against torch.load.

Why: mixprec parses untrusted files with its own restricted unpickler and zip reader. Every file
Python's torch.save writes for state dicts and checkpoints must still load, with the values,
dtypes, shapes, strides, storage offsets and storage sharing torch.load gives. So this script
saves such objects with the installed torch (model, optimizer and GradScaler state dicts, a whole
AMP checkpoint, parameters with requires_grad, views sharing one storage, every dense dtype this
torch has, nested containers of every scalar kind; pickle protocols 2 to 5; a big-endian file; a
file written without CRCs), and the files mixprec's own writers write (save_checkpoint, the C
ABI's saves), loads each with torch.load and with mixprec::pickle_load
(checkpoint_interop.cpp's dump mode), and compares the two as text (value_dump.py, tests/value_dump.h). Protocol 2
files are compared with torch.load(weights_only=True), PyTorch's own restricted unpickler; it
reads no other protocol, so those are compared with weights_only=False. Files mixprec refuses on
purpose (sparse, quantized and subclassed tensors, sets, the legacy non-zip format) must be
refused, with the reason named.

--write-fixture DIR writes tests/fixtures/torch_save_<version>.pt and its .dump (torch.load's
text) for CheckpointTest.TorchSaveFixturesLoadAsTorchLoadLoadsThem, which holds every LibTorch
to them without Python (dtypes LibTorch 1.13 has only).

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (the rules of differential_cpu.py).
"""
import argparse
import collections
import io
import os
import subprocess
import sys
import tempfile
import zipfile

from differential_cpu import torch  # torch, with its skip rules
from value_dump import ValueDump

HAS_CRC_OPTION = hasattr(torch.serialization, "set_crc32_options")


def trained(seed):
    """A model, SGD, Adam and AdamW after two steps, and a GradScaler("cpu") after them."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                                torch.nn.Linear(4, 2))
    opts = {"sgd": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            "adam": torch.optim.Adam(model.parameters(), lr=0.01),
            "adamw": torch.optim.AdamW(model.parameters(), lr=0.01, amsgrad=True)}
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    for _ in range(2):
        for opt in opts.values():
            opt.zero_grad()
            loss = model(torch.randn(5, 3)).square().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return model, opts, scaler


def dtype_tensors(legacy_only):
    """A small tensor of every dense dtype (legacy_only: those LibTorch 1.13 has)."""
    names = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
             "uint8", "bool", "complex64", "complex128"]
    if not legacy_only:
        names += ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16",
                  "uint32", "uint64"]
    out = {}
    for name in names:
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        try:
            out[name] = (torch.arange(-3, 3).to(torch.float32) * 1.25).to(dtype)
        except (RuntimeError, TypeError):  # a dtype without this cast in this torch
            out[name] = torch.zeros(6, dtype=torch.uint8).view(dtype)
    return out


def objects(legacy_only=False):
    model, opts, scaler = trained(0)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "checkpoint": {"model": model.state_dict(), "optimizer": opts["adam"].state_dict(),
                       "scaler": scaler.state_dict()},
        "optimizers": {name: opt.state_dict() for name, opt in opts.items()},
        "parameters": model.state_dict(keep_vars=True),
        "shared": {"base": base, "row": base[1], "col": base[:, 2], "t": base.t(), "same": base,
                   "expanded": torch.ones(3).expand(2, 3), "empty": torch.empty(0, 3),
                   "scalar": torch.tensor(3.5, dtype=torch.float64)},
        "dtypes": dtype_tensors(legacy_only),
        "values": {"none": None, "bools": [True, False], "ints": [0, -1, 255, 256, 2**31, -2**63,
                   2**63 - 1], "floats": (1.5, float("inf"), float("-inf"), float("nan"), -0.0),
                   "str": "h\u00e9llo \u2713", "nested": {1: [2, (3, {"x": []})], -5: "y"},
                   "empty": ((), [], {}, collections.OrderedDict())},
    }


def refused_objects():
    """What mixprec refuses on purpose, and the words that must say why."""
    out = {
        "sparse": ({"s": torch.eye(3).to_sparse()}, "it rebuilds a sparse tensor"),
        "quantized": ({"q": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)},
                      "it rebuilds a quantized tensor"),
        "set": ({"s": {1, 2}}, "set\" is refused"),  # protocol 2 names it __builtin__.set
    }
    t = torch.ones(2)
    t.note = "attribute"
    out["attribute"] = ({"t": t}, "a tensor subclass or a tensor with Python attributes")
    return out


def save(path, obj, **kwargs):
    torch.save(obj, path, **kwargs)
    return path


def big_endian(src, dst):
    """src (float32 storages only) rewritten as a big-endian machine's torch.save writes it."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as out:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in info.filename:
                data = b"".join(data[i:i + 4][::-1] for i in range(0, len(data), 4))
            out.writestr(info.filename, data)
    return dst


def python_dump(path, weights_only):
    try:
        return ValueDump(torch)(torch.load(path, weights_only=weights_only))
    except Exception as e:  # noqa: BLE001 -- reported, not hidden
        return "PYTHON ERROR %s: %s" % (type(e).__name__, str(e).splitlines()[0])


def mixprec_dumps(exe, paths):
    run = subprocess.run([exe, "dump"] + paths, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        print(run.stdout + run.stderr)
        sys.exit(1)
    return dict(line.split("\t", 1) for line in run.stdout.splitlines())


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return "at character %d:\n    torch.load: ...%s\n    mixprec:    ...%s" % (
        i, a[max(0, i - 60):i + 60], b[max(0, i - 60):i + 60])


def write_fixture(folder):
    version = torch.__version__.split("+")[0].rsplit(".", 1)[0].replace(".", "_")
    path = os.path.join(folder, "torch_save_%s.pt" % version)
    objs = objects(legacy_only=True)
    save(path, objs)
    with open(path[:-3] + ".dump", "w", encoding="utf-8") as f:
        f.write(python_dump(path, True) + "\n")
    print("wrote", path, "and its .dump (torch.load of torch %s)" % torch.__version__)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe")
    parser.add_argument("--dir")
    parser.add_argument("--write-fixture", metavar="DIR")
    args = parser.parse_args()
    if args.write_fixture:
        write_fixture(args.write_fixture)
        return 0
    os.makedirs(args.dir, exist_ok=True)
    folder = tempfile.mkdtemp(dir=args.dir)
    files = {}  # path -> weights_only for the reference load
    for name, obj in objects().items():
        for protocol in (2, 3, 4, 5):
            path = os.path.join(folder, "%s_p%d.pt" % (name, protocol))
            files[save(path, obj, pickle_protocol=protocol)] = protocol == 2
    be_src = save(os.path.join(folder, "be_src.pt"), objects()["shared"])
    files[big_endian(be_src, os.path.join(folder, "big_endian.pt"))] = True
    crc_zero = None
    if HAS_CRC_OPTION:
        torch.serialization.set_crc32_options(False)
        try:
            crc_zero = save(os.path.join(folder, "no_crc.pt"), objects()["checkpoint"])
        finally:
            torch.serialization.set_crc32_options(True)
        files[crc_zero] = True
        with zipfile.ZipFile(crc_zero) as z:
            crcs = {i.CRC for i in z.infolist() if "/data/" in i.filename}
        print("set_crc32_options(False): the records' CRC fields are", crcs)
    # What mixprec's own writers write (save_checkpoint, pickle_save_untagged to a path, the C
    # ABI's path and stream saves).
    written = os.path.join(folder, "written")
    os.makedirs(written)
    subprocess.run([args.exe, "write", written], check=True)
    for name in sorted(os.listdir(written)):
        files[os.path.join(written, name)] = True
    refused = {}
    for name, (obj, words) in refused_objects().items():
        refused[save(os.path.join(folder, "refused_%s.pt" % name), obj)] = words
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer, _use_new_zipfile_serialization=False)
    legacy = os.path.join(folder, "refused_legacy.pt")
    with open(legacy, "wb") as f:
        f.write(buffer.getvalue())
    refused[legacy] = "is not a zip archive as torch.save writes"

    got = mixprec_dumps(args.exe, list(files) + list(refused))
    failures = 0
    for path, weights_only in files.items():
        want = python_dump(path, weights_only)
        if want.startswith("PYTHON ERROR"):
            print("FAIL %s: torch.load itself fails: %s" % (os.path.basename(path), want))
            failures += 1
        elif got[path] != want:
            print("FAIL %s (torch.load weights_only=%s): %s" % (
                os.path.basename(path), weights_only, first_difference(want, got[path])))
            failures += 1
        else:
            print("ok   %s: the same as torch.load(weights_only=%s), %d characters" % (
                os.path.basename(path), weights_only, len(want)))
    for path, words in refused.items():
        if not got[path].startswith("ERROR") or words not in got[path]:
            print("FAIL %s: expected a refusal saying \"%s\", got: %s" % (
                os.path.basename(path), words, got[path][:300]))
            failures += 1
        else:
            print("ok   %s: refused: %s" % (os.path.basename(path), got[path][6:200]))
    print("%s: %d files compared with torch %s, %d refused as they must be, %d failures" % (
        "FAIL" if failures else "PASS", len(files), torch.__version__, len(refused), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
