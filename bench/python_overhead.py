#!/usr/bin/env python3
"""GradScaler's per-iteration overhead in Python, for bench/ratios.py: torch.amp.GradScaler("cpu")
on seed example 3's model (Linear(10, 1) + SGD, lr 0.01): the time of scale + step + update minus
the time of optimizer.step() alone, as bench/optim_benchmark.cpp's BM_tiny_* rows measure mixprec.
Needs torch >= 2.4 (exits 77 without it). Prints one JSON object: microseconds per iteration."""
import json
import sys
import timeit

try:
    import torch  # a torch that is installed but broken raises: a failure, not a skip
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    print("python_overhead.py: needs torch >= 2.4 (torch.amp.GradScaler('cpu'))", file=sys.stderr)
    sys.exit(77)
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
    print("python_overhead.py: needs torch >= 2.4 (torch.amp.GradScaler('cpu'))", file=sys.stderr)
    sys.exit(77)


def main():
    torch.set_num_threads(2)
    model = torch.nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    scaler = torch.amp.GradScaler("cpu")
    loss = torch.ones(())

    def iteration():
        scaler.scale(loss)
        scaler.step(optimizer)
        scaler.update()

    def best_us(fn, number=2000, repeat=7):
        fn()
        return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

    step = best_us(optimizer.step)
    whole = best_us(iteration)
    print(json.dumps({"torch": torch.__version__, "optimizer_step_us": step,
                      "scaler_iteration_us": whole, "overhead_us": whole - step}))


if __name__ == "__main__":
    main()
