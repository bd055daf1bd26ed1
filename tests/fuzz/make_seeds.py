"""Seeds of the libFuzzer targets that read torch.save's bytes, from the committed fixtures
(tests/fixtures/*.pt), written into tests/fuzz/corpus/<target>/ under their SHA-1, as libFuzzer
names its own finds. An input's first byte is the form (tests/fuzz/fuzz_input.h): even, a whole
file; odd, a bare pickle (the file's data.pkl, or Python's pickles of every protocol, 0-5).
fuzz_c_load_state_dict reads its second bit too: set, the optimizer's reader.

    python3 tests/fuzz/make_seeds.py     # from the repository root; idempotent
"""
import collections
import hashlib
import os
import pickle
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
    # MXFP8 dequantize: rows, cols, format, then scale bytes and codes.
    for seed in [bytes([0, 31, 0]) + bytes(range(256)),
                 bytes([3, 99, 1]) + bytes([0xff, 0, 127, 254]) + bytes(range(255, -1, -1)),
                 bytes([7, 64, 0]) + bytes([1, 2]) * 300]:
        write("fuzz_dequantize_mxfp8", seed)


if __name__ == "__main__":
    main()
