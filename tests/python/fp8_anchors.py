#!/usr/bin/env python3
"""mixprec's FP8 casts against the libraries users move from, run here: ml_dtypes and torchao.

What is compared (the core's CPU kernels, through mixprec_fp8_anchors, bit for bit):
- element conversions against ml_dtypes: every one of the 256 codes decoded, and the cast of
  float32, float64, float16 and bfloat16 values (ties between codes, fp8 subnormals, -0, values
  past the maximum, +-inf, NaN, source subnormals, random floats). ml_dtypes does not saturate
  (past the maximum E4M3 gives NaN, E5M2 inf), so the values are clamped to +-max first, as
  PyTorch's recipes do; float64 is rounded to float32 first, as mixprec's contract and PyTorch's
  x.to(float32) are.
- current scaling against torchao's tensorwise cast (torchao.float8 hp_tensor_to_float8_dynamic:
  amax, then float64 fp8_max / max(amax, 1e-12) stored as float32, optionally
  round_scales_to_power_of_2, then x * scale clamped and cast): the scale and every code.
  mixprec's options: CurrentScaling{eps 1e-12, power_of_2_scales, nan = NanAmax::kPropagate}.
- rowwise scaling against torchao's axiswise cast (hp_tensor_to_float8_dynamic with
  ScalingGranularity.AXISWISE, axiswise_dim -1: one scale per row, torchao's ROWWISE recipe), with
  and without power-of-two scales: every row's scale and every code. mixprec: quantize_fp8_tiles_
  with tiles of 1 x cols, eps 1e-12, kPropagate.
- MXFP8 against torchao's to_mx in ScaleCalculationMode.RCEIL (the mode whose exponent is
  mixprec's: amax / fp8_max rounded up to a power of two; FLOOR, torchao's default, is the OCP
  spec's floor): every E8M0 scale and every code. mixprec: quantize_mxfp8_ with kPropagate.

Where the anchors' own arithmetic differs from the rule they implement, the difference is a named
class, checked exactly, not skipped (docs/fp8.md lists them):
- torchao tensorwise and axiswise, power-of-two scales: exp2(floor(log2(s))) in float32, and log2 of a scale a
  few ulps below 2^k rounds to k, so torchao rounds such a scale UP to 2^k (mixprec clears the
  mantissa: 2^(k-1)). Checked: the two differ by exactly a factor 2 and log2(s) rounds to k.
- torchao to_mx RCEIL (its eager fallback): ceil(log2(amax / fp8_max)) in float32 misses by one
  just above a power of two; a block whose exponent is 0 is scaled by 1, not 2^127; an inf block
  gets 254 and a scale of 2^-127 (mixprec: 0xff, all NaN, as the OCP spec allows). Checked: for
  every block where torchao and mixprec differ, mixprec's exponent is the exact round-up (computed
  here with rationals) and its codes are the exact casts with that exponent.

Exit code: 0 PASS, 1 FAIL, 2 could not run, 77 skipped (python3 has no torch, torchao or
ml_dtypes module). A module that is installed but fails to import is a failure (exit 2).
"""
import argparse
import fractions
import math
import os
import subprocess
import sys
import traceback
import warnings

SKIP = 77
try:
    import numpy as np
    import torch
    import ml_dtypes
    warnings.filterwarnings("ignore")
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
except ModuleNotFoundError as e:
    if e.name is None or e.name.split(".")[0] not in ("numpy", "torch", "ml_dtypes", "torchao"):
        raise
    print(f"SKIP: python3 has no {e.name} module ({e})")
    sys.exit(SKIP)
except Exception:  # installed, but broken
    traceback.print_exc()
    print("ERROR: torch, torchao or ml_dtypes is installed but fails to import (above); not a skip")
    sys.exit(2)

FORMATS = {"e4m3": (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn, 448.0),
           "e5m2": (ml_dtypes.float8_e5m2, torch.float8_e5m2, 57344.0)}
NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
             "bfloat16": ml_dtypes.bfloat16}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Run:
    def __init__(self, exe, folder):
        self.exe, self.folder, self.count = exe, folder, 0
        self.failures, self.compared = 0, 0
        self.classes = {}

    def call(self, op, dtype, fmt, rows, cols, data, extra=()):
        self.count += 1
        src = os.path.join(self.folder, f"in{self.count}.bin")
        dst = os.path.join(self.folder, f"out{self.count}.bin")
        with open(src, "wb") as f:
            f.write(data)
        run = subprocess.run([self.exe, op, dtype, fmt, str(rows), str(cols), src, dst, *extra],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"ERROR: {self.exe} {op} exited {run.returncode}: {run.stderr}")
            sys.exit(2)
        with open(dst, "rb") as f:
            return f.read()

    def fail(self, what):
        self.failures += 1
        if self.failures <= 20:
            print(f"FAIL {what}")

    def note(self, name, count=1):
        self.classes[name] = self.classes.get(name, 0) + count


