#!/usr/bin/env python3
"""mixprec's FP4 casts against the libraries users move from, run here: ml_dtypes and torchao.

What is compared (the core's CPU kernels, through mixprec_fp4_anchors, bit for bit):
- the E2M1 cast against ml_dtypes' float4_e2m1fn: every float32 bit pattern (2^32), every
  float16 and every bfloat16 pattern;
- the E2M1 cast against torchao's f32_to_f4_unpacked on edge and random floats;
- NVFP4 against torchao's nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax)) (two-level
  scaling; its packing is pack_uint4): every block scale and every packed byte;
- MXFP4 against torchao's to_mx(x, float4_e2m1fn_x2, 32, FLOOR and RCEIL): every E8M0 scale and
  every packed byte.

Where an anchor differs from Transformer Engine's rule, which mixprec follows, or from its own
rule, the difference is a named class, counted, and checked against the rule written out here
(numpy float32 arithmetic, ml_dtypes' round-to-nearest-even casts, exact rationals):
- NaN elements: mixprec writes 0x7 (TE's kernels); ml_dtypes gives a zero with the sign flipped,
  torchao a code that depends on the NaN's payload.
- torchao NVFP4 minimum block scale 2^-6 (0x08): where TE's scale is below it (zero, tiny blocks).
- torchao NVFP4 order of operations (block_amax / 6 / (amax / 2688)): scales one code apart.
- the codes of a block whose scale differs: checked as TE's cast with TE's scale.
- an all-zero tensor: torchao's amax 0 gives NaN scales; TE's rule gives scale 0 and code 0.
- MXFP4 blocks with scale 255 (NaN): mixprec writes 0x7 everywhere; they dequantize to NaN.
- torchao RCEIL's float32 log2: one too low just above some powers of two; mixprec's exponent is
  checked as the exact ceil(log2(amax / 6)) and its codes as the casts with it.

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
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, pack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
except ModuleNotFoundError as e:
    if e.name is None or e.name.split(".")[0] not in ("numpy", "torch", "ml_dtypes", "torchao"):
        raise
    print(f"SKIP: python3 has no {e.name} module ({e})")
    sys.exit(SKIP)
except Exception:  # installed, but broken
    traceback.print_exc()
    print("ERROR: torch, torchao or ml_dtypes is installed but fails to import (above); not a skip")
    sys.exit(2)

F32 = np.float32
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Run:
    def __init__(self, exe, folder):
        self.exe, self.folder, self.count = exe, folder, 0
        self.failures, self.compared, self.classes = 0, 0, {}

    def call(self, args, data):
        self.count += 1
        src = os.path.join(self.folder, f"in{self.count}.bin")
        dst = os.path.join(self.folder, f"out{self.count}.bin")
        with open(src, "wb") as f:
            f.write(data)
        run = subprocess.run([self.exe, *[str(a) for a in args], src, dst], capture_output=True,
                             text=True)
        if run.returncode != 0:
            print(f"ERROR: {self.exe} {args} exited {run.returncode}: {run.stderr}")
            sys.exit(2)
        with open(dst, "rb") as f:
            return f.read()

    def fail(self, what):
        self.failures += 1
        if self.failures <= 20:
            print(f"FAIL {what}")

    def note(self, name, count=1):
        if count:
            self.classes[name] = self.classes.get(name, 0) + int(count)


def e2m1(x):
    """TE's cast written with ml_dtypes (which agrees on every finite value): float32 -> codes,
    NaN -> 0x7."""
    x = np.asarray(x, dtype=F32)
    codes = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    return np.where(np.isnan(x), np.uint8(7), codes).astype(np.uint8)


def unpack(packed):
    p = np.asarray(packed, dtype=np.uint8).reshape(-1)
    return np.stack([p & 0xF, p >> 4], axis=-1).reshape(-1)


# ---- Elements ------------------------------------------------------------------------------

def check_every_float32(run):
    chunk = 1 << 24
    proc = subprocess.Popen([run.exe, "sweep", "0", str(1 << 32)], stdout=subprocess.PIPE)
    nan_count = 0
    base = np.arange(chunk, dtype=np.uint32)
    bits = np.empty(chunk, dtype=np.uint32)
    got = np.empty(chunk, dtype=np.uint8)
    for start in range(0, 1 << 32, chunk):
        if proc.stdout.readinto(memoryview(got)) != chunk:
            print("ERROR: the sweep's output is short")
            sys.exit(2)
        np.add(base, np.uint32(start), out=bits)
        x = bits.view(F32)
        want = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
        nan = (bits & 0x7FFFFFFF) > 0x7F800000
        bad = (got != want) & ~nan
        if bad.any() or (got[nan] != 7).any():
            i = int(np.flatnonzero(bad | (nan & (got != 7)))[0])
            run.fail(f"float32 0x{int(bits[i]):08x}: mixprec {got[i]}, ml_dtypes {want[i]}")
        nan_count += int(nan.sum())
        run.compared += chunk
    if proc.wait() != 0:
        print("ERROR: the sweep failed")
        sys.exit(2)
    run.note("NaN element: mixprec 0x7, ml_dtypes a zero (float32 patterns)", nan_count)


def check_half_patterns(run):
    for dtype in ("float16", "bfloat16"):
        x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(NP_DTYPES[dtype])
        got = np.frombuffer(run.call(["cast", dtype], x.tobytes()), dtype=np.uint8)
        want = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
        nan = np.isnan(x.astype(F32))
        if ((got != want) & ~nan).any() or (got[nan] != 7).any():
            run.fail(f"{dtype} patterns differ from ml_dtypes")
        run.compared += x.size
        run.note(f"NaN element: mixprec 0x7, ml_dtypes a zero ({dtype} patterns)", nan.sum())


def check_torchao_cast(run, rng):
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
    x = np.concatenate([mids, np.nextafter(mids, F32(0)), np.nextafter(mids, F32(9)),
                        [0.0, -0.0, 6.0, 7.0, 1e30, np.inf, -np.inf, 1e-40, -1e-45],
                        rng.standard_normal(200000) * np.exp2(rng.uniform(-6, 6, 200000))])
    x = np.concatenate([x, -x, [np.nan]]).astype(F32)
    got = np.frombuffer(run.call(["cast", "float32"], x.tobytes()), dtype=np.uint8)
    want = f32_to_f4_unpacked(torch.from_numpy(x)).numpy()
    nan = np.isnan(x)
    if ((got != want) & ~nan).any() or (got[nan] != 7).any():
        run.fail("E2M1 cast differs from torchao's f32_to_f4_unpacked")
    run.compared += x.size
    run.note("NaN element: mixprec 0x7, torchao by payload", nan.sum())


# ---- NVFP4 ---------------------------------------------------------------------------------

def te_nvfp4(x, amax):
    """TE >= 2.14's block scales and codes for rows of x (float32), in numpy float32."""
    with np.errstate(all="ignore"):
        s_enc = np.fmin(F32(2688.0) / F32(amax), np.finfo(F32).max)
        if amax == 0 or s_enc == 0:
            s_enc = F32(1.0)
        s_dec = F32(1.0) / s_enc
        blocks = x.reshape(-1, 16)
        block_amax = np.fmax.reduce(np.abs(blocks), axis=1)  # fmax skips NaN
        block_amax = np.where(np.isnan(block_amax), F32(0), block_amax).astype(F32)
        factor = F32(s_enc * F32(F32(1.0) / F32(6.0)))
        scaled = np.fmin(block_amax * factor, np.finfo(F32).max)
        scales = np.minimum(scaled, F32(448)).astype(ml_dtypes.float8_e4m3fn)
        encode = np.fmin(F32(1.0) / (scales.astype(F32) * s_dec), np.finfo(F32).max).astype(F32)
        codes = e2m1(blocks * encode[:, None])
    return scales.view(np.uint8), codes.reshape(-1)


