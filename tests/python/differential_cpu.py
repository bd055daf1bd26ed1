#!/usr/bin/env python3
"""Differential test: mixprec (C++) against PyTorch itself (torch >= 2.4) on the CPU, in fp32.

Why: the C++ test suites compare mixprec with rules transcribed from PyTorch; this compares it
with the real torch.amp.GradScaler("cpu") and torch.optim, and exchanges checkpoints both ways.

--mode train: writes a small Linear -> ReLU -> Linear model's initial weights and data (raw
float32 files + meta.txt, read by differential_cpu.cpp), then for each scenario (two optimizers
stepped by one scaler: OPT1 on the first layer, OPT2 on the second) trains it
  1. here with torch.amp.GradScaler("cpu"), saving torch.save(scaler.state_dict()) after step MID;
  2. in C++ (mixprec_python_differential train), which after step MID swaps its scaler for a
     default-constructed mixprec::GradScaler loaded (torch::pickle_load) from Python's file;
  3. here again, swapping at MID to a fresh torch.amp.GradScaler("cpu") loaded from the file C++
     wrote with torch::pickle_save (TorchScript type tags: read with their global allowlisted);
     mixprec::pickle_save_untagged's files must load with plain torch.load (weights_only);
with gradient accumulation (ACCUM backward passes per step), an inf in the input on INF_STEPS
(both optimizers overflow), an inf put into the second layer's bias grad on GRAD_INF_STEPS (only
OPT2 overflows: OPT1 steps, OPT2 skips), and unscale_ + clip_grad_norm_ every CLIP_EVERY steps.
Required, after every update(): identical scale, growth tracker, found_inf per optimizer and skip
decision (parameters bit-for-bit unchanged by step()), exactly; the clip total norm within
NORM_RTOL; final parameters within RTOL/ATOL; runs 1 and 3 identical bit for bit; C++'s
state_dict files equal Python's state_dict() (keys in order, values, Python types).
--mode train also checks the optimizers (C++ / Python, same hyper-parameters):
  sgd: torch::optim::SGD(0.05, momentum 0.9)  / torch.optim.SGD(foreach=False)
  adam: torch::optim::Adam(1e-2)              / torch.optim.Adam(foreach=False)
  fadamw: mixprec::optim::AdamW(1e-2, wd 0.01, fused) / torch.optim.AdamW(fused=True)
--mode archive: runs the C++ optimizer-archive round trip (mixprec::optim::AdamW saved with
torch::save, loaded into mixprec::optim::AdamW and torch::optim::AdamW), then records what
Python can do with that archive (torch.load refuses it; its pickled module tree reads without
torch.jit.load, which PyTorch 2.10 deprecated) and compares that state with
torch.optim.AdamW(fused=True) run on the same history.

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (no torch module at all, or torch < 2.4).
A torch that is installed but fails to import is a failure (exit 2), never a skip: where the test
suite installs python3-torch, a skip would let the stage pass with no comparison made (and
scripts/lib/check_skips.py fails a Debian 13 stage on any skip of these tests anyway).
"""
import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import traceback

SKIP = 77
try:
    import torch
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    print(f"SKIP: python3 has no torch module ({e})")
    sys.exit(SKIP)
except Exception:  # installed, but broken
    traceback.print_exc()
    print("ERROR: python3 has a torch module that fails to import (above); not a skip")
    sys.exit(2)
_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
if _VERSION < (2, 4):
    print(f"SKIP: torch {torch.__version__} < 2.4 (needs torch.amp.GradScaler('cpu') and fused "
          "CPU AdamW)")
    sys.exit(SKIP)

IN_DIM, HIDDEN, OUT_DIM, BATCH, ACCUM, STEPS = 16, 32, 4, 8, 3, 30
INIT_SCALE, GROWTH_INTERVAL, MAX_NORM, MID = 1024.0, 3, 0.5, 14
INF_STEPS = [4, 11, 12, 23]
GRAD_INF_STEPS = [7, 19, 26]
SCENARIOS = {"a": ("sgd", "adam", 1), "b": ("fadamw", "adam", 2), "c": ("sgd", "fadamw", 3)}
# Final-parameter tolerance |cpp - py| <= ATOL + RTOL*|py| after 30 steps (lr 0.05 / 1e-2): the
# forward/backward and the unscale are the same LibTorch 2.6 kernels on both sides (one thread),
# but the optimizers are separate implementations (LibTorch's C++ torch::optim vs Python's
# torch.optim, mixprec's fused AdamW vs ATen's fused CPU AdamW) that may round in a different
# order: a few float32 ulps per step, carried on by the next steps. 1e-5 relative is ~100 ulps.
RTOL, ATOL = 1e-5, 1e-6
NORM_RTOL = 1e-5  # clip_grad_norm_'s total norm: C++ and Python reduce the norms separately


