#!/usr/bin/env python3
"""The delayed-scaling rule of mixprec's core against Transformer Engine's, bit for bit.

Why: core::delayed_scaling_update_ (include/mixprec/core/fp8.h, src/core/fp8_ops.h) follows TE's
DelayedScaling update as TE's fused kernel runs it, the default path of TE users
(transformer_engine/common/recipe/delayed_scaling.cu, kernel_bulk; NVIDIA/TransformerEngine).
This test writes that kernel's rule here in float32 torch ops, per tensor (column):
  last = h[0]; a tensor whose last is 0 is left alone: no roll, the same scale (PR #825's kernel)
  amax = fmaxf over the history, NaN slots skipped ("max"; torch.fmax) or last ("most_recent")
  roll: h[i] = h[i + 1], h[H - 1] = last, h[0] = 0
  scale = (fp8_max * 2**-margin) / amax, one float32 division (scaled_max / amax); the old
          scale where amax <= 0 or is not finite; FLT_MAX where it is inf (TE PR #786)
  scale_inv = 1 / scale
TE's unfused Python path (transformer_engine/pytorch/quantization.py, _update_amax_history,
_default_get_amax_and_update_history, _default_sf_compute) differs in three places, each
modelled here as an option: it rolls a history whose last amax is 0, torch.max propagates NaN
(mixprec's NanAmax::kPropagate, torchao's choice, runs against it), and it divides twice,
(fp8_max / amax) / 2**margin. mixprec follows the fused kernel; the NaN policy is the recipe's.
A tensor not cast in an iteration is not passed to the update (TE PR #825's fix, which the
core's contract adopts). It runs both on scenarios of per-iteration amaxes and compares every
scale, scale_inv and history slot exactly (float32 bit patterns, NaN included).

The scenarios (fixed seed, written to --dir for mixprec_fp8_delayed to read): six tensors (E4M3
and E5M2, as two HYBRID modules), amaxes spread over 2^-24..2^24 with 0, inf, NaN, subnormal and
"tiny" amaxes (448 / amax or 57344 / amax overflows float32: the scale becomes FLT_MAX), a spike
that must stay in the window for exactly history_len updates, and tensors not cast in some
iterations (gradient accumulation, a module that runs every other step, one that starts late).
Configurations: history_len 1, 4, 16 over 64 iterations and 1024 over 1100 (the spike leaves
the window), margin 0 and 2, "max" and "most_recent", histories laid out as TE's [H, N] buffer
(stride N) and as one buffer per tensor (stride 1).

The division is torch.div of two float32 tensors, one correctly rounded division, as the fused
kernel's (recipe_common.cuh: __fdiv_rn). In eager PyTorch, `python_float / tensor` is
tensor.reciprocal() * python_float (torch/_tensor.py, __rdiv__): two roundings, which differs in
the last bit for some amaxes.

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (python3 has no torch module). A torch that
is installed but fails to import is a failure (exit 2), never a skip (see differential_cpu.py).
"""
import argparse
import os
import random
import struct
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

SEED = 825
FORMATS = ["e4m3", "e4m3", "e5m2", "e4m3", "e4m3", "e5m2"]
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FLT_MAX = torch.finfo(torch.float32).max
SPIKE_AT = 3  # tensor 0's spike: in the window of updates SPIKE_AT .. SPIKE_AT + H - 1
SMALL = {"iterations": 64, "lengths": [1, 4, 16], "every": 1}
LARGE = {"iterations": 1100, "lengths": [1024], "every": 128}


# ---- Transformer Engine's fused kernel (common/recipe/delayed_scaling.cu), float32 torch ops ----

def _history_amax(amax_history, amax_compute_algo, nan):
    """The amax of each column: the fused kernel's fmaxf over the whole history ("max", NaN slots
    skipped; a column of NaNs only gives NaN here and 0 there, which keep the scale alike), or
    torch.max's NaN-propagating one (nan == "propagate"); or slot 0 ("most_recent")."""
    if amax_compute_algo != "max":
        return amax_history[0].clone()
    if nan == "ignore":
        amax = amax_history[0].clone()
        for row in amax_history[1:]:
            amax = torch.fmax(amax, row)
        return amax
    return torch.max(amax_history, dim=0).values


def _roll(amax_history):
    """Slot i takes slot i + 1, the last slot takes slot 0; then slot 0 is zeroed."""
    if amax_history.shape[0] > 1:
        amax_history.copy_(torch.roll(amax_history, -1, 0))
    amax_history[0].fill_(0.0)


