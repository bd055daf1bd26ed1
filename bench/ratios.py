#!/usr/bin/env python3
"""Prints the ratios of one run of mixprec's benchmarks (Google Benchmark JSON files from
unscale_benchmark and optim_benchmark), with the targets of the "CPU speed" issue. Standard library
only. Usage: ratios.py unscale.json [optim.json]"""
import json
import re
import statistics
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = {}  # run name -> {"iter": [(time_ms, bytes/s)], "median": (time_ms, bytes/s)}
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            print(f"warning: {b['name']} failed: {b.get('error_message')}", file=sys.stderr)
            continue
        name = re.sub(r"/(real_time|iterations:\d+)", "", b.get("run_name", b["name"]))
        entry = runs.setdefault(name, {"iter": [], "median": None})
        value = (b["real_time"] * scale[b.get("time_unit", "ns")], b.get("bytes_per_second", 0.0))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                entry["median"] = value
        else:
            entry["iter"].append(value)
    result = {}
    for name, entry in runs.items():
        if entry["iter"]:
            result[name] = (statistics.median(t for t, _ in entry["iter"]),
                            statistics.median(r for _, r in entry["iter"]))
        elif entry["median"]:
            result[name] = entry["median"]
    return data.get("context", {}), result


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    context, r = load(sys.argv[1])
    for extra in sys.argv[2:]:
        r.update(load(extra)[1])
    print(f"host: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, "
          f"load average {context.get('load_avg')}, mixprec threads "
          f"{context.get('mixprec_threads')}, SIMD target {context.get('mixprec_simd_target')}")
    print()
    print(f"{'benchmark':34} {'time ms':>10} {'GB/s':>8}")
    for name, (t, bps) in sorted(r.items()):  # interleaved runs come in random order
        print(f"{name.replace('BM_', ''):34} {t:10.2f} {bps / 1e9:8.2f}")
    print()

    def bw(name):
        return r[f"BM_{name}"][1] if f"BM_{name}" in r else None

    def time(name):
        return r[f"BM_{name}"][0] if f"BM_{name}" in r else None

    def ratio(a, b):
        return a / b if a is not None and b else None

    rows = [
        # (what, value, target description, predicate)
        ("fp32 64M vs in-place scale loop (bandwidth)",
         ratio(bw("mixprec_fp32_64M"), bw("scale_loop_fp32_64M")), ">= 0.9x", lambda v: v >= 0.9),
        ("fp32 64M vs memcpy (bandwidth)",
         ratio(bw("mixprec_fp32_64M"), bw("memcpy_fp32_64M")), "(ceiling)", None),
        ("fp32 64M speed-up over naive LibTorch",
         ratio(time("torch_naive_fp32_64M"), time("mixprec_fp32_64M")), ">= 4x", lambda v: v >= 4),
        ("fp32 4096x16K speed-up over naive LibTorch",
         ratio(time("torch_naive_fp32_4096x16K"), time("mixprec_fp32_4096x16K")), ">= 4x",
         lambda v: v >= 4),
        ("fp32 64M speed-up over _foreach_mul_+isfinite",
         ratio(time("torch_foreach_fp32_64M"), time("mixprec_fp32_64M")), "(info)", None),
        ("fp32 4096x16K speed-up over _foreach_mul_+isfinite",
         ratio(time("torch_foreach_fp32_4096x16K"), time("mixprec_fp32_4096x16K")), "(info)", None),
        ("time 4096x16K / time 1x64M (fp32)",
         ratio(time("mixprec_fp32_4096x16K"), time("mixprec_fp32_64M")), "<= 1.3x",
         lambda v: v <= 1.3),
        ("fp16 vs fp32 per byte (bandwidth)",
         ratio(bw("mixprec_fp16_64M"), bw("mixprec_fp32_64M")), ">= 0.8x", lambda v: v >= 0.8),
        ("bf16 vs fp32 per byte (bandwidth)",
         ratio(bw("mixprec_bf16_64M"), bw("mixprec_fp32_64M")), ">= 0.8x", lambda v: v >= 0.8),
        ("check only (inv_scale 1) vs unscale, fp32 64M",
         ratio(bw("mixprec_check_only_fp32_64M"), bw("mixprec_fp32_64M")), "(info)", None),
        ("diagnostics scan vs unscale (time, overflow steps only)",
         ratio(time("diagnose_scan_fp32_64M"), time("mixprec_fp32_64M")), "(info)", None),
        ("AdamW step: torch::optim::AdamW+unscale_ / fused+scaler",
         ratio(time("TorchAdamWWithUnscale"), time("FusedAdamWWithScaler")), ">= 4x",
         lambda v: v >= 4),
        ("fused AdamW+scaler vs ATen copy_ of its bytes (bandwidth)",
         ratio(bw("FusedAdamWWithScaler"), bw("CopyCeiling")), "(ceiling)", None),
        # memcpy is credited its size once but moves it twice (read + write), as the AdamW
        # benchmarks are credited their full traffic: compare traffic with traffic.
        ("fused AdamW+scaler traffic vs memcpy traffic",
         ratio(bw("FusedAdamWWithScaler"), 2 * bw("memcpy_fp32_64M") if bw("memcpy_fp32_64M") else None),
         "(ceiling)", None),
    ]
    print(f"{'ratio':52} {'measured':>9} {'target':>9}  met")
    for what, value, target, ok in rows:
        shown = "n/a" if value is None else f"{value:.3f}x"
        met = "" if ok is None or value is None else ("yes" if ok(value) else "NO")
        print(f"{what:52} {shown:>9} {target:>9}  {met}")


if __name__ == "__main__":
    main()