def raw(t):
    return t.detach().contiguous().to(torch.float32).numpy().tobytes() if _has_numpy() else \
        bytes(t.detach().contiguous().to(torch.float32).view(torch.uint8).reshape(-1).tolist())


def _has_numpy():
    try:
        import numpy  # noqa: F401
        return True
    except ImportError:
        return False


def read_floats(path, numel):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 4 * numel:
        raise RuntimeError(f"{path}: {len(data)} bytes, expected {4 * numel}")
    return torch.frombuffer(bytearray(data), dtype=torch.float32).clone()


def write_inputs(folder):
    gen = torch.Generator().manual_seed(2024)
    init = [torch.randn(HIDDEN, IN_DIM, generator=gen) / IN_DIM ** 0.5,
            torch.randn(HIDDEN, generator=gen) * 0.1,
            torch.randn(OUT_DIM, HIDDEN, generator=gen) / HIDDEN ** 0.5,
            torch.randn(OUT_DIM, generator=gen) * 0.1]
    x = torch.randn(STEPS, ACCUM, BATCH, IN_DIM, generator=gen)
    y = torch.randn(STEPS, ACCUM, BATCH, OUT_DIM, generator=gen)
    meta = (f"in_dim {IN_DIM}\nhidden {HIDDEN}\nout_dim {OUT_DIM}\nbatch {BATCH}\n"
            f"accum {ACCUM}\nsteps {STEPS}\ninit_scale {INIT_SCALE!r}\n"
            f"growth_interval {GROWTH_INTERVAL}\nmax_norm {MAX_NORM!r}\nmid {MID}\n"
            "inf_steps " + " ".join(map(str, INF_STEPS)) + "\n"
            "grad_inf_steps " + " ".join(map(str, GRAD_INF_STEPS)) + "\n"
            "scenarios " + " ".join(SCENARIOS) + "\n")
    for name, (o1, o2, clip) in SCENARIOS.items():
        meta += f"scenario_{name} {o1} {o2} {clip}\n"
    write_exchange(folder, init, x, y, meta, "tests/python/differential_cpu.py")
    return init, x, y


def write_exchange(folder, init, x, y, meta, writer):
    """The files a C++ side reads (tests/differential_io.h): params_init.bin, x.bin and y.bin as
    raw float32, and meta.txt."""
    for name, tensors in (("params_init.bin", init), ("x.bin", [x]), ("y.bin", [y])):
        with open(os.path.join(folder, name), "wb") as f:
            for t in tensors:
                f.write(raw(t))
    with open(os.path.join(folder, "meta.txt"), "w") as f:
        f.write(f"# written by {writer}\n" + meta)


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-2, foreach=False)
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, fused=True)


def make_model(init):
    l1, l2 = torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.Linear(HIDDEN, OUT_DIM)
    with torch.no_grad():
        for p, v in zip([l1.weight, l1.bias, l2.weight, l2.bias], init):
            p.copy_(v)
    return l1, l2