def same_codes(a, b, fmt):
    """Codes equal, NaN codes compared as NaN (the formats have several)."""
    np_fp8 = FORMATS[fmt][0]
    nan_a = np.isnan(a.view(np_fp8).astype(np.float32))
    nan_b = np.isnan(b.view(np_fp8).astype(np.float32))
    return (nan_a == nan_b) & ((a == b) | nan_a)


# ---- Inputs --------------------------------------------------------------------------------

def fp8_values(fmt):
    """Every finite code's value (float64), sorted, both signs."""
    codes = np.arange(256, dtype=np.uint8).view(FORMATS[fmt][0]).astype(np.float64)
    return np.unique(codes[np.isfinite(codes)])


def cast_inputs(dtype, fmt, rng):
    """Values to cast with scale 1, representable in `dtype` (float64 holds them all)."""
    values = fp8_values(fmt)
    mids = (values[1:] + values[:-1]) / 2  # ties: exact in float32
    fmax = FORMATS[fmt][2]
    specials = [0.0, -0.0, fmax, -fmax, fmax * 1.0001, fmax * 2, 1e30, -1e30, math.inf, -math.inf,
                math.nan, -math.nan, 2.0 ** -130, -(2.0 ** -140), 2.0 ** -10, 2.0 ** -17]
    rand = rng.standard_normal(20000) * np.exp2(rng.uniform(-24, 20, 20000))
    x = np.concatenate([values, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                        specials, rand])
    if dtype == "float64":
        x = np.concatenate([x, mids + 2.0 ** -40 * np.abs(mids)])  # double rounding on the way
    return x.astype(NP_DTYPES[dtype])


def tensors(rng):
    """Tensors for the scaled casts: magnitudes across the range, zero, subnormal, huge."""
    out = []
    for e in (-40, -20, -6, 0, 3, 10, 30):
        out.append(rng.standard_normal((8, 96)) * 2.0 ** e)
    out.append(np.zeros((2, 64)))
    out.append(np.full((1, 32), 2.0 ** -130))       # float32 subnormals only
    out.append(rng.standard_normal((3, 64)) * 1e37)  # near FLT_MAX
    wide = rng.standard_normal((16, 128)) * np.exp2(rng.uniform(-30, 30, (16, 1)))
    out.append(wide)
    return out


# ---- ml_dtypes ---------------------------------------------------------------------------

def check_ml_dtypes(run, rng):
    for fmt, (np_fp8, _, fmax) in FORMATS.items():
        codes = np.arange(256, dtype=np.uint8)
        got = np.frombuffer(run.call("decode", "float32", fmt, 1, 256, codes.tobytes()),
                            dtype=np.float32)
        want = codes.view(np_fp8).astype(np.float32)
        ok = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        run.compared += 256
        for c in np.nonzero(~ok)[0]:
            run.fail(f"decode {fmt} code 0x{c:02x}: mixprec {got[c]!r}, ml_dtypes {want[c]!r}")
        for dtype in NP_DTYPES:
            x = cast_inputs(dtype, fmt, rng)
            got = np.frombuffer(run.call("cast", dtype, fmt, 1, x.size, x.tobytes()),
                                dtype=np.uint8)
            x32 = x.astype(np.float32)  # float64: rounded to float32 first (mixprec, PyTorch)
            want = np.clip(x32, -fmax, fmax).astype(np_fp8).view(np.uint8)
            ok = same_codes(got, want, fmt)
            run.compared += x.size
            nan_sign = np.isnan(x32) & (got != want)
            run.note(f"NaN code differs only in its bits ({fmt})", int(np.count_nonzero(nan_sign)))
            for i in np.nonzero(~ok)[0][:5]:
                run.fail(f"cast {dtype} -> {fmt} of {x[i]!r}: mixprec 0x{got[i]:02x}, ml_dtypes "
                         f"0x{want[i]:02x}")


# ---- torchao tensorwise (current scaling) --------------------------------------------------