def _scale(amax, scale, fp8_max, margin):
    """scaled_max / amax, scaled_max = fp8_max * 2**-margin (exact in float32). fp8_max: a float32
    tensor of each column's format maximum (the columns mix E4M3 and E5M2)."""
    sf = torch.div(fp8_max * 2.0**-margin, amax)
    sf = torch.where(amax > 0.0, sf, scale)
    sf = torch.where(torch.isfinite(amax), sf, scale)
    return torch.where(torch.isinf(sf), torch.full_like(sf, FLT_MAX), sf)


def _amax_and_scale_update(amax_history, scale, scale_inv, fp8_max, algo, margin, nan):
    """The fused kernel's update of one set of columns: those whose slot 0 is 0 are skipped."""
    seen = amax_history[0] != 0.0  # NaN != 0: a NaN amax rolls
    amax = _history_amax(amax_history, algo, nan)
    new_scale = _scale(amax, scale, fp8_max, margin)
    rolled = amax_history.clone()
    _roll(rolled)
    amax_history.copy_(torch.where(seen, rolled, amax_history))
    scale.copy_(torch.where(seen, new_scale, scale))
    scale_inv.copy_(torch.where(seen, 1.0 / scale, scale_inv))


def reference(amaxes, cast, history_len, margin, algo, nan, stats):
    """Yields (iteration, history [H, N], scale [N], scale_inv [N]) after each update. Only the
    columns cast in an iteration are updated (TE PR #825)."""
    n = len(FORMATS)
    history = torch.zeros(history_len, n, dtype=torch.float32)
    scale = torch.ones(n, dtype=torch.float32)
    scale_inv = torch.ones(n, dtype=torch.float32)
    fp8_max = torch.tensor([FP8_MAX[f] for f in FORMATS], dtype=torch.float32)
    for it, (row, used) in enumerate(zip(amaxes, cast)):
        idx = torch.tensor([j for j in range(n) if used[j]], dtype=torch.long)
        stats["not_cast"] += n - len(idx)
        if len(idx):
            history[0, idx] = bits_to_floats([row[j] for j in idx.tolist()])
            h, s, si = history[:, idx].clone(), scale[idx].clone(), scale_inv[idx].clone()
            stats["nan_in_window"] += int(torch.isnan(h).any(dim=0).sum())
            stats["inf_in_window"] += int(torch.isinf(h).any(dim=0).sum())
            stats["zero_window"] += int((h == 0).all(dim=0).sum())
            stats["zero_amax"] += int((h[0] == 0).sum())
            _amax_and_scale_update(h, s, si, fp8_max[idx], algo, margin, nan)
            stats["flt_max_scale"] += int((s == FLT_MAX).sum())
            history[:, idx], scale[idx], scale_inv[idx] = h, s, si
        yield it, history, scale, scale_inv


# ---- Scenarios -------------------------------------------------------------------------------

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_to_floats(bits):
    signed = [b - (1 << 32) if b >= (1 << 31) else b for b in bits]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def floats_to_bits(t):
    return [v & 0xFFFFFFFF for v in t.contiguous().view(torch.int32).tolist()]


def tiny_amaxes():
    """float32 amaxes at the edge where fp8_max / amax overflows (for each format): the smallest
    amax with a finite scale, the one below it, and subnormals."""
    out = []
    for fmax in FP8_MAX.values():
        edge = torch.div(torch.tensor(fmax), torch.tensor(FLT_MAX))  # float32
        below = torch.nextafter(edge, torch.tensor(0.0))
        above = torch.nextafter(edge, torch.tensor(1.0))
        out += [f32_bits(float(v)) for v in (edge, below, above)]
    return out + [0x00000001, 0x00000400, 0x007FFFFF, 0x00800000]


def generate(rng, iterations):
    """Per iteration, per tensor: the amax bits, and whether it was cast."""
    specials = [0x00000000, 0x7F800000, 0x7FC00000, 0xFFC00000, 0x7F7FFFFF]  # 0 inf NaN -NaN max
    tiny = tiny_amaxes()
    amaxes, cast = [], []
    for it in range(iterations):
        row, used = [], []
        for j in range(len(FORMATS)):
            v = f32_bits(2.0 ** rng.uniform(-24, 24))
            if j == 0:  # a spike, then values far below it: the window's length shows
                v = f32_bits(2.0 ** 20) if it == SPIKE_AT else f32_bits(rng.uniform(0.25, 1.0))
            elif j == 2 and rng.random() < 0.25:
                v = rng.choice(specials)
            elif j == 3 and rng.random() < 0.4:
                v = rng.choice(tiny)
            elif rng.random() < 0.04:
                v = rng.choice(specials + tiny)
            if j == 4 and it == iterations // 2:
                v = 0  # its first amax is 0: an all-zero window keeps the initial scale
            is_cast = {1: it % 3 != 2,              # not cast every third iteration
                       4: it >= iterations // 2,    # starts late
                       5: rng.random() < 0.7}.get(j, True)
            row.append(v)
            used.append(is_cast)
        amaxes.append(row)
        cast.append(used)
    return amaxes, cast