def check_nvfp4(run, x, what):
    rows, cols = x.shape
    dtype = "bfloat16" if x.dtype == torch.bfloat16 else "float32"
    out = run.call(["nvfp4", dtype, rows, cols], x.contiguous().view(torch.uint8).numpy().tobytes())
    amax = np.frombuffer(out[:4], dtype=F32)[0]
    nblocks = x.numel() // 16
    got_s = np.frombuffer(out[4:4 + nblocks], dtype=np.uint8)
    got_q = unpack(np.frombuffer(out[4 + nblocks:], dtype=np.uint8))
    xf = x.float()
    torch_amax = torch.nan_to_num(xf.abs(), nan=0.0).max()
    if amax != F32(torch_amax.item()):
        run.fail(f"{what}: amax {amax} != {torch_amax.item()}")
    ao_s, ao_q = nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch_amax))
    ao_s = ao_s.view(torch.uint8).numpy().reshape(-1)
    ao_q = unpack(ao_q.numpy())
    te_s, te_q = te_nvfp4(xf.numpy(), amax)
    run.compared += nblocks + x.numel()
    nan = np.isnan(xf.numpy().reshape(-1))
    if amax == 0:
        if (got_s != 0).any() or (got_q != 0).any():
            run.fail(f"{what}: an all-zero tensor must give scale 0 and code 0 (TE)")
        run.note("all-zero tensor: torchao NaN scales, TE scale 0", nblocks)
        return
    if (got_s != te_s).any() or ((got_q != te_q) & ~nan).any() or (got_q[nan] != 7).any():
        run.fail(f"{what}: mixprec differs from TE's rule written out")
    same = got_s == ao_s
    # torchao takes the block amax with NaN (torch.amax): a NaN scale (0x7f); TE skips NaN.
    nan_block = ~same & nan.reshape(-1, 16).any(axis=1) & ((ao_s & 0x7F) == 0x7F)
    # amax < 2688 / FLT_MAX: TE caps S_enc at FLT_MAX; torchao's amax / 2688 is a subnormal.
    capped = ~same & ~nan_block & bool(np.isinf(F32(2688.0) / F32(amax)))
    low = ~same & ~nan_block & ~capped & (ao_s == 0x08) & (got_s < 0x08)
    order = ~same & ~nan_block & ~capped & ~low & (np.abs(got_s.astype(int) - ao_s.astype(int)) == 1)
    other = ~same & ~nan_block & ~capped & ~low & ~order
    if other.any():
        b = int(np.flatnonzero(other)[0])
        run.fail(f"{what}: block {b} scale mixprec 0x{got_s[b]:02x}, torchao 0x{ao_s[b]:02x}")
    run.note("torchao NVFP4 NaN in a block: NaN scale (TE skips NaN)", nan_block.sum())
    run.note("torchao NVFP4 tiny amax: subnormal per-tensor scale (TE caps S_enc at FLT_MAX)",
             capped.sum())
    run.note("torchao NVFP4 minimum scale 2^-6 (TE's below it)", low.sum())
    run.note("torchao NVFP4 order of operations (scale one code apart)", order.sum())
    element_same = np.repeat(same, 16)
    bad = element_same & ~nan & (got_q != ao_q)
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        run.fail(f"{what}: element {e} code mixprec {got_q[e]}, torchao {ao_q[e]} (same scale)")
    run.note("NaN element: mixprec 0x7, torchao by payload", (nan & element_same).sum())