def train_python(name, init, x, y, folder, resume_from):
    """One scenario; returns (trace rows, final params). resume_from: None (save own mid
    checkpoint) or the path of C++'s mid checkpoint to swap in after step MID."""
    o1, o2, clip_every = SCENARIOS[name]
    l1, l2 = make_model(init)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt1, opt2 = make_optimizer(o1, [l1.weight, l1.bias]), make_optimizer(o2, [l2.weight, l2.bias])
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)
    trace = []
    for step in range(STEPS):
        opt1.zero_grad()
        opt2.zero_grad()
        for j in range(ACCUM):
            xs = x[step, j].clone()
            if step in INF_STEPS and j == step % ACCUM:
                xs[0, 0] = float("inf")
            loss = torch.nn.functional.mse_loss(l2(torch.relu(l1(xs))), y[step, j]) / ACCUM
            scaler.scale(loss).backward()
        if step in GRAD_INF_STEPS:
            with torch.no_grad():
                l2.bias.grad[0] = float("inf")
        norm = -1.0
        if clip_every and step % clip_every == 0:
            scaler.unscale_(opt1)
            scaler.unscale_(opt2)
            norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM))
        before = [p.detach().clone() for p in params]
        scaler.step(opt1)
        scaler.step(opt2)
        found = [sum(v.item() for v in scaler._found_inf_per_device(o).values())
                 for o in (opt1, opt2)]
        same = [all(torch.equal(a, b) for a, b in zip(before[i:i + 2], params[i:i + 2]))
                for i in (0, 2)]
        scaler.update()
        trace.append((scaler.get_scale(), scaler._get_growth_tracker(), found[0], found[1],
                      int(same[0]), int(same[1]), norm))
        if step == MID:
            if resume_from is None:
                torch.save(scaler.state_dict(), os.path.join(folder, f"py_{name}_sd_mid.pt"))
            else:
                scaler = torch.amp.GradScaler("cpu")  # default options on purpose
                scaler.load_state_dict(load_cpp(resume_from)[0])
    return trace, [p.detach().clone() for p in params], scaler.state_dict()


def read_trace(path):
    rows = []
    with open(path) as f:
        for line in f:
            s, g, f1, f2, u1, u2, n = line.split()
            rows.append((float(s), int(g), float(f1), float(f2), int(u1), int(u2), float(n)))
    return rows


def load_cpp(path):
    """(dict, None) from plain torch.load (weights_only is True by default from torch 2.6), else
    (dict, why plain torch.load failed) through the allowlisted TorchScript type-tag global, so
    that the other checks still run when plain loading fails."""
    try:
        return torch.load(path), None
    except Exception as e:
        text = " ".join(str(e).split())
        why = f"{type(e).__name__}: ..." + text[text.find("WeightsUnpickler error"):][:130]
    restore_type_tag = importlib.import_module("torch.jit._pickle").restore_type_tag
    with torch.serialization.safe_globals([restore_type_tag]):
        return torch.load(path, weights_only=True), why


def check_state_dict(label, path, expected, plain_load):
    """A C++ state_dict file must equal Python's state_dict(): same keys in the same order, values
    and types. plain_load: the file is mixprec::pickle_save_untagged's, which plain torch.load
    (weights_only=True) must read. Otherwise it is torch::pickle_save's, whose TorchScript type
    tags torch >= 2.6's weights_only loader refuses (LibTorch's format, documented in
    docs/python_to_cpp.md): it is read with the tag's global allowlisted."""
    problems = []
    got, why = load_cpp(path)
    if why and plain_load:
        problems.append(f"plain torch.load (weights_only default) FAILS: {why}")
    if list(got) != list(expected):
        problems.append(f"keys {list(got)} != {list(expected)}")
    for k, v in expected.items():
        if k in got and (got[k] != v or type(got[k]) is not type(v)):
            problems.append(f"{k}: C++ {got[k]!r} ({type(got[k]).__name__}) vs Python "
                            f"{v!r} ({type(v).__name__})")
    fresh = torch.amp.GradScaler("cpu")
    fresh.load_state_dict(got)
    if fresh.state_dict() != expected:
        problems.append(f"Python scaler loaded from it gives {fresh.state_dict()}")
    print(f"{'PASS' if not problems else 'FAIL'} {label}: torch.load of C++'s state_dict = "
          f"{expected}" + ("" if not problems else "; " + "; ".join(sorted(set(problems)))))
    return not problems


def norm_close(cpp, py):
    """-1 (no clipping) on both sides, or both NaN, or equal infinities, or within NORM_RTOL."""
    if py != py or cpp != cpp or abs(py) == float("inf"):
        return (py != py and cpp != cpp) or cpp == py
    return abs(cpp - py) <= NORM_RTOL * abs(py)


def nan_free(rows):
    """Trace rows with the norm as its repr, so that NaN norms compare equal."""
    return [r[:6] + (repr(r[6]),) for r in rows]


