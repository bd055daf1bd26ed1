#!/usr/bin/env python3
"""Checkpoint interop: mixprec::save_checkpoint / load_checkpoint against PyTorch's own AMP
checkpoint recipe, torch.save({"model": ..., "optimizer": ..., "scaler": ...}) and torch.load.

Why: a C++ run must be resumable in Python and the reverse, with nothing lost. A file that loads
but drops the optimizer's moments or step counts, the BatchNorm buffers or the scaler's growth
tracker still trains, just differently; so each direction resumes training and must end where an
uninterrupted Python run ends.

For each optimizer (sgd: SGD momentum 0.9; adam: Adam; adamw: AdamW with weight decay and
amsgrad; the C++ side uses torch::optim::SGD, mixprec::optim::Adam, mixprec::optim::AdamW) on a
Linear -> BatchNorm1d -> ReLU -> Linear model (the first Linear without bias: BatchNorm removes
it, so its gradient is rounding noise, which Adam would normalize into steps of lr), trained with
torch.amp.GradScaler("cpu") and overflows injected on INF_STEPS (one before, one after SWITCH):
  ref  Python trains steps [0, STEPS), saving its checkpoint at SWITCH with torch.save;
  C->P C++ trains [0, SWITCH) and save_checkpoint()s; Python opens the file with plain
       torch.load (weights_only), checks its layout against its own state_dicts at SWITCH (the
       same keys, value types, tensor dtypes and shapes; the scaler's dict equal), loads it into
       a model, optimizer (built with another lr) and scaler built unlike the saved ones, and
       trains [SWITCH, STEPS);
  P->C C++ loads Python's file with load_checkpoint into a zeroed model, an optimizer with
       another lr and a default scaler, and trains [SWITCH, STEPS);
  C->C C++ resumes from its own file the same way.
Each resumed run must end with the reference's parameters and buffers (within RTOL/ATOL: C++ and
Python optimizers round differently, as in differential_cpu.py) and exactly its scale and growth
tracker. Control: resuming without the optimizer's state must miss the reference by more than
100 times the tolerance, so the comparison can see a lost state. An
Adam(decoupled_weight_decay=True) checkpoint (PyTorch >= 2.7: AdamW's decay) must be refused by
C++'s Adam, which has only L2 decay.

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (the rules of differential_cpu.py).
"""
import argparse
import os
import subprocess
import sys
import tempfile

from differential_cpu import read_floats, torch, write_exchange  # torch, with its skip rules

IN_DIM, HIDDEN, OUT_DIM, BATCH, STEPS, SWITCH = 6, 12, 3, 8, 14, 7
INIT_SCALE, GROWTH_INTERVAL = 1024.0, 2
INF_STEPS = [2, 9]
RTOL, ATOL = 1e-5, 1e-6
OPTIMIZERS = ["sgd", "adam", "adamw"]


def make_model(init):
    model = torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN, bias=False),
                                torch.nn.BatchNorm1d(HIDDEN),
                                torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT_DIM))
    with torch.no_grad():
        for p, v in zip(model.parameters(), init):
            p.copy_(v)
    return model


def make_optimizer(name, params, lr=None):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.05, momentum=0.9, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr or 1e-2, foreach=False)
    return torch.optim.AdamW(params, lr=lr or 1e-2, weight_decay=0.01, amsgrad=True,
                             foreach=False)


def train(model, opt, scaler, x, y, begin, end):
    for s in range(begin, end):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[s]), y[s])
        scaler.scale(loss).backward()
        if s in INF_STEPS:
            with torch.no_grad():
                model[3].bias.grad[0] = float("inf")
        scaler.step(opt)
        scaler.update()


