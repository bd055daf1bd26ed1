#!/usr/bin/env python3
"""Peak memory and time of saving and loading a checkpoint of a model and its Adam optimizer
(bench/checkpoint_io.cpp), each operation in a fresh process, alternating, for
docs/performance.md: mixprec::save_checkpoint / load_checkpoint, LibTorch's torch::save /
torch::load of its own archives, Python's torch.save / torch.load (+ load_state_dict) of the same
state, and the disk's sequential write speed (a plain write loop + fsync of as many bytes).

    python3 bench/checkpoint_io.py --exe build/bench/checkpoint_io --mib 341 1365 [--runs 2]

(341 MiB of parameters make a 1 GiB checkpoint with Adam's two moments; 1365, 4 GiB.) Python's
side needs a torch (the current-PyTorch venv's); without one its rows are left out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PYTHON = r"""
import json, os, sys, time, torch
op, mib, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
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
if op == "save":
    path = os.path.join(folder, "python.pt")
    torch.save({"model": model.state_dict(), "optimizer": adam.state_dict(),
                "scaler": scaler.state_dict()}, path)
    with open(path, "rb") as f:  # as durable as mixprec's: the data on the disk
        os.fsync(f.fileno())
    who = "Python torch.save + fsync"
else:
    c = torch.load(os.path.join(folder, "mixprec.pt"))  # weights_only, torch 2.6's default
    model.load_state_dict(c["model"])
    adam.load_state_dict(c["optimizer"])
    scaler.load_state_dict(c["scaler"])
    del c
    who = "Python torch.load"
seconds = time.perf_counter() - t0
print(json.dumps({"op": op, "who": who + " " + torch.__version__.split("+")[0],
                  "state_bytes": 3 * mib * 2**20, "extra_peak_bytes": status("VmHWM") - before,
                  "seconds": seconds}))
"""


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print("%s failed (%d): %s" % (" ".join(cmd[:2]), out.returncode, out.stderr[-500:]))
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--mib", type=int, nargs="+", default=[341])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="mixprec_checkpoint_io_")
    os.makedirs(folder, exist_ok=True)
    for mib in args.mib:
        rows = []
        for _ in range(args.runs):
            for mode in ("disk", "save-mixprec", "save-torch", "save-python", "load-mixprec",
                         "load-torch", "load-python"):
                if mode.endswith("python"):
                    cmd = [args.python, "-c", PYTHON, mode[:4], str(mib), folder]
                else:
                    cmd = [args.exe, mode, folder, str(mib)]
                row = run(cmd)
                if row:
                    rows.append(row)
        size = os.path.getsize(os.path.join(folder, "mixprec.pt"))
        print("\n%d MiB of parameters with Adam: mixprec.pt %.2f GiB" % (mib, size / 2**30))
        print("| operation | extra peak RSS / checkpoint | seconds |")
        print("|---|---|---|")
        for r in rows:
            print("| %s | %.3f (%.0f MiB) | %.2f |" % (
                r["who"], r["extra_peak_bytes"] / r["state_bytes"], r["extra_peak_bytes"] / 2**20,
                r["seconds"]))
        for name in ("mixprec.pt", "model.pt", "optimizer.pt", "python.pt"):
            if os.path.exists(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))


if __name__ == "__main__":
    main()
