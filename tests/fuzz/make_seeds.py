"""Seeds of the libFuzzer targets that read torch.save's bytes, from the committed fixtures
(tests/fixtures/*.pt), written into tests/fuzz/corpus/<target>/ under their SHA-1, as libFuzzer
names its own finds. An input's first byte is the form (tests/fuzz/fuzz_input.h): even, a whole
file; odd, a bare pickle (the file's data.pkl, or Python's pickles of every protocol, 0-5).
fuzz_c_load_state_dict reads its second bit too: set, the optimizer's reader.

fuzz_torch_save and fuzz_scaler_archive read a container instead (tests/fuzz/torch_save_input.h:
a header, data.pkl, then named records), which the target writes as a valid archive. Their seeds
are the fixtures' archives taken apart, and handmade pickles of the shapes torch.save writes:
tensors sharing a storage, v1/v3 tensors and parameters, a big-endian file, nesting at the depth
limit, shared and cyclic references. fuzz_scaler_archive's seed scaler_torch_save (torch::save of
a GradScaler) needs LibTorch, so the target writes it: MIXPREC_FUZZ_WRITE_START=<corpus folder>
build-fuzz/tests/fuzz/fuzz_scaler_archive -runs=0 <corpus folder>.

    python3 tests/fuzz/make_seeds.py     # from the repository root; idempotent
"""
import collections
import hashlib
import io
import os
import pickle
import pickletools
import struct
import sys
import types
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def data_pkl(path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        return z.read(name)


def fixture(name):
    path = os.path.join(FIXTURES, name)
    with open(path, "rb") as f:
        return f.read(), data_pkl(path)


def python_pickles():
    """Python's own pickles of the shapes a state dict has, every protocol."""
    values = [
        collections.OrderedDict([("weight", 1.5), ("bias", [1, 2, 3])]),
        {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
         "_growth_tracker": 0},
        {"state": {0: {"step": 3.0}}, "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999),
                                                       "params": [0, 1]}]},
        "x" * 300,
        b"\x00\x01" * 40,
    ]
    for protocol in range(0, 6):
        for value in values:
            yield pickle.dumps(value, protocol=protocol)


# ---- fuzz_torch_save and fuzz_scaler_archive: containers (tests/fuzz/torch_save_input.h) ----

def container(pickle_bytes, records, zip_change=0, zip_record=0, zip_arg=0):
    out = bytes([0, zip_change, zip_record]) + struct.pack("<I", zip_arg)
    out += struct.pack("<I", len(pickle_bytes)) + pickle_bytes
    for name, data in records:
        out += bytes([len(name)]) + name.encode() + struct.pack("<I", len(data)) + data
    return out


def archive_parts(path, keep=lambda name: True):
    """A fixture's data.pkl and its other records (names within its folder)."""
    with zipfile.ZipFile(path) as z:
        parts = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    pkl = parts.pop("data.pkl")
    return pkl, [(n, d) for n, d in sorted(parts.items()) if keep(n)]


def from_torchscript(pkl):
    """torch::save(optimizer)'s data.pkl as torch.save would write its dicts: each __torch__
    object (GLOBAL, EMPTY_TUPLE, NEWOBJ, EMPTY_DICT, items, BUILD) becomes OrderedDict() with
    the items set on it; the memo's numbering is kept."""
    out, pending = b"", []
    ops = list(pickletools.genops(pkl))
    starts = [pos for _, _, pos in ops] + [len(pkl)]
    for i, (op, arg, pos) in enumerate(ops):
        raw = pkl[pos:starts[i + 1]]
        if op.name == "GLOBAL" and arg.startswith("__torch__"):
            raw = b"ccollections\nOrderedDict\n"
        elif op.name == "NEWOBJ":
            raw = b"R"
        elif op.name == "EMPTY_DICT" and i > 0 and ops[i - 1][0].name == "NEWOBJ":
            pending.append(True)
            raw = b""
        elif op.name == "BUILD" and pending:
            pending.pop()
            raw = b""
        out += raw
    return out


