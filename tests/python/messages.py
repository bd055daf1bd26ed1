#!/usr/bin/env python3
"""python.messages: mixprec's errors and warnings in PyTorch's words, held against PyTorch itself.

mixprec's messages carry Python's text (docs/errors.md), and that text changes between PyTorch
releases (update(new_scale)'s message in 2.9, the CUDA autocast warning in 2.10): mixprec uses the
text of the PyTorch its LibTorch is. This script triggers each misuse in the installed
torch.amp.GradScaler("cpu") / torch.autocast, runs messages.cpp (mixprec_messages, built against
the LibTorch of the same release), and requires Python's message inside mixprec's, for each.

Usage: messages.py --exe MIXPREC_MESSAGES
Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (no torch module, or torch < 2.4).
A torch that is installed but fails to import is a failure (exit 2), never a skip.
"""
import argparse
import subprocess
import sys
import warnings

from differential_cpu import torch  # torch, with its skip rules (none, or < 2.4: exit 77)


def model(scaled=True, dtype=torch.float32, grad=True):
    """One parameter with a grad, its SGD and a scaler, as messages.cpp's Model."""
    w = torch.zeros(3, dtype=dtype, requires_grad=True)
    if grad:
        w.grad = torch.ones(3, dtype=dtype)
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = torch.amp.GradScaler("cpu")
    if scaled:
        scaler.scale(torch.ones(1))
    return scaler, opt


def _unscale_twice():
    s, o = model()
    s.unscale_(o)
    s.unscale_(o)


def _unscale_after_step():
    s, o = model()
    s.step(o)
    s.unscale_(o)


def _step_twice():
    s, o = model()
    s.step(o)
    s.step(o)


def _new_scale():
    s, o = model()
    s.step(o)
    s.update(torch.ones(2))


MISUSES = {
    "unscale_before_scale": lambda: (lambda s, o: s.unscale_(o))(*model(scaled=False)),
    "unscale_twice": _unscale_twice,
    "unscale_after_step": _unscale_after_step,
    "step_twice": _step_twice,
    "step_with_closure": lambda: (lambda s, o: s.step(o, closure=lambda: 0.0))(*model()),
    "step_without_grads": lambda: (lambda s, o: s.step(o))(*model(grad=False)),
    "update_without_step": lambda: model()[0].update(),
    "fp16_grads": lambda: (lambda s, o: s.step(o))(*model(dtype=torch.float16)),
    "update_new_scale_two_elements": _new_scale,
    "load_empty_state_dict": lambda: torch.amp.GradScaler("cpu").load_state_dict({}),
}


def python_messages():
    out = {}
    for key, misuse in MISUSES.items():
        try:
            misuse()
            out[key] = "<nothing was raised>"
        except Exception as e:  # AssertionError, RuntimeError, ValueError: the text is compared
            out[key] = str(e)
    if torch.cuda.is_available():
        out["autocast_cuda_without_cuda"] = "<a CUDA device is present>"
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast("cuda"):
                pass
        out["autocast_cuda_without_cuda"] = " ".join(str(w.message) for w in caught)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    args = parser.parse_args()
    try:
        run = subprocess.run([args.exe], capture_output=True, text=True, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"ERROR: could not run {args.exe}: {e}")
        return 2
    cpp = {}
    for line in run.stdout.splitlines():
        key, _, message = line.partition("\t")
        cpp[key] = message.replace("\\n", "\n")
    python = python_messages()
    print(f"torch {torch.__version__}")
    failures = 0
    for key, expected in python.items():
        got = cpp.get(key)
        ok = got is not None and expected in got and not expected.startswith("<nothing")
        if key == "autocast_cuda_without_cuda" and expected.startswith("<"):
            ok = got == expected  # a GPU on both sides: no warning to compare
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {key}\n  python: {expected!r}\n  mixprec: {got!r}")
    missing = sorted(set(cpp) - set(python))
    if missing:
        print(f"FAIL: mixprec_messages printed keys this script does not know: {missing}")
        failures += 1
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {len(python) - failures} of {len(python)} "
          "messages hold Python's text")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