def nvfp4_inputs(rng):
    def t(a, dtype=torch.float32):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=F32)).to(dtype)
    z = rng.standard_normal((64, 256))
    wide = rng.standard_normal((64, 256)) * np.exp(3 * rng.standard_normal((64, 256)))
    special = wide.copy()
    special[0, :16] = 0
    special[1, :16] *= 1e-30
    special[2, 5] = np.nan
    special[3, 16:32] = -0.0
    cases = [("randn", t(z)), ("randn bf16", t(z, torch.bfloat16)), ("x exp(3z)", t(wide)),
             ("x exp(3z) bf16", t(wide, torch.bfloat16)), ("special blocks", t(special)),
             ("zeros", t(np.zeros((4, 32)))), ("huge", t(z * 1e36)), ("tiny", t(z * 1e-36))]
    return cases


# ---- MXFP4 ---------------------------------------------------------------------------------

def exact_rceil(amax):
    if math.isnan(amax):
        return 255
    if math.isinf(amax):
        return 254
    d = fractions.Fraction(float(F32(amax) / F32(6.0)))
    if d == 0:
        return 0
    e = math.floor(math.log2(d))
    while fractions.Fraction(2) ** e < d:
        e += 1
    while e > -200 and fractions.Fraction(2) ** (e - 1) >= d:
        e -= 1
    return max(-127, min(127, e)) + 127


