#!/usr/bin/env python3
"""CTest docs.snippets_are_excerpts: every C++ and CMake code block in README.md and docs/*.md is
an excerpt of a file that CI compiles or configures, so no snippet can drift from the code.

A block (```cpp or ```cmake) must follow a marker line `<!-- excerpt: PATH -->` (PATH from the
repository root, a file in examples/, tests/ or include/, which CI builds). Its code lines,
with comments removed (`//` in C++, `#` in CMake) and runs of whitespace made one space, must be
lines of PATH, normalised the same way, in the same order; comment-only lines are prose and
other lines of PATH may come between (an excerpt may skip). README.md's training loop is also
checked line for line by readme.training_loop_is_this_file.

Usage: check_snippets.py REPO_ROOT
"""
import glob
import os
import re
import sys

MARKER = re.compile(r"<!--\s*excerpt:\s*(\S+)\s*-->")
COMPILED = ("examples/", "tests/", "include/")


def normalise(line, lang):
    comment = "//" if lang == "cpp" else "#"
    at = line.find(comment)
    if at >= 0:
        line = line[:at]
    return " ".join(line.split())


def blocks(path):
    """(line number, language, code lines, marker path or None) for each cpp/cmake block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(cpp|cmake)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.search(lines[k]) if k >= 0 else None
        found.append((start + 1, lang, lines[start + 1:j], marker.group(1) if marker else None))
        i = j + 1
    return found


def check(root, doc, number, lang, code, source):
    where = f"{os.path.relpath(doc, root)}:{number}"
    if source is None:
        return [f"{where}: a ```{lang} block without a `<!-- excerpt: PATH -->` line before it"]
    if not source.startswith(COMPILED) or not os.path.isfile(os.path.join(root, source)):
        return [f"{where}: excerpt of '{source}', which is not a file under {COMPILED}"]
    wanted = [n for n in (normalise(l, lang) for l in code) if n]
    have = [normalise(l, lang) for l in open(os.path.join(root, source), encoding="utf-8")]
    at = 0
    for line in wanted:
        try:
            at = have.index(line, at) + 1
        except ValueError:
            return [f"{where}: the line `{line}` is not in {source} (after the lines before it)"]
    if not wanted:
        return [f"{where}: a block with no code"]
    return []


def main():
    root = sys.argv[1]
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    errors, count = [], 0
    for doc in docs:
        for number, lang, code, source in blocks(doc):
            count += 1
            errors += check(root, doc, number, lang, code, source)
    for e in errors:
        print("FAIL: " + e)
    print(f"{count} code blocks in {len(docs)} files, {len(errors)} not excerpts of built files")
    return 1 if errors or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