def check_tensorwise(run, rng):
    for dtype, tdtype in TORCH_DTYPES.items():
        for fmt, (np_fp8, fp8, fmax) in FORMATS.items():
            for pow2 in (False, True):
                for k, base in enumerate(tensors(rng)):
                    x = torch.from_numpy(base).to(torch.float32).to(tdtype).contiguous()
                    raw = x.view(torch.int16).numpy().tobytes() if tdtype == torch.bfloat16 \
                        else x.numpy().tobytes()
                    out = run.call("current", dtype, fmt, x.shape[0], x.shape[1], raw,
                                   ["1" if pow2 else "0"])
                    scale = np.frombuffer(out[:4], dtype=np.float32)[0]
                    got = np.frombuffer(out[4:], dtype=np.uint8)
                    t = hp_tensor_to_float8_dynamic(x, fp8, LinearMMConfig(),
                                                    round_scales_to_power_of_2=pow2)
                    want_scale = np.float32(t._scale.item())
                    want = t._data.contiguous().view(torch.uint8).numpy().reshape(-1)
                    what = f"tensorwise {dtype} {fmt} pow2={pow2} tensor {k}"
                    run.compared += 1 + got.size
                    if scale.view(np.uint32) == want_scale.view(np.uint32):
                        if not same_codes(got, want, fmt).all():
                            run.fail(f"{what}: same scale {scale!r}, different codes")
                        continue
                    amax = float(x.abs().max().float())
                    if pow2 and np.isfinite(want_scale) and want_scale == 2 * scale:
                        # torchao's exp2(floor(log2(s))): log2 of s just below 2^k rounded to k.
                        exact = np.float32(fmax) / np.float32(max(amax, 1e-12))
                        if np.float32(np.log2(exact)) == np.log2(want_scale) and exact < want_scale:
                            run.note("torchao pow2 scale rounded up (log2 rounding)")
                            continue
                    run.fail(f"{what}: scale mixprec {scale!r}, torchao {want_scale!r} "
                             f"(amax {amax!r})")
        # The power-of-two edge itself, constructed: an amax whose scale is a hair below 2^10.
        amax = np.float32(448.0 / (1024.0 * (1 - 2.0 ** -24)))
        x = torch.full((1, 32), float(amax)).to(tdtype)
        if tdtype == torch.float32:
            out = run.call("current", dtype, "e4m3", 1, 32, x.numpy().tobytes(), ["1"])
            scale = np.frombuffer(out[:4], dtype=np.float32)[0]
            t = hp_tensor_to_float8_dynamic(x, torch.float8_e4m3fn, LinearMMConfig(),
                                            round_scales_to_power_of_2=True)
            if not (scale == 512.0 and t._scale.item() == 1024.0):
                run.fail(f"pow2 edge: mixprec {scale!r} (want 512), torchao {t._scale.item()!r} "
                         "(the documented 1024); docs/fp8.md's row is out of date")
            else:
                run.note("torchao pow2 scale rounded up (log2 rounding), constructed case")


# ---- torchao axiswise (rowwise scaling) ----------------------------------------------------

def check_rowwise(run, rng):
    for dtype, tdtype in TORCH_DTYPES.items():
        for pow2 in (False, True):
            for k, base in enumerate(tensors(rng)):
                x = torch.from_numpy(base).to(torch.float32).to(tdtype).contiguous()
                raw = x.view(torch.int16).numpy().tobytes() if tdtype == torch.bfloat16 \
                    else x.numpy().tobytes()
                rows, cols = x.shape
                out = run.call("rowwise", dtype, "e4m3", rows, cols, raw, ["1" if pow2 else "0"])
                inv = np.frombuffer(out[:4 * rows], dtype=np.float32)
                got = np.frombuffer(out[4 * rows:], dtype=np.uint8).reshape(rows, cols)
                t = hp_tensor_to_float8_dynamic(
                    x, torch.float8_e4m3fn, LinearMMConfig(),
                    scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
                    round_scales_to_power_of_2=pow2)
                want_scale = t._scale.reshape(-1).float().numpy()
                want = t._data.contiguous().view(torch.uint8).numpy().reshape(rows, cols)
                for r in range(rows):
                    run.compared += 1 + cols
                    # mixprec keeps 1 / scale (float32), as TE's scale_inv: compare with torchao's.
                    scale = np.float32(1.0) / inv[r]
                    what = f"rowwise {dtype} pow2={pow2} tensor {k} row {r}"
                    if inv[r] == np.float32(1.0) / want_scale[r] and \
                            same_codes(got[r], want[r], "e4m3").all():
                        continue
                    amax = float(x[r].abs().max().float())
                    exact = np.float32(448.0) / np.float32(max(amax, 1e-12))
                    if pow2 and want_scale[r] == 2 * scale and exact < want_scale[r] \
                            and np.float32(np.log2(exact)) == np.log2(want_scale[r]):
                        run.note("torchao pow2 scale rounded up (log2 rounding)")
                        continue
                    run.fail(f"{what}: scale mixprec {scale!r}, torchao {want_scale[r]!r} "
                             f"(amax {amax!r})")


# ---- torchao to_mx RCEIL -------------------------------------------------------------------

