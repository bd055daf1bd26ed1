#!/usr/bin/env python3
"""CTest readme.training_loop_is_this_file: the code block under README.md's "## A training loop"
is examples/readme_loop.cpp's two includes, a blank line, and its lines between the README-BEGIN
and README-END markers with two spaces of indentation less (a program that CI compiles and runs).

Usage: check_readme_loop.py README.md examples/readme_loop.cpp
"""
import sys


def shown_in_readme(path):
    text = open(path, encoding="utf-8").read()
    at = text.find("## A training loop")
    if at < 0:
        sys.exit(f"{path}: no '## A training loop' section")
    start = text.index("```cpp\n", at) + len("```cpp\n")
    return text[start:text.index("```", start)]


def from_example(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    begin = next(i for i, l in enumerate(lines) if l.strip() == "// README-BEGIN")
    end = next(i for i, l in enumerate(lines) if l.strip() == "// README-END")
    body = [l[2:] if l.startswith("  ") else l for l in lines[begin + 1:end]]
    return "#include <mixprec/mixprec.h>\n#include <torch/torch.h>\n\n" + "\n".join(body) + "\n"


def main():
    shown, expected = shown_in_readme(sys.argv[1]), from_example(sys.argv[2])
    if shown != expected:
        print("FAIL: README.md's training loop differs from examples/readme_loop.cpp; the README "
              "must show:\n" + expected)
        return 1
    print("PASS: README.md's training loop is examples/readme_loop.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