class _Storage:
    def __init__(self, cls, key, data, count):
        self.cls, self.key, self.data, self.count = cls, key, data, count


class _Call:
    """Pickles as a call of `func` (a stand-in global) on `args`."""
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.count)
        return None


def fake_torch():
    """Stand-ins for what torch.save names (torch._utils' rebuilds, storage classes, dtypes), so
    that Python's own pickler writes torch.save's opcodes without torch."""
    saved = {n: sys.modules.get(n) for n in ("torch", "torch._utils")}
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")
    sys.modules.update({"torch": torch, "torch._utils": utils})
    for name in ["_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                 "_rebuild_parameter"]:
        func = types.FunctionType((lambda: None).__code__, {}, name)
        func.__module__, func.__qualname__ = "torch._utils", name
        setattr(utils, name, func)
    for name in ["FloatStorage", "DoubleStorage", "LongStorage", "UntypedStorage"]:
        setattr(torch, name, type(name, (), {"__module__": "torch"}))
    dtype = type("dtype", (), {"__module__": "torch", "__reduce__": lambda self: self.name})
    for name in ["float16", "bfloat16", "float32", "int64", "int16", "bool", "complex64", "uint8"]:
        d = dtype()
        d.name = name
        setattr(torch, name, d)
    return torch, utils, saved


def handmade(torch, u):
    """(pickle, records) pairs of the shapes the reader must handle."""
    od = collections.OrderedDict

    def dumps(value):  # protocol 2, as torch.save
        out = io.BytesIO()
        _Pickler(out, protocol=2).dump(value)
        return out.getvalue()

    def floats(*values, order="<"):
        return struct.pack(order + "%df" % len(values), *values)

    hooks = od()
    # Tensors sharing a storage: a view at an offset, and one tensor stated twice (memo GET).
    s = _Storage(torch.FloatStorage, "0", floats(*range(12)), 12)
    t = _Call(u._rebuild_tensor_v2, s, 0, (3, 4), (4, 1), False, hooks)
    yield dumps(od([("a", t), ("view", _Call(u._rebuild_tensor_v2, s, 4, (2, 2), (4, 1), True,
                                             hooks)), ("again", t)])), [("data/0", s.data)]
    # v3 tensors of several dtypes on one untyped storage; v1 and a parameter.
    raw = _Storage(torch.UntypedStorage, "0", bytes(range(64)), 64)
    longs = _Storage(torch.LongStorage, "1", struct.pack("<3q", 1, -2, 3), 3)
    v3 = lambda dt, off, n: _Call(u._rebuild_tensor_v3, raw, off, (n,), (1,), False, hooks, dt)
    yield dumps({"h": v3(torch.float16, 0, 8), "bf": v3(torch.bfloat16, 4, 4),
                 "l": v3(torch.int64, 1, 7), "b": v3(torch.bool, 0, 64),
                 "c": v3(torch.complex64, 2, 3), "empty": v3(torch.float32, 16, 0),
                 "v1": _Call(u._rebuild_tensor, longs, 0, (3,), (1,)),
                 "p": _Call(u._rebuild_parameter, _Call(u._rebuild_tensor_v2, longs, 1, (2,), (1,),
                                                        False, hooks), False, hooks),
                 "scalar": _Call(u._rebuild_tensor_v2, longs, 2, (), (), False, hooks)}), \
        [("data/0", raw.data), ("data/1", longs.data)]
    # A big-endian file: torch.load swaps each storage by its element size.
    d = _Storage(torch.DoubleStorage, "0", struct.pack(">2d", 1.5, -2.0), 2)
    f = _Storage(torch.FloatStorage, "1", floats(1.0, 2.0, 3.0, order=">"), 3)
    yield dumps(od([("d", _Call(u._rebuild_tensor_v2, d, 0, (2,), (1,), False, hooks)),
                    ("f", _Call(u._rebuild_tensor_v2, f, 1, (2,), (1,), False, hooks))])), \
        [("byteorder", b"big"), ("data/0", d.data), ("data/1", f.data)]
    # Shared and cyclic references; int and str keys; an OrderedDict with attributes (BUILD).
    shared, cycle = [1, 2], []
    cycle.append(cycle)
    meta = od([("w", 1.0)])
    meta._metadata = {"": {"version": 1}}
    yield dumps({"state": {0: {"step": 3.0, "m": shared}, 1: {"m": shared}},
                 "param_groups": [{"lr": 0.01, "params": [0, 1]}], "meta": meta}), []
    yield dumps({"cycle": cycle}), []
    # Nesting at the depth limit (1000 containers) and one past it.
    for depth in (1000, 1001):
        yield b"\x80\x02N" + b"\x85" * depth + b".", []
    yield b"\x80\x02" + b"]" * 1000 + b"N" + b"a" * 1000 + b".", []


def torch_save_seeds():
    for name in ["python_checkpoint.pt", "torch_save_2_15.pt"]:
        yield container(*archive_parts(os.path.join(FIXTURES, name)))
    for name in ["python_default.pt", "cpp_default.pt"]:
        yield container(*archive_parts(os.path.join(FIXTURES, name)))
    pkl, records = archive_parts(os.path.join(FIXTURES, "python_default.pt"))
    yield container(pkl, records, zip_change=1, zip_arg=0x2a01)  # CRC 0, a byte changed
    pkl, records = archive_parts(os.path.join(FIXTURES, "optim_adam_libtorch26.pt"),
                                 lambda n: n.startswith("data/") or n == "version")
    yield container(from_torchscript(pkl), records)
    torch, utils, saved = fake_torch()
    try:
        for pkl, records in handmade(torch, utils):
            yield container(pkl, records + [("version", b"3\n")])
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def scaler_archive_seeds():
    """torch::save archives of LibTorch's own format (an optimizer's: its TorchScript code too)."""
    for name in ["optim_adam_libtorch26.pt", "optim_sgd_libtorch113.pt"]:
        yield container(*archive_parts(os.path.join(FIXTURES, name)))


def write(target, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def main():
    scalers = ["python_default.pt", "python_custom.pt", "cpp_default.pt", "cpp_backoff.pt",
               "python_disabled.pt"]
    optimizers = ["optim_adam_libtorch113.pt", "optim_adamw_libtorch113.pt",
                  "optim_sgd_libtorch113.pt", "optim_adam_libtorch26.pt"]
    for name in scalers + optimizers + ["python_checkpoint.pt"]:
        whole, pkl = fixture(name)
        write("fuzz_pickle_load", b"\x00" + whole)
        write("fuzz_pickle_load", b"\x01" + pkl)
    for pkl in python_pickles():
        write("fuzz_pickle_load", b"\x01" + pkl)
    whole, pkl = fixture("python_checkpoint.pt")
    write("fuzz_load_checkpoint", b"\x00" + whole)
    write("fuzz_load_checkpoint", b"\x01" + pkl)
    for name in scalers:
        whole, pkl = fixture(name)
        write("fuzz_c_load_state_dict", b"\x00" + whole)
        write("fuzz_c_load_state_dict", b"\x01" + pkl)
    for name in optimizers:
        whole, pkl = fixture(name)
        write("fuzz_c_load_state_dict", b"\x02" + whole)
        write("fuzz_c_load_state_dict", b"\x03" + pkl)
    for seed in torch_save_seeds():
        write("fuzz_torch_save", seed)
    for seed in scaler_archive_seeds():
        write("fuzz_scaler_archive", seed)
    # MXFP8 dequantize: rows, cols, format, then scale bytes and codes.
    for seed in [bytes([0, 31, 0]) + bytes(range(256)),
                 bytes([3, 99, 1]) + bytes([0xff, 0, 127, 254]) + bytes(range(255, -1, -1)),
                 bytes([7, 64, 0]) + bytes([1, 2]) * 300]:
        write("fuzz_dequantize_mxfp8", seed)


if __name__ == "__main__":
    main()
