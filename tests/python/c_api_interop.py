#!/usr/bin/env python3
"""The C ABI (include/mixprec/c_api.h) against PyTorch itself: a binding trains through
libmixprec_c.so alone, and must do what torch.amp.GradScaler("cpu") does.

Why: a binding user (TorchSharp, tch-rs) never sees mixprec's C++ API; the C layer is the whole
product for them. c_api_interop.cpp plays the binding: it makes its tensors and optimizers with
LibTorch and passes only handles (torch::Tensor*, torch::optim::Optimizer*) through mixprec_*.

Two paths, over STEPS steps of Linear -> ReLU -> Linear with overflows injected on INF_STEPS (inf
into one gradient) and NAN_STEPS (NaN), growth every GROWTH_INTERVAL clean steps:
  optimizer  LibTorch's C++ torch::optim::SGD (momentum) through mixprec_grad_scaler_step;
             Python: scaler.step(torch.optim.SGD(...)).
  grads      the binding's own optimizer code: mixprec_grad_scaler_unscale_grads_, then its
             own plain SGD update unless found_inf; Python: scaler.unscale_(SGD without
             momentum) and scaler.step.
Checked: each step's scale and growth tracker exactly equal to Python's; each step skipped
exactly where Python skipped (Python's found_inf); the final parameters within RTOL/ATOL (LibTorch's
C++ SGD and Python's SGD are separate implementations); the C scaler's state bytes
(mixprec_grad_scaler_state_dict) open with plain torch.load (weights_only) and equal Python's
scaler.state_dict(); Python's torch.save(scaler.state_dict()) loads through
mixprec_grad_scaler_load_state_dict into a scaler with Python's scale and tracker.

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (the rules of differential_cpu.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile

from differential_cpu import read_floats, torch, write_exchange  # torch, with its skip rules

IN_DIM, HIDDEN, OUT_DIM, BATCH, STEPS = 6, 10, 3, 8, 16
INIT_SCALE, GROWTH_INTERVAL, LR, MOMENTUM = 256.0, 2, 0.05, 0.9
INF_STEPS, NAN_STEPS = [3, 9], [6]
RTOL, ATOL = 1e-5, 1e-6
PATHS = ["optimizer", "grads"]


def inputs():
    gen = torch.Generator().manual_seed(21)
    init = [torch.randn(HIDDEN, IN_DIM, generator=gen) / IN_DIM ** 0.5,
            torch.randn(HIDDEN, generator=gen) * 0.1,
            torch.randn(OUT_DIM, HIDDEN, generator=gen) / HIDDEN ** 0.5,
            torch.randn(OUT_DIM, generator=gen) * 0.1]
    x = torch.randn(STEPS, BATCH, IN_DIM, generator=gen)
    y = torch.randn(STEPS, BATCH, OUT_DIM, generator=gen)
    return init, x, y


def train_python(path, init, x, y):
    """Python's run: (per-step rows (scale, tracker, stepped), final params, scaler)."""
    l1, l2 = torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.Linear(HIDDEN, OUT_DIM)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    with torch.no_grad():
        for p, v in zip(params, init):
            p.copy_(v)
    momentum = MOMENTUM if path == "optimizer" else 0.0
    opt = torch.optim.SGD(params, lr=LR, momentum=momentum, foreach=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL)
    rows = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(l2(torch.relu(l1(x[step]))), y[step])
        scaler.scale(loss).backward()
        with torch.no_grad():
            if step in INF_STEPS:
                params[0].grad[0, 0] = float("inf")
            if step in NAN_STEPS:
                params[2].grad[1, 1] = float("nan")
        scaler.unscale_(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        scaler.step(opt)
        scaler.update()
        rows.append((scaler.get_scale(), scaler._get_growth_tracker(), int(found == 0)))
    return rows, [p.detach().clone() for p in params], scaler


def read_trace(path):
    with open(path) as f:
        return [(float(s), int(t), int(st)) for s, t, st in (line.split() for line in f)]


def check_path(exe, folder, path, init, x, y):
    rows, params, scaler = train_python(path, init, x, y)
    torch.save(scaler.state_dict(), os.path.join(folder, f"py_state_{path}.pt"))
    proc = subprocess.run([exe, path, folder], capture_output=True, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"FAIL {path}: the binding-style program exited {proc.returncode}")
        return False
    ok = True
    c_rows = read_trace(os.path.join(folder, f"trace_{path}.txt"))
    if c_rows != rows:
        print(f"FAIL {path}: (scale, tracker, stepped) per step differ\n  C ABI: {c_rows}\n"
              f"  Python: {rows}")
        ok = False
    numel = sum(p.numel() for p in params)
    c_params = read_floats(os.path.join(folder, f"params_{path}.bin"), numel)
    py_params = torch.cat([p.reshape(-1) for p in params])
    diff = (c_params - py_params).abs().max().item()
    if not torch.allclose(c_params, py_params, rtol=RTOL, atol=ATOL):
        print(f"FAIL {path}: final parameters differ (max |diff| {diff})")
        ok = False
    state = torch.load(os.path.join(folder, f"c_state_{path}.pt"))  # weights_only by default
    if state != scaler.state_dict():
        print(f"FAIL {path}: the C state bytes hold {state}, Python's state_dict is "
              f"{scaler.state_dict()}")
        ok = False
    with open(os.path.join(folder, f"loaded_{path}.txt")) as f:
        loaded_scale, loaded_tracker = f.read().split()
    if (float(loaded_scale), int(loaded_tracker)) != (scaler.get_scale(),
                                                        scaler._get_growth_tracker()):
        print(f"FAIL {path}: Python's state loaded through the C ABI gives scale {loaded_scale}, "
              f"tracker {loaded_tracker}")
        ok = False
    skipped = [i for i, r in enumerate(rows) if r[2] == 0]
    print(f"{'PASS' if ok else 'FAIL'} {path}: {STEPS} steps, skipped {skipped}, final scale "
          f"{rows[-1][0]}, max |param diff| {diff:.3g}")
    return ok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_c_api_")
    os.makedirs(folder, exist_ok=True)
    init, x, y = inputs()
    meta = (f"in_dim {IN_DIM}\nhidden {HIDDEN}\nout_dim {OUT_DIM}\nbatch {BATCH}\nsteps {STEPS}\n"
            f"init_scale {INIT_SCALE!r}\ngrowth_interval {GROWTH_INTERVAL}\nlr {LR!r}\n"
            f"momentum {MOMENTUM!r}\ninf_steps " + " ".join(map(str, INF_STEPS)) + "\n"
            "nan_steps " + " ".join(map(str, NAN_STEPS)) + "\n")
    write_exchange(folder, init, x, y, meta, "tests/python/c_api_interop.py")
    results = [check_path(args.exe, folder, path, init, x, y) for path in PATHS]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