def write_inputs(folder):
    gen = torch.Generator().manual_seed(7)
    init = [p.detach().clone() for p in make_model([]).parameters()]
    init = [torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if i == 1 else 0.0)
            for i, p in enumerate(init)]  # BatchNorm's weight around 1
    x = torch.randn(STEPS, BATCH, IN_DIM, generator=gen)
    y = torch.randn(STEPS, BATCH, OUT_DIM, generator=gen)
    write_exchange(folder, init, x, y,
                   f"in_dim {IN_DIM}\nhidden {HIDDEN}\nout_dim {OUT_DIM}\nbatch {BATCH}\n"
                   f"steps {STEPS}\nswitch {SWITCH}\ninit_scale {INIT_SCALE!r}\n"
                   f"growth_interval {GROWTH_INTERVAL}\n"
                   "inf_steps " + " ".join(map(str, INF_STEPS)) + "\n",
                   "tests/python/checkpoint_interop.py")
    return init, x, y


def new_scaler(**kw):
    return torch.amp.GradScaler("cpu", **kw)


def flat(model):
    return torch.cat([t.detach().reshape(-1).to(torch.float32) for t in model.state_dict().values()])


def close(label, got, want, tol_scale=1.0):
    err = (got - want).abs()
    bound = tol_scale * (ATOL + RTOL * want.abs())
    ok = bool((err <= bound).all())
    print(f"  {'ok  ' if ok else 'FAIL'} {label}: max |diff| {err.max().item():.3g}")
    return ok


def layout(value):
    """A value's structure: dict keys, sequence kinds, tensor dtypes and shapes, scalar types."""
    if isinstance(value, dict):
        return {k: layout(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [layout(v) for v in value])
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"  # Python keeps what the user passed: weight_decay=0 stays an int
    if value is None or isinstance(value, bool):
        return "bool or None"  # foreach/fused: None (the default) or what the user passed
    return type(value).__name__


def check_cpp_file(path, ref_at_switch):
    """C++'s checkpoint opens with plain torch.load and has Python's layout."""
    ok = True
    ckpt = torch.load(path)  # weights_only=True: the default since torch 2.6
    torch.load(path, weights_only=True)  # explicitly, for older defaults
    for key in ("model", "optimizer", "scaler"):
        same = layout(ckpt[key]) == layout(ref_at_switch[key])
        if key == "model":
            same = same and list(ckpt[key]) == list(ref_at_switch[key])  # the order too
        if key == "scaler":
            same = same and ckpt[key] == ref_at_switch[key]
        if key == "optimizer":  # Adam's False, AdamW's True (PyTorch >= 2.7 writes the key)
            same = same and all(
                g.get("decoupled_weight_decay") == r.get("decoupled_weight_decay")
                for g, r in zip(ckpt[key]["param_groups"], ref_at_switch[key]["param_groups"]))
        print(f"  {'ok  ' if same else 'FAIL'} C++ file's \"{key}\" has Python's layout")
        if not same:
            print(f"    C++:    {layout(ckpt[key])}\n    Python: {layout(ref_at_switch[key])}")
        ok = ok and same
    return ok, ckpt


def resume_python(name, ckpt, x, y, with_optimizer=True):
    model = make_model([torch.zeros(p.shape) for p in make_model([]).parameters()])
    opt = make_optimizer(name, model.parameters(), lr=0.5)
    scaler = new_scaler()
    model.load_state_dict(ckpt["model"])
    if with_optimizer:
        opt.load_state_dict(ckpt["optimizer"])
    else:
        opt = make_optimizer(name, model.parameters())
    scaler.load_state_dict(ckpt["scaler"])
    train(model, opt, scaler, x, y, SWITCH, STEPS)
    return flat(model), (scaler.get_scale(), scaler._get_growth_tracker())


def resume_cpp(exe, folder, name, path):
    proc = subprocess.run([exe, "resume", folder, name, path], capture_output=True, text=True,
                          timeout=120)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} resume {name} {path} exited with {proc.returncode}")
    params = read_floats(path + ".params.bin", ref_numel())
    scale, tracker = open(path + ".scaler.txt").read().split()
    return params, (float(scale), int(tracker))


def ref_numel():
    return sum(t.numel() for t in make_model([]).state_dict().values())