def check_mx(run, x, mode, what):
    rows, cols = x.shape
    dtype = "bfloat16" if x.dtype == torch.bfloat16 else "float32"
    out = run.call(["mx", dtype, rows, cols, mode], x.contiguous().view(torch.uint8).numpy().tobytes())
    nblocks = x.numel() // 32
    got_s = np.frombuffer(out[:nblocks], dtype=np.uint8)
    got_q = unpack(np.frombuffer(out[nblocks:], dtype=np.uint8))
    ao_mode = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    ao_s, ao_q = to_mx(x, torch.float4_e2m1fn_x2, 32, ao_mode)
    ao_s = ao_s.view(torch.uint8).numpy().reshape(-1)
    ao_q = unpack(ao_q.view(torch.uint8).numpy())
    blocks = x.float().numpy().reshape(-1, 32)
    run.compared += nblocks + x.numel()
    for b in range(nblocks):
        gq, aq = got_q[32 * b:32 * b + 32], ao_q[32 * b:32 * b + 32]
        if got_s[b] == ao_s[b] and got_s[b] != 255:
            if (gq != aq).any():
                run.fail(f"{what} {mode}: block {b} codes differ with the same scale {got_s[b]}")
            continue
        if got_s[b] == 255 == ao_s[b]:
            if (gq != 7).any():
                run.fail(f"{what} {mode}: NaN block {b} codes are not 0x7")
            run.note("MXFP4 NaN block (255): mixprec codes 0x7, torchao's vary")
            continue
        amax = float(np.abs(blocks[b]).max())
        e = exact_rceil(amax) if mode == "rceil" else None
        if e is None or got_s[b] != e:
            run.fail(f"{what} {mode}: block {b} scale mixprec {got_s[b]}, torchao {ao_s[b]}, "
                     f"exact {e} (amax {amax!r})")
            continue
        multiplier = F32(1.0) if e == 0 else F32(2.0 ** (127 - e))
        if (gq != e2m1(blocks[b] * multiplier)).any():
            run.fail(f"{what} {mode}: block {b} codes are not the exact casts with exponent {e}")
            continue
        run.note("torchao RCEIL float32 log2 one too low")


def mx_inputs(rng):
    rows = []
    for k in range(-30, 30):
        row = rng.uniform(-1, 1, 32)
        row[0] = 6.0 * 2.0 ** k * (1 + 2.0 ** -22)
        rows.append(row)
    rows.append(np.full(32, 1e-40))
    rows.append(np.zeros(32))
    rows.append(np.concatenate([[math.inf], np.ones(31)]))
    rows.append(np.concatenate([[math.nan], np.ones(31)]))
    rows.append(np.concatenate([[-0.0], np.full(31, 7.0)]))
    special = torch.from_numpy(np.array(rows, dtype=F32))
    wide = rng.standard_normal((64, 256)) * np.exp(3 * rng.standard_normal((64, 256)))
    wide = torch.from_numpy(wide.astype(F32))
    return [("special blocks", special), ("x exp(3z)", wide),
            ("x exp(3z) bf16", wide.to(torch.bfloat16))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", required=True, help="mixprec_fp4_anchors")
    parser.add_argument("--dir", required=True, help="folder for the inputs and outputs")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    torch.set_num_threads(1)
    import torchao
    print(f"torch {torch.__version__}, torchao {torchao.__version__}, ml_dtypes "
          f"{ml_dtypes.__version__}")
    run = Run(args.exe, args.dir)
    rng = np.random.default_rng(41)
    check_half_patterns(run)
    check_torchao_cast(run, rng)
    for what, x in nvfp4_inputs(rng):
        check_nvfp4(run, x, what)
    for what, x in mx_inputs(rng):
        for mode in ("floor", "rceil"):
            check_mx(run, x, mode, what)
    check_every_float32(run)
    print(f"{run.compared} values compared, {run.failures} failures; named classes: "
          f"{run.classes}")
    print("PASS" if run.failures == 0 else f"FAIL: {run.failures}")
    return 0 if run.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