def write_scenario(path, amaxes, cast, configs):
    with open(path, "w") as f:
        f.write(f"tensors {len(FORMATS)}\nformats {' '.join(FORMATS)}\n")
        for (h, margin, algo, layout, every, nan) in configs:
            f.write(f"config {h} {margin} {algo} {layout} {every} {nan}\n")
        for it, (row, used) in enumerate(zip(amaxes, cast)):
            cells = [f"{b:08x}" if u else "-" for b, u in zip(row, used)]
            f.write(f"it {it} {' '.join(cells)}\n")


def read_output(text):
    """{config: {(iteration, tensor): [scale, scale_inv, history...] as ints}}"""
    out, current = {}, None
    for line in text.splitlines():
        words = line.split()
        if words[0] == "config":
            current = out.setdefault(int(words[1]), {})
        elif words[0] == "u":
            current[(int(words[1]), int(words[2]))] = [int(w, 16) for w in words[3:]]
    return out


def show(bits):
    return f"{bits:08x} ({struct.unpack('<f', struct.pack('<I', bits))[0]!r})"


def check_scenario(exe, folder, name, rng, spec):
    amaxes, cast = generate(rng, spec["iterations"])
    configs = []
    for h in spec["lengths"]:
        for margin in (0, 2):
            for algo in ("max", "most_recent"):
                for nan in ("ignore", "propagate"):
                    layout = "rows" if (len(configs) % 2 == 0) else "columns"
                    configs.append((h, margin, algo, layout, spec["every"], nan))
    path = os.path.join(folder, f"{name}.txt")
    write_scenario(path, amaxes, cast, configs)
    run = subprocess.run([exe, path], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"ERROR: {exe} {path} exited {run.returncode}: {run.stderr}")
        sys.exit(2)
    got = read_output(run.stdout)
    failures, compared = 0, 0
    stats = {k: 0 for k in ("not_cast", "nan_in_window", "inf_in_window", "zero_window",
                            "zero_amax", "flt_max_scale")}
    for k, (h, margin, algo, layout, every, nan) in enumerate(configs):
        label = f"{name} config {k} (history_len {h}, margin {margin}, {algo}, {layout}, {nan})"
        scale0 = []
        for it, history, scale, scale_inv in reference(amaxes, cast, h, margin, algo, nan, stats):
            with_history = it % every == every - 1 or it + 1 == len(amaxes)
            s_bits, si_bits = floats_to_bits(scale), floats_to_bits(scale_inv)
            h_bits = [floats_to_bits(history[:, j]) for j in range(len(FORMATS))] \
                if with_history else None
            scale0.append(s_bits[0])
            for j in range(len(FORMATS)):
                want = [s_bits[j], si_bits[j]] + (h_bits[j] if with_history else [])
                have = got.get(k, {}).get((it, j))
                compared += 1
                if have == want:
                    continue
                failures += 1
                if failures <= 10:
                    print(f"FAIL {label}: iteration {it} tensor {j} ({FORMATS[j]}, amax "
                          f"{show(amaxes[it][j]) if cast[it][j] else 'not cast'})")
                    if have is None:
                        print("  no output line")
                        continue
                    for field, w, g in zip(["scale", "scale_inv"] + [f"history[{i}]" for i in
                                                                      range(h)], want, have):
                        if w != g:
                            print(f"  {field}: TE rule {show(w)}, mixprec {show(g)}")
        # Not vacuous: with "max", tensor 0's spike sets its scale for exactly h updates.
        if algo == "max" and scale0[SPIKE_AT + h - 1] == scale0[SPIKE_AT + h]:
            print(f"FAIL {label}: the spike did not leave the window after {h} updates")
            failures += 1
    for key, count in stats.items():
        if count == 0:
            print(f"FAIL {name}: vacuous scenario, no case of {key}")
            failures += 1
    print(f"{name}: {len(configs)} configurations x {len(amaxes)} iterations x {len(FORMATS)} "
          f"tensors, {compared} updates compared bit for bit, {failures} failures; cases: {stats}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", required=True, help="mixprec_fp8_delayed")
    parser.add_argument("--dir", required=True, help="folder for the scenarios")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    torch.set_num_threads(1)
    rng = random.Random(SEED)
    failures = check_scenario(args.exe, args.dir, "small", rng, SMALL)
    failures += check_scenario(args.exe, args.dir, "large", rng, LARGE)
    print("PASS" if failures == 0 else f"FAIL: {failures}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
