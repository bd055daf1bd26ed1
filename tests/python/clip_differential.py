#!/usr/bin/env python3
"""Differential test: mixprec's gradient clipping (C++) against PyTorch itself, on the CPU.

Python writes the cases (grads, max_norm, norm_type, scale) with torch.save; the C++ half
(clip_differential.cpp, the `clip` mode of mixprec_python_differential) reads them with mixprec's reader, runs mixprec::clip_grad_norm_ (kind 0)
or GradScaler::clip_grad_norm_ with torch::optim::SGD (kind 1) or mixprec::optim::AdamW and its
step (kind 2), and writes the norms and grads back. Required:
  - the norm within NORM_RTOL of an fp64 reference (the norm of the unscaled grads, as unscale_
    stores them, taken in float64) for fp32, bf16 and fp16 grads, 16M elements included;
  - the grads bit for bit what torch.amp.GradScaler("cpu").unscale_ (kinds 1, 2) and then
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, <mixprec's norm>) leave;
  - PyTorch's own norm is reported next to it (its CPU norm drifts with size,
    pytorch/pytorch#169237, and its fp16 norm overflows to inf): counted, not failed.
Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (no torch module, or torch < 2.4).
"""
import argparse
import os
import subprocess
import sys
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
if _VERSION < (2, 6):
    print(f"SKIP: torch {torch.__version__} < 2.6 (needs clip_grads_with_norm_)")
    sys.exit(SKIP)

NORM_RTOL = 1e-6
# Public from torch 2.6 on (Debian 13's 2.6 has them under nn.utils.clip_grad's private names).
_clip = torch.nn.utils.clip_grad
get_total_norm = getattr(torch.nn.utils, "get_total_norm", None) or _clip._get_total_norm
clip_grads_with_norm_ = (getattr(torch.nn.utils, "clip_grads_with_norm_", None)
                         or _clip._clip_grads_with_norm_)
INF = float("inf")


def make_cases():
    gen = torch.Generator().manual_seed(50)

    def normal(shape, dtype, std):
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * std).to(dtype)

    shapes = [(1000,), (64, 64), (3, 100003)]
    cases = []
    # kind, dtype, scale, max_norm, norm_type, std, shapes
    # max_norm not a power of two: Python's coefficient (reciprocal, then times max_norm) then
    # differs from a true division in about a quarter of the cases; 1.0 is the common setting.
    for norm_type in (2.0, INF, 1.0):
        cases.append((0, torch.float32, 1.0, 0.37, norm_type, 1.0, shapes))
    cases.append((0, torch.float32, 1.0, 1.0, 2.0, 1.0, shapes))
    cases.append((0, torch.bfloat16, 1.0, 0.37, 2.0, 1.0, shapes))
    # fp16 grads whose norm (about 1.1e5) is beyond fp16's range: PyTorch's is inf.
    cases.append((0, torch.float16, 1.0, 0.37, 2.0, 200.0, shapes))
    cases.append((0, torch.float32, 1.0, 0.37, 2.0, 1.0, [(16 << 20,)]))  # 16M elements
    for kind in (1, 2):
        for dtype, scale in ((torch.float32, 65536.0), (torch.float32, 1000.0),
                             (torch.bfloat16, 1024.0)):
            cases.append((kind, dtype, scale, 0.9, 2.0, scale, shapes))
        cases.append((kind, torch.float32, 3000.0, 0.37, INF, 3000.0, shapes))
    out = {}
    grads = []
    for c, (kind, dtype, scale, max_norm, norm_type, std, case_shapes) in enumerate(cases):
        p = f"c{c}."
        out[p + "kind"] = torch.tensor(kind)
        out[p + "max_norm"] = torch.tensor(max_norm, dtype=torch.float64)
        out[p + "norm_type"] = torch.tensor(norm_type, dtype=torch.float64)
        out[p + "scale"] = torch.tensor(scale, dtype=torch.float64)
        out[p + "count"] = torch.tensor(len(case_shapes))
        gs = [normal(s, dtype if kind == 0 or dtype != torch.float32 else dtype, std)
              for s in case_shapes]
        if kind == 0 or dtype != torch.float32:
            gs = [g.to(dtype) for g in gs]
        for k, g in enumerate(gs):
            out[p + f"g{k}"] = g
        grads.append(gs)
    return cases, grads, out


def python_side(kind, scale, max_norm, norm_type, grads, mixprec_norm):
    """Python's unscale_ (kinds 1, 2) and clip_grads_with_norm_ with mixprec's norm; also the
    fp64 reference norm of the unscaled grads and PyTorch's own get_total_norm."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    if kind != 0:
        opt = torch.optim.SGD(params, lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        scaler.scale(torch.ones(()))
        scaler.unscale_(opt)
    unscaled = [p.grad.clone() for p in params]
    reference = torch.linalg.vector_norm(
        torch.cat([u.double().flatten() for u in unscaled]), norm_type).item()
    torch_norm = get_total_norm(unscaled, norm_type).float().item()
    clip_grads_with_norm_(params, max_norm, mixprec_norm)
    return [p.grad for p in params], reference, torch_norm


def rel(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b not in (0.0, INF) else INF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--dir", required=True)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    cases, grads, payload = make_cases()
    path_in = os.path.join(args.dir, "cases.pt")
    path_out = os.path.join(args.dir, "results.pt")
    torch.save(payload, path_in)
    run = subprocess.run([args.exe, "clip", args.dir], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        print(f"ERROR: {args.exe} exited {run.returncode}")
        return 2
    results = torch.load(path_out)
    failures = 0
    torch_off = 0
    kinds = {0: "clip_grad_norm_", 1: "scaler + torch SGD", 2: "scaler + fused AdamW"}
    print(f"torch {torch.__version__}")
    print("case kind                  dtype     elements   p    |mixprec-fp64|/fp64  "
          "|torch-fp64|/fp64  grads")
    for c, (kind, dtype, scale, max_norm, norm_type, _, shapes) in enumerate(cases):
        p = f"c{c}."
        norm = results[p + "norm"]
        want, reference, torch_norm = python_side(kind, scale, max_norm, norm_type, grads[c], norm)
        got = [results[p + f"g{k}"] for k in range(len(want))]
        differing = sum(int((g.view(torch.int16 if g.element_size() == 2 else torch.int32) !=
                             w.view(torch.int16 if w.element_size() == 2 else torch.int32)).sum())
                        for g, w in zip(got, want))
        norm_err = rel(norm.item(), reference)
        torch_err = rel(torch_norm, reference)
        ok = norm.dtype == torch.float32 and norm.dim() == 0 and norm_err <= NORM_RTOL \
            and differing == 0
        failures += not ok
        torch_off += torch_err > NORM_RTOL
        elements = sum(int(torch.Size(s).numel()) for s in shapes)
        print(f"{c:4d} {kinds[kind]:22s} {str(dtype)[6:]:9s} {elements:9d} {norm_type:4.0f}    "
              f"{norm_err:.2e}             {torch_err:.2e}           "
              f"{'bit for bit' if differing == 0 else f'{differing} differ'}"
              f"{'' if ok else '   FAIL'}")
    print(f"PyTorch's own norm off by more than {NORM_RTOL} in {torch_off} of {len(cases)} cases "
          "(reported, not failed)")
    print("PASS" if failures == 0 else f"FAIL: {failures} case(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
