#!/usr/bin/env python3
"""Peak memory and time of loading a checkpoint into a model and an Adam optimizer that already
exist (bench/checkpoint_load.cpp): mixprec::load_checkpoint, LibTorch's torch::load of its own
archives, and Python's torch.load + load_state_dict of mixprec's file, each in a fresh process,
alternating, for docs/performance.md.

    python3 bench/checkpoint_load.py --exe build/bench/checkpoint_load --mib 512 [--runs 3]

Python's side needs a torch (the current-PyTorch venv's); without one its rows are left out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PYTHON_LOAD = r"""
import json, sys, time, torch
mib, path = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(mib // 4)])
adam = torch.optim.Adam(model.parameters(), lr=1e-3)
for p in model.parameters():
    p.grad = torch.full_like(p, 1e-3)
adam.step()
for p in model.parameters():
    p.grad = None
scaler = torch.amp.GradScaler("cpu")
def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
t0 = time.perf_counter()
c = torch.load(path)  # weights_only, torch 2.6's default
model.load_state_dict(c["model"])
adam.load_state_dict(c["optimizer"])
scaler.load_state_dict(c["scaler"])
del c
seconds = time.perf_counter() - t0
print(json.dumps({"loader": "Python torch.load %s" % torch.__version__.split("+")[0],
                  "state_bytes": 3 * mib * 2**20, "extra_peak_bytes": status("VmHWM") - before,
                  "seconds": seconds}))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_checkpoint_load_")
    os.makedirs(folder, exist_ok=True)
    subprocess.run([args.exe, "save", folder, str(args.mib)], check=True)
    rows = []
    for _ in range(args.runs):
        for mode in ("mixprec", "torch", "python"):
            if mode == "python":
                cmd = [args.python, "-c", PYTHON_LOAD, str(args.mib), folder + "/mixprec.pt"]
            else:
                cmd = [args.exe, mode, folder, str(args.mib)]
            run = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if run.returncode != 0:
                print("%s failed (%d): %s" % (mode, run.returncode, run.stderr[-500:]))
                continue
            rows.append(json.loads(run.stdout.strip().splitlines()[-1]))
    size = os.path.getsize(folder + "/mixprec.pt")
    print("checkpoint: %d MiB of parameters, Adam; mixprec.pt %.0f MiB" % (args.mib, size / 2**20))
    print("| loader | extra peak RSS / (model + optimizer state) | seconds |")
    print("|---|---|---|")
    for r in rows:
        print("| %s | %.3f (%.0f MiB) | %.2f |" % (r["loader"], r["extra_peak_bytes"] / r["state_bytes"],
                                              r["extra_peak_bytes"] / 2**20, r["seconds"]))


if __name__ == "__main__":
    main()
