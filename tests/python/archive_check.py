"""The Python half of `differential_cpu.py --mode archive`: what PyTorch can do with a
mixprec::optim::AdamW archive written by C++ `torch::save(optimizer, path)`.

Why: LibTorch optimizer archives are TorchScript module archives (zip with code/ and data.pkl),
not torch.save pickles. This records, as checks, what torch 2.6 does with one:
  * plain torch.load (weights_only=True by default from 2.6) refuses it (RuntimeError "Cannot use
    weights_only=True with TorchScript archives");
  * its data.pkl is an ordinary pickle of a module tree (the archive's code/ only describes the
    modules' types): read_torchscript_archive() reads it with pickle and the archive's tensors, as
    torch.jit.load did before PyTorch 2.10 deprecated it ("Please switch to torch.export", which
    reads no such archive): state.<id>.{step, exp_avg, exp_avg_sq} and
    param_groups.param_groups/0.{params/<i> (the <id> strings, in parameter order), options.{lr,
    betas, eps, weight_decay, amsgrad}}, which this converts into a torch.optim.AdamW state_dict;
and compares that state with torch.optim.AdamW(fused=True) + torch.amp.GradScaler("cpu")
trained here on the same 6-step history as the C++ side (an inf input at step 2: one skipped
step), then loads it into a Python AdamW and checks that one more step from it equals one more
step of the Python-trained optimizer within the tolerance below.
"""
import os
import pickle
import warnings
import zipfile

import torch

# exp_avg / exp_avg_sq / parameters after 5 applied AdamW steps: two separate fused kernels
# (mixprec's and ATen's CPU one) that may round in a different order; a few ulps per step.
RTOL, ATOL = 1e-5, 1e-7
LR, WD, STEPS, INF_STEP = 1e-2, 0.01, 6, 2


def _close(a, b):
    return bool(torch.isfinite(a).all()) and bool(((a - b).abs() <= ATOL + RTOL * b.abs()).all())


_STORAGE_DTYPES = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64,
                   "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
                   "LongStorage": torch.int64, "IntStorage": torch.int32, "BoolStorage": torch.bool}


class _ScriptModule:
    """A TorchScript module of the archive: its attributes, set by the pickle's BUILD."""


class _ArchiveUnpickler(pickle.Unpickler):
    """data.pkl of a TorchScript archive: modules as _ScriptModule, tensors from data/<key>."""

    def __init__(self, archive, prefix):
        super().__init__(archive.open(prefix + "data.pkl"))
        self._archive, self._prefix = archive, prefix

    def find_class(self, module, name):
        if module == "__torch__" or module.startswith("__torch__."):
            return _ScriptModule
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]  # the storage's dtype, for persistent_load
        allowed = {("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict")}
        if (module, name) in allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected global {module}.{name} in a LibTorch archive")

    def persistent_load(self, pid):
        kind, dtype, key, _location, _numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        data = bytearray(self._archive.read(f"{self._prefix}data/{key}"))
        untyped = torch.UntypedStorage.from_buffer(data, dtype=torch.uint8) if data else \
            torch.UntypedStorage(0)
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype,
                                          _internal=True)


def read_torchscript_archive(path):
    """The module tree of a TorchScript archive (LibTorch's torch::save), without torch.jit."""
    with zipfile.ZipFile(path) as archive:
        prefix = next(n for n in archive.namelist() if n.endswith("data.pkl"))[:-len("data.pkl")]
        return _ArchiveUnpickler(archive, prefix).load()


def jit_archive_to_state_dict(path):
    """A LibTorch AdamW archive (torch::save) -> a torch.optim.AdamW state_dict."""
    module = read_torchscript_archive(path)
    group = getattr(module.param_groups, "param_groups/0")
    count = int(getattr(group, "params/size"))
    keys = [getattr(group, f"params/{i}") for i in range(count)]
    opts = group.options
    state = {}
    for i, key in enumerate(keys):
        entry = getattr(module.state, key)
        state[i] = {"step": torch.tensor(float(entry.step)), "exp_avg": entry.exp_avg.clone(),
                    "exp_avg_sq": entry.exp_avg_sq.clone()}
    group_dict = {"lr": opts.lr, "betas": tuple(opts.betas), "eps": opts.eps,
                  "weight_decay": opts.weight_decay, "amsgrad": opts.amsgrad,
                  "params": list(range(count))}
    return {"state": state, "param_groups": [group_dict]}


