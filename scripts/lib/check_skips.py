#!/usr/bin/env python3
"""Fails a test stage on any skip that tests/expected_skips.txt does not expect there.

Usage: check_skips.py JUNIT_XML BUILD_DIR [--expected FILE] [--gpus N]

Reads the JUnit file of a CTest run (ctest --output-junit), prints every skipped test with its
reason and whether it was expected, and the count; exits 1 when a skip was not expected. The
conditions of tests/expected_skips.txt are decided from the build (BUILD_DIR/mixprec_test_env.txt,
written by tests/CMakeLists.txt: the LibTorch version, whether mixprec has its CUDA kernels), the
GPUs that nvidia-smi lists (or --gpus), and the user id.
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXPECTED = os.path.join(HERE, "..", "..", "tests", "expected_skips.txt")


def read_env(build_dir):
    env = {}
    path = os.path.join(build_dir, "mixprec_test_env.txt")
    with open(path) as f:
        for line in f:
            if "=" in line:
                key, value = line.strip().split("=", 1)
                env[key] = value
    return env


def count_gpus():
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def in_chroot():
    """Whether / is no mount point for this process, as in the Debian 13 stage's chroot: no line
    of /proc/self/mountinfo has "/" as its mount point (the fifth field)."""
    try:
        with open("/proc/self/mountinfo") as f:
            return not any(len(line.split()) > 4 and line.split()[4] == "/" for line in f)
    except OSError:
        return False


def version_tuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def holds(condition, facts):
    """Whether a condition of expected_skips.txt holds; an unknown condition is an error."""
    if condition == "no-gpu":
        return facts["gpus"] == 0
    if condition == "gpu":
        return facts["gpus"] > 0
    if condition == "one-gpu":
        return facts["gpus"] < 2
    if condition == "cuda-build":
        return facts["cuda_build"]
    if condition == "not-root":
        return not facts["root"]
    if condition == "chroot":
        return facts["chroot"]
    m = re.fullmatch(r"libtorch(<|>=)(\d+)\.(\d+)", condition)
    if m:
        older = facts["torch"] < (int(m.group(2)), int(m.group(3)))
        return older if m.group(1) == "<" else not older
    raise ValueError(f"unknown condition '{condition}' in expected_skips.txt")


def read_expected(path):
    rules = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{number}: want 'PATTERN CONDITION', got '{line}'")
            rules.append((parts[0], parts[1]))
    return rules


def skip_reason(case):
    """The reason a skipped test printed: GoogleTest's line after 'Skipped', or a 'SKIP:' line."""
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1].strip()
        if line.startswith("SKIP:") or line.startswith("SKIP "):
            return line.strip()
    skipped = case.find("skipped")
    return (skipped.get("message") if skipped is not None else "") or "(no reason printed)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("junit")
    parser.add_argument("build_dir")
    parser.add_argument("--expected", default=DEFAULT_EXPECTED)
    parser.add_argument("--gpus", type=int, default=None)
    args = parser.parse_args()

    env = read_env(args.build_dir)
    if env.get("with_torch", "OFF").upper() == "ON" and not re.match(r"\d+\.\d+",
                                                                    env.get("torch_version", "")):
        print(f"check_skips: no LibTorch version in {args.build_dir}/mixprec_test_env.txt")
        return 2
    facts = {
        "gpus": count_gpus() if args.gpus is None else args.gpus,
        "torch": version_tuple(env.get("torch_version", "0.0")),
        "cuda_build": env.get("cuda_build", "OFF").upper() in ("ON", "1", "TRUE"),
        "root": os.geteuid() == 0,
        "chroot": in_chroot(),
    }
    rules = read_expected(args.expected)
    cases = ET.parse(args.junit).getroot().iter("testcase")
    skipped = [c for c in cases if c.find("skipped") is not None]
    unexpected = 0
    print(f"skipped tests: {len(skipped)} (GPUs: {facts['gpus']}, LibTorch "
          f"{env.get('torch_version', '?')}, CUDA kernels: {env.get('cuda_build', '?')}, "
          f"root: {facts['root']})")
    for case in skipped:
        name = case.get("name")
        why = [cond for pattern, cond in rules
               if fnmatch.fnmatchcase(name, pattern) and holds(cond, facts)]
        if why:
            print(f"  skipped (expected: {why[0]}): {name}: {skip_reason(case)}")
        else:
            unexpected += 1
            print(f"  SKIPPED, NOT EXPECTED HERE: {name}: {skip_reason(case)}")
    if unexpected:
        print(f"check_skips: {unexpected} unexpected skip(s): the stage fails "
              f"(tests/expected_skips.txt lists where a skip is expected)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