def run_optimizer(exe, folder, name, init, x, y):
    print(f"optimizer {name}:")
    model, scaler = make_model(init), new_scaler(init_scale=INIT_SCALE,
                                                 growth_interval=GROWTH_INTERVAL)
    opt = make_optimizer(name, model.parameters())
    train(model, opt, scaler, x, y, 0, SWITCH)
    py_path = os.path.join(folder, f"py_{name}.pt")
    ref_at_switch = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "scaler": scaler.state_dict()}
    torch.save(ref_at_switch, py_path)
    ref_at_switch = torch.load(py_path)  # a copy, as the training below changes the tensors
    train(model, opt, scaler, x, y, SWITCH, STEPS)
    ref, ref_scaler = flat(model), (scaler.get_scale(), scaler._get_growth_tracker())

    rc = subprocess.run([exe, "train", folder, name], timeout=120).returncode
    if rc != 0:
        raise RuntimeError(f"{exe} train {name} exited with {rc}")
    cpp_path = os.path.join(folder, f"cpp_{name}.pt")
    ok, ckpt = check_cpp_file(cpp_path, ref_at_switch)

    runs = {"C->P (Python resumes C++'s file)": resume_python(name, ckpt, x, y),
            "P->C (C++ resumes Python's file)": resume_cpp(exe, folder, name, py_path),
            "C->C (C++ resumes its own file)": resume_cpp(exe, folder, name, cpp_path)}
    for label, (params, scaler_state) in runs.items():
        ok = close(label, params, ref) and ok
        same = scaler_state == ref_scaler
        print(f"  {'ok  ' if same else 'FAIL'} {label}: scale and tracker {scaler_state}, "
              f"reference {ref_scaler}")
        ok = ok and same
    lost, _ = resume_python(name, ckpt, x, y, with_optimizer=False)
    meaningful = not bool(((lost - ref).abs() <= 100 * (ATOL + RTOL * ref.abs())).all())
    print(f"  {'ok  ' if meaningful else 'FAIL'} control: resuming without the optimizer state "
          f"misses by {(lost - ref).abs().max().item():.3g}")
    return ok and meaningful


def run_decoupled_adam(exe, folder, init, x, y):
    """A Python Adam(decoupled_weight_decay=True) checkpoint (PyTorch >= 2.7) has AdamW's weight
    decay: C++ must refuse to resume it into an Adam, saying so, not train on with L2 decay."""
    print("optimizer adam(decoupled_weight_decay=True, weight_decay=0.01):")
    if "decoupled_weight_decay" not in torch.optim.Adam([torch.zeros(1)]).defaults:
        print(f"  ok   torch {torch.__version__}'s Adam has no decoupled_weight_decay: "
              "no such file")
        return True
    model, scaler = make_model(init), new_scaler(init_scale=INIT_SCALE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=0.01,
                           decoupled_weight_decay=True, foreach=False)
    train(model, opt, scaler, x, y, 0, SWITCH)
    path = os.path.join(folder, "py_adam_decoupled.pt")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scaler": scaler.state_dict()}, path)
    proc = subprocess.run([exe, "resume", folder, "adam", path], capture_output=True, text=True,
                          timeout=120)
    refused = proc.returncode == 2 and "decoupled_weight_decay=True" in proc.stderr
    print(f"  {'ok  ' if refused else 'FAIL'} C++ refuses to resume it into an Adam "
          f"(exit {proc.returncode}): {proc.stderr.strip()}")
    return refused


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", required=True, help="path of mixprec_checkpoint_interop")
    ap.add_argument("--dir", default=None, help="folder for the exchanged files (default: temp)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as the C++ side: same reduction order in every kernel
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_ckpt_")
    os.makedirs(folder, exist_ok=True)
    print(f"checkpoint_interop.py: torch {torch.__version__}, folder {folder}")
    try:
        init, x, y = write_inputs(folder)
        ok = all([run_optimizer(args.exe, folder, name, init, x, y) for name in OPTIMIZERS] +
                 [run_decoupled_adam(args.exe, folder, init, x, y)])
    except Exception as e:  # the C++ side failed, or a file did not load
        import traceback
        traceback.print_exc()
        print(f"FAIL: {e}")
        return 1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