def check_archive(folder, init, x, y, make_model):
    path = os.path.join(folder, "cpp_adamw_optim.pt")
    ok = True
    try:
        with warnings.catch_warnings():  # "looks like a TorchScript archive" (then it refuses)
            warnings.simplefilter("ignore")
            torch.load(path)
        print("FAIL archive/python: plain torch.load accepted a TorchScript archive (unexpected "
              "on torch 2.6; update archive_check.py and the docs)")
        ok = False
    except RuntimeError as e:
        print("PASS archive/python: plain torch.load refuses it as expected: "
              + " ".join(str(e).split())[:90] + "...")

    try:
        sd = jit_archive_to_state_dict(path)
    except Exception as e:
        print(f"FAIL archive/python: its module tree could not be read: {type(e).__name__}: {e}")
        return False

    # The same history in Python.
    l1, l2 = make_model(init)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WD, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for step in range(STEPS):
        opt.zero_grad()
        xs = x[step, 0].clone()
        if step == INF_STEP:
            xs[0, 0] = float("inf")
        scaler.scale(torch.nn.functional.mse_loss(l2(torch.relu(l1(xs))), y[step, 0])).backward()
        scaler.step(opt)
        scaler.update()
    ref = opt.state_dict()
    problems = []
    g, rg = sd["param_groups"][0], ref["param_groups"][0]
    for k in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
        if g[k] != rg[k]:
            problems.append(f"option {k}: C++ {g[k]!r} vs Python {rg[k]!r}")
    for i in range(len(params)):
        got, exp = sd["state"][i], ref["state"][i]
        if float(got["step"]) != float(exp["step"]):
            problems.append(f"param {i} step: C++ {float(got['step'])} vs Python "
                            f"{float(exp['step'])}")
        for k in ("exp_avg", "exp_avg_sq"):
            if not _close(got[k], exp[k]):
                problems.append(f"param {i} {k}: max|diff| {float((got[k] - exp[k]).abs().max()):.3g}")
    saved = torch.frombuffer(bytearray(open(os.path.join(folder, "cpp_adamw_params_saved.bin"),
                                            "rb").read()), dtype=torch.float32)
    py_flat = torch.cat([p.detach().reshape(-1) for p in params])
    if not _close(saved, py_flat):
        problems.append(f"parameters: max|diff| {float((saved - py_flat).abs().max()):.3g}")
    print(f"{'PASS' if not problems else 'FAIL'} archive/python: its module tree reads; its "
          f"state (steps {[int(sd['state'][i]['step']) for i in sd['state']]}, exp_avg, "
          f"exp_avg_sq, options) matches torch.optim.AdamW(fused=True) on the same history "
          f"(rtol {RTOL:g}, atol {ATOL:g})" + ("" if not problems else ": " + "; ".join(problems)))
    ok = ok and not problems

    # The converted state loads into a Python AdamW and steps as the Python-trained one.
    l1b, l2b = make_model([p.detach() for p in params])
    params_b = [l1b.weight, l1b.bias, l2b.weight, l2b.bias]
    opt_b = torch.optim.AdamW(params_b, lr=LR, weight_decay=WD, fused=True)
    opt_b.load_state_dict(sd)
    for ps, o, (m1, m2) in ((params, opt, (l1, l2)), (params_b, opt_b, (l1b, l2b))):
        o.zero_grad()
        torch.nn.functional.mse_loss(m2(torch.relu(m1(x[STEPS, 0]))), y[STEPS, 0]).backward()
        o.step()
    diff = max(float((a - b).abs().max()) for a, b in zip(params, params_b))
    step_ok = diff <= 1e-6
    print(f"{'PASS' if step_ok else 'FAIL'} archive/python: torch.optim.AdamW loaded from the "
          f"converted archive, next step vs the Python-trained one: max|diff| {diff:.3g} (<= 1e-6)")
    return ok and step_ok