def compare_scenario(name, folder, init, run1, run3):
    (t1, p1, sd1), (t3, p3, sd3) = run1, run3
    tc = read_trace(os.path.join(folder, f"cpp_{name}_trace.txt"))
    ok = True
    exact = [i for i, (a, b) in enumerate(zip(tc, t1)) if a[:6] != b[:6]]
    norm_bad = [i for i, (a, b) in enumerate(zip(tc, t1)) if not norm_close(a[6], b[6])]
    if len(tc) != len(t1) or exact or norm_bad:
        ok = False
        for i in (exact + norm_bad)[:3]:
            print(f"  step {i}: C++ {tc[i]} vs Python {t1[i]}")
    skips1 = sum(r[4] for r in t1)  # parameters unchanged by step(): skipped
    skips2 = sum(r[5] for r in t1)
    clipped = sum(1 for r in t1 if r[6] > MAX_NORM)
    print(f"{'PASS' if ok else 'FAIL'} {name} {SCENARIOS[name]}: (scale, tracker, found_inf x2, "
          f"skip x2) identical after all {len(t1)} updates ({skips1}/{skips2} skipped steps, "
          f"final scale {t1[-1][0]:g}, {clipped} steps clipped), clip norms within {NORM_RTOL:g}")
    if skips1 == skips2 or clipped == 0:
        print(f"FAIL {name}: vacuous run (needs a one-sided skip and a clipped step)")
        ok = False
    same_13 = (nan_free(t1) == nan_free(t3) and sd1 == sd3
               and all(torch.equal(a, b) for a, b in zip(p1, p3)))
    print(f"{'PASS' if same_13 else 'FAIL'} {name}: Python resumed at step {MID} from C++'s "
          f"checkpoint carries on bit for bit as the uninterrupted Python run")
    ok = ok and same_13
    ref = torch.cat([p.reshape(-1).double() for p in p1])
    got = read_floats(os.path.join(folder, f"cpp_{name}_params.bin"), ref.numel()).double()
    ratio = float(((got - ref).abs() / (ATOL + RTOL * ref.abs())).max())
    moved = float((ref - torch.cat([p.reshape(-1) for p in init]).double()).abs().max())
    params_ok = bool(torch.isfinite(got).all()) and ratio <= 1.0 and moved > 0
    print(f"{'PASS' if params_ok else 'FAIL'} {name}: params max|cpp-py| = "
          f"{float((got - ref).abs().max()):.3g}, worst diff/(atol+rtol|py|) = {ratio:.3g} "
          f"(rtol {RTOL:g}, atol {ATOL:g}), moved {moved:.3g}")
    mid_sd = torch.load(os.path.join(folder, f"py_{name}_sd_mid.pt"))
    ok = check_state_dict(f"{name} mid, torch::pickle_save",
                          os.path.join(folder, f"cpp_{name}_sd_mid.pt"), mid_sd, False) and ok
    ok = check_state_dict(f"{name} mid, mixprec::pickle_save_untagged",
                          os.path.join(folder, f"cpp_{name}_sd_mid_untagged.pt"), mid_sd,
                          True) and ok
    ok = check_state_dict(f"{name} final, mixprec::pickle_save_untagged",
                          os.path.join(folder, f"cpp_{name}_sd_final.pt"), sd1, True) and ok
    return ok and params_ok


def run_exe(exe, mode, folder):
    proc = subprocess.run([exe, mode, folder], capture_output=True, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def mode_train(exe, folder):
    init, x, y = write_inputs(folder)
    run1 = {n: train_python(n, init, x, y, folder, None) for n in SCENARIOS}
    rc = run_exe(exe, "train", folder)
    if rc != 0:
        print(f"FAIL: {exe} train exited with {rc}")
        return 2
    ok = True
    for n in SCENARIOS:
        run3 = train_python(n, init, x, y, folder, os.path.join(folder, f"cpp_{n}_sd_mid.pt"))
        ok = compare_scenario(n, folder, init, run1[n], run3) and ok
    return 0 if ok else 1


def mode_archive(exe, folder):
    from archive_check import check_archive  # the Python half of the archive test
    init, x, y = write_inputs(folder)
    rc = run_exe(exe, "archive", folder)
    if rc not in (0, 1):
        print(f"FAIL: {exe} archive exited with {rc}")
        return 2
    ok = check_archive(folder, init, x, y, make_model) and rc == 0
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", required=True, help="path of mixprec_python_differential")
    ap.add_argument("--mode", choices=["train", "archive"], default="train")
    ap.add_argument("--dir", default=None, help="folder for the exchanged files (default: temp)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as the C++ side: same reduction order in every kernel
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_pydiff_")
    os.makedirs(folder, exist_ok=True)
    print(f"differential_cpu.py: torch {torch.__version__}, mode {args.mode}, folder {folder}")
    rc = (mode_train if args.mode == "train" else mode_archive)(args.exe, folder)
    print("PASS" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