def exact_mx_exponent(amax, fmax):
    """TE's rule with exact rationals: v = amax * float32(1 / fmax) rounded to float32, then the
    smallest e in [0, 254] with 2^(e - 127) >= v (0 for 0)."""
    rcp = np.float32(1.0) / np.float32(fmax)
    v = np.float32(np.float32(amax) * rcp)
    if v == 0:
        return 0
    f = fractions.Fraction(float(v))
    e = 0
    while fractions.Fraction(2) ** (e - 127) < f and e < 254:
        e += 1
    return e


def check_to_mx(run, rng):
    for dtype, tdtype in TORCH_DTYPES.items():
        for fmt, (np_fp8, fp8, fmax) in FORMATS.items():
            for k, base in enumerate(tensors(rng) + [special_blocks(rng)]):
                x = torch.from_numpy(base).to(torch.float32).to(tdtype).contiguous()
                rows, cols = x.shape
                raw = x.view(torch.int16).numpy().tobytes() if tdtype == torch.bfloat16 \
                    else x.numpy().tobytes()
                out = run.call("mx", dtype, fmt, rows, cols, raw)
                nblocks = rows * cols // 32
                got_s = np.frombuffer(out[:nblocks], dtype=np.uint8).reshape(rows, cols // 32)
                got_q = np.frombuffer(out[nblocks:], dtype=np.uint8).reshape(rows, cols)
                s, d = to_mx(x, fp8, 32, ScaleCalculationMode.RCEIL)
                want_s = s.view(torch.uint8).numpy().reshape(rows, cols // 32)
                want_q = d.contiguous().view(torch.uint8).numpy().reshape(rows, cols)
                xf = x.float().numpy()
                for r in range(rows):
                    for b in range(cols // 32):
                        run.compared += 33
                        blk = slice(32 * b, 32 * b + 32)
                        gq, wq = got_q[r, blk], want_q[r, blk]
                        if got_s[r, b] == want_s[r, b] and same_codes(gq, wq, fmt).all():
                            continue
                        block = xf[r, blk]
                        what = f"to_mx {dtype} {fmt} tensor {k} row {r} block {b}"
                        if np.isinf(block).any() and not np.isnan(block).any():
                            if want_s[r, b] == 254 and got_s[r, b] == 255 and (gq == 0x7f).all():
                                run.note("inf block: torchao 254 and 2^-127, mixprec 0xff NaN")
                                continue
                        amax = float(np.abs(block).max())
                        e = exact_mx_exponent(amax, fmax)
                        if got_s[r, b] != e:
                            run.fail(f"{what}: mixprec exponent {got_s[r, b]}, the exact rule's "
                                     f"{e}, torchao's {want_s[r, b]} (amax {amax!r})")
                            continue
                        want_exact = np.clip(block * np.float32(2.0 ** (127 - e)), -fmax, fmax)
                        want_exact = want_exact.astype(np.float32).astype(np_fp8).view(np.uint8)
                        if not same_codes(gq, want_exact, fmt).all():
                            run.fail(f"{what}: mixprec codes are not the exact casts with "
                                     f"exponent {e}")
                            continue
                        run.note("torchao exponent 0 scaled by 1, not 2^127" if want_s[r, b] == 0
                                 else "torchao ceil(log2) off by one")


def special_blocks(rng):
    """Rows of 32: a block just above each power of two times fp8_max (torchao's log2 edge),
    tiny blocks (exponent 0), an inf block, a NaN block."""
    rows = []
    for k in range(-20, 20):
        row = rng.uniform(-1, 1, 32)
        row[0] = 448.0 * 2.0 ** k * (1 + 2.0 ** -22)
        rows.append(row)
    rows.append(np.full(32, 1e-38))
    rows.append(np.concatenate([[math.inf], np.ones(31)]))
    rows.append(np.concatenate([[math.nan], np.ones(31)]))
    return np.array(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", required=True, help="mixprec_fp8_anchors")
    parser.add_argument("--dir", required=True, help="folder for the inputs and outputs")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    torch.set_num_threads(1)
    import torchao
    print(f"torch {torch.__version__}, torchao {torchao.__version__}, ml_dtypes "
          f"{ml_dtypes.__version__}")
    run = Run(args.exe, args.dir)
    rng = np.random.default_rng(31)
    check_ml_dtypes(run, rng)
    check_tensorwise(run, rng)
    check_rowwise(run, rng)
    check_to_mx(run, rng)
    print(f"{run.compared} values compared, {run.failures} failures; documented differences: "
          f"{run.classes}")
    print("PASS" if run.failures == 0 else f"FAIL: {run.failures}")
    return 0 if run.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
