#!/usr/bin/env python3
"""Differential run: mixprec (C++) against PyTorch (Python) on a real GPU.

Writes the initial parameters, the data and the injected-inf schedule of a small MLP to a folder
(raw float32 little-endian files plus meta.txt), runs the C++ program mixprec_gpu_differential on
that folder, trains the same model here with torch.amp.GradScaler, and compares:

  * the scale after every update() must be identical (growth, backoff and skips at the same steps);
  * the final parameters must satisfy |cpp - py| <= ATOL + RTOL * |py| element-wise.

Both sides use fp16 autocast on CUDA, MSE loss, GradScaler(init_scale=256, growth_interval=6).
Optimizers, each run from the same initial parameters:
  sgd:   C++ mixprec::optim::SGD (fused, gets grad_scale/found_inf from GradScaler)
         vs Python torch.optim.SGD(lr=0.05, momentum=0.9, foreach=False) (GradScaler unscale_ path)
  adamw: C++ mixprec::optim::AdamW (fused)
         vs Python torch.optim.AdamW(lr=1e-3, weight_decay=0.01, fused=True) (grad_scale/found_inf)
The forward/backward pass runs the same LibTorch kernels on both sides; the optimizers differ in
arithmetic order only, hence the tolerance (see RTOL/ATOL).

Usage: differential.py --exe build/tests/gpu/mixprec_gpu_differential [--dir FOLDER]
Prints one PASS/FAIL line per optimizer with the numbers; exit code 0 on PASS, 1 on FAIL,
2 when it cannot run (no CUDA, the executable failed).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch

IN_DIM, HIDDEN, OUT_DIM, BATCH, STEPS = 32, 64, 8, 64, 60
INIT_SCALE, GROWTH_INTERVAL = 256.0, 6
INF_STEPS = [5, 17, 18, 41]
OPTIMIZERS = ["sgd", "adamw"]
# Tolerance of the final parameters (60 steps; lr 0.05 SGD / 1e-3 AdamW): the optimizers round
# differently (fused kernels vs PyTorch's), and a last-bit difference in a parameter can flip the
# fp16 rounding of a weight in the next forward pass, which the next steps carry on.
RTOL, ATOL = 1e-3, 1e-4


def write_inputs(folder):
    """Initial parameters, data and meta.txt; returns them for the Python run."""
    gen = torch.Generator().manual_seed(1234)
    l1w = torch.randn(HIDDEN, IN_DIM, generator=gen) / IN_DIM ** 0.5
    l1b = torch.randn(HIDDEN, generator=gen) * 0.1
    l2w = torch.randn(OUT_DIM, HIDDEN, generator=gen) / HIDDEN ** 0.5
    l2b = torch.randn(OUT_DIM, generator=gen) * 0.1
    x = torch.randn(STEPS, BATCH, IN_DIM, generator=gen)
    y = torch.randn(STEPS, BATCH, OUT_DIM, generator=gen)
    init = [l1w, l1b, l2w, l2b]

    def dump(name, tensors):
        with open(os.path.join(folder, name), "wb") as f:
            for t in tensors:
                f.write(_raw_bytes(t))

    dump("params_init.bin", init)
    dump("x.bin", [x])
    dump("y.bin", [y])
    with open(os.path.join(folder, "meta.txt"), "w") as f:
        f.write("# written by tests/gpu/differential.py\n")
        f.write(f"in_dim {IN_DIM}\nhidden {HIDDEN}\nout_dim {OUT_DIM}\nbatch {BATCH}\n")
        f.write(f"steps {STEPS}\ninit_scale {INIT_SCALE!r}\ngrowth_interval {GROWTH_INTERVAL}\n")
        f.write("inf_steps " + " ".join(str(s) for s in INF_STEPS) + "\n")
        f.write("optimizers " + " ".join(OPTIMIZERS) + "\n")
    return init, x, y


def _raw_bytes(t):
    """The bytes of a float32 CPU tensor, little-endian (x86-64/aarch64 hosts); numpy if present
    (torch wheels do not require it), else through a uint8 view."""
    t = t.detach().cpu().contiguous().to(torch.float32)
    try:
        return t.numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(t.view(torch.uint8).reshape(-1).tolist())


def read_floats(path, numel):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 4 * numel:
        raise RuntimeError(f"{path}: {len(data)} bytes, expected {4 * numel}")
    return torch.frombuffer(bytearray(data), dtype=torch.float32).clone()


def train_python(name, init, x, y):
    """The Python side; returns (scales after every update, final parameters)."""
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, OUT_DIM)).to(dev)
    with torch.no_grad():
        for p, v in zip(model.parameters(), init):
            p.copy_(v)
    if name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=False)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01, fused=True)
    try:  # torch.amp.GradScaler("cuda") from torch 2.3; torch.cuda.amp.GradScaler before
        scaler = torch.amp.GradScaler("cuda", init_scale=INIT_SCALE,
                                      growth_interval=GROWTH_INTERVAL)
    except (AttributeError, TypeError):
        scaler = torch.cuda.amp.GradScaler(init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)
    scales = []
    for step in range(STEPS):
        xs = x[step].clone()
        if step in INF_STEPS:
            xs[0, 0] = float("inf")
        xs, ys = xs.to(dev), y[step].to(dev)
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(xs), ys)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, [p.detach().cpu() for p in model.parameters()]


def compare(name, folder, init, py_scales, py_params):
    """Prints one PASS/FAIL line with the numbers; returns True on PASS."""
    with open(os.path.join(folder, f"cpp_{name}_scales.txt")) as f:
        cpp_scales = [float(line) for line in f if line.strip()]
    numel = sum(p.numel() for p in py_params)
    flat = read_floats(os.path.join(folder, f"cpp_{name}_params.bin"), numel)
    ref = torch.cat([p.reshape(-1).double() for p in py_params])
    got = flat.double()
    diff = (got - ref).abs()
    bound = ATOL + RTOL * ref.abs()
    worst_ratio = float((diff / bound).max())
    max_abs = float(diff.max())
    moved = float((ref - torch.cat([p.reshape(-1) for p in init]).double()).abs().max())
    first_mismatch = next((i for i, (a, b) in enumerate(zip(cpp_scales, py_scales)) if a != b),
                          None)
    scales_ok = len(cpp_scales) == len(py_scales) and first_mismatch is None
    params_ok = bool(torch.isfinite(got).all()) and worst_ratio <= 1.0
    skipped = sum(1 for i in range(1, len(py_scales)) if py_scales[i] < py_scales[i - 1])
    grown = sum(1 for i in range(1, len(py_scales)) if py_scales[i] > py_scales[i - 1])
    ok = scales_ok and params_ok and moved > 0
    print(f"{'PASS' if ok else 'FAIL'} {name}: scales {'identical' if scales_ok else 'DIFFER'} "
          f"({len(cpp_scales)} C++ vs {len(py_scales)} Python values, {skipped} backoffs, "
          f"{grown} growths, final {py_scales[-1]:g}"
          + ("" if scales_ok else f", first mismatch at step {first_mismatch}: "
             f"C++ {cpp_scales[first_mismatch] if first_mismatch is not None else '?'} vs "
             f"Python {py_scales[first_mismatch] if first_mismatch is not None else '?'}")
          + f"); params max|cpp-py| = {max_abs:.3g}, worst diff/(atol+rtol*|py|) = "
          f"{worst_ratio:.3g} (rtol {RTOL:g}, atol {ATOL:g}); max param change vs init "
          f"{moved:.3g}")
    if moved == 0:
        print(f"FAIL {name}: the Python parameters never moved; the comparison would be vacuous")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", required=True, help="path of mixprec_gpu_differential")
    ap.add_argument("--dir", default=None, help="folder for the exchanged files (default: temp)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("differential.py: no CUDA device; this check needs a GPU", file=sys.stderr)
        return 2
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_differential_")
    os.makedirs(folder, exist_ok=True)
    init, x, y = write_inputs(folder)
    print(f"differential.py: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"folder {folder}, {STEPS} steps, inf at steps {INF_STEPS}")
    proc = subprocess.run([args.exe, folder], capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        print(f"FAIL: {args.exe} exited with {proc.returncode}")
        return 2
    all_ok = True
    for name in OPTIMIZERS:
        scales, params = train_python(name, init, x, y)
        all_ok = compare(name, folder, init, scales, params) and all_ok
    print("PASS" if all_ok else "FAIL")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
