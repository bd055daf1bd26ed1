#!/usr/bin/env python3
"""CTest docs.snippets_are_excerpts: every C, C++ and CMake code block in README.md and docs/*.md
is an excerpt of a file that CI compiles or configures, and every C# and Rust declaration of the
C ABI matches include/mixprec/c_api.h, so no snippet can drift from the code.

A block (```c, ```cpp or ```cmake) must follow a marker line `<!-- excerpt: PATH -->` (PATH from
the repository root, a file in examples/, tests/ or include/, which CI builds). Its code lines,
with comments removed (`//` and one-line `/* */` in C and C++, `#` in CMake) and runs of whitespace
made one space, must be lines of PATH, normalised the same way, in the same order; comment-only
lines are prose and other lines of PATH may come between (an excerpt may skip). README.md's
training loop is also checked line for line by readme.training_loop_is_this_file.

The ```csharp and ```rust blocks (docs/bindings.md) cannot be compiled here, so their foreign
declarations are checked against the header, parsed with regexes: every `static extern` (C#) or
`fn` in an `extern "C"` block (Rust) named mixprec_* must be a call of the header with as many
parameters, each of the same kind (pointer, int32, int64, double, size_t) and the same kind of
result; a struct with a struct_size field must have the fields of a header struct, in order and of
the same kinds; every other mixprec_* name in those blocks must be the header's.

Usage: check_snippets.py REPO_ROOT
"""
import glob
import os
import re
import sys

MARKER = re.compile(r"<!--\s*excerpt:\s*(\S+)\s*-->")
COMPILED = ("examples/", "tests/", "include/")


def normalise(line, lang):
    if lang in ("c", "cpp"):
        line = re.sub(r"/\*.*?\*/", " ", line)
    comment = "#" if lang == "cmake" else "//"
    at = line.find(comment)
    if at >= 0:
        line = line[:at]
    return " ".join(line.split())


def blocks(path):
    """(line number, language, code lines, marker path or None) for each c/cpp/cmake block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(cpp|cmake|c)\s*$", lines[i])
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


# ---- C# and Rust declarations of the C ABI against include/mixprec/c_api.h ----------------------

HEADER = "include/mixprec/c_api.h"
BINDING_LANGS = {"csharp": "csharp", "cs": "csharp", "rust": "rust"}
C_KINDS = {"int": "int32", "int32_t": "int32", "int64_t": "int64", "double": "double",
           "size_t": "size_t", "void": "void"}
CSHARP_KINDS = {"int": "int32", "long": "int64", "double": "double", "UIntPtr": "size_t",
                "nuint": "size_t", "IntPtr": "pointer", "void": "void"}
RUST_KINDS = {"c_int": "int32", "i32": "int32", "i64": "int64", "f64": "double",
              "c_double": "double", "usize": "size_t", "size_t": "size_t"}


def strip_c_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def c_kind(decl):
    """The kind of a C type (a parameter's declaration less its name, or a return type)."""
    if "*" in decl:
        return "pointer"
    words = [w for w in decl.split() if w not in ("const", "enum", "struct")]
    return C_KINDS.get(words[0] if words else "", "?" + decl)


def c_param_kind(param):
    param = param.strip()
    name = re.search(r"\w+$", param)
    return c_kind(param[:name.start()] if name else param)


def parse_header(root):
    """({call: (result kind, [parameter kinds])}, {struct: [(field, kind)]}, {type names})."""
    text = strip_c_comments(open(os.path.join(root, HEADER), encoding="utf-8").read())
    calls = {}
    for m in re.finditer(r"MIXPREC_C_EXPORT\s+([\w\s*]+?)\s*\b(mixprec_\w+)\s*\(([^)]*)\)\s*;", text):
        params = [p for p in m.group(3).split(",") if p.strip()]
        if len(params) == 1 and params[0].strip() == "void":
            params = []
        calls[m.group(2)] = (c_kind(m.group(1)), [c_param_kind(p) for p in params])
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(mixprec_\w+)\s*\{(.*?)\}\s*\w+\s*;", text, re.S):
        structs[m.group(1)] = [(f.group(2), c_kind(f.group(1)))
                               for f in re.finditer(r"([\w\s*]+?)\s*\b(\w+)\s*;", m.group(2))]
    types = set(re.findall(r"\b(mixprec_\w+)\s*;", text)) | set(structs)
    return calls, structs, types


def balanced(text, at):
    """The text between the '(' at `at` and its matching ')', and the index after that ')'."""
    depth = 0
    for i in range(at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[at + 1:i], i + 1
    return text[at + 1:], len(text)


def split_top(text):
    """`text` split at the commas outside (), [] and <>."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "([<" else -1 if ch in ")]>" else 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def csharp_kind(decl):
    decl = re.sub(r"^\s*(?:\[[^\]]*\]\s*)+", "", decl).strip()  # [MarshalAs(...)] and such
    words = decl.split()
    if not words:
        return "?"
    if words[0] in ("out", "ref", "in") or words[0].endswith(("[]", "[]?", "*")):
        return "pointer"
    if words[0].endswith("Handle"):  # a SafeHandle
        return "pointer"
    return CSHARP_KINDS.get(words[0], "?" + words[0])


def rust_kind(decl):
    decl = decl.strip()
    if not decl or decl == "()":
        return "void"
    if decl.startswith(("*mut", "*const", "&", "Option<&")):
        return "pointer"
    return RUST_KINDS.get(decl, "?" + decl)


def csharp_declarations(code):
    """([(call, result kind, [parameter kinds])], [(struct, [(field, kind)])]) of a C# block."""
    calls = []
    for m in re.finditer(r"\bstatic\s+extern\s+([\w\[\]?.]+)\s+(\w+)\s*\(", code):
        params, _ = balanced(code, m.end() - 1)
        calls.append((m.group(2), csharp_kind(m.group(1)), [csharp_kind(p) for p in split_top(params)]))
    structs = []
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\}", code, re.S):
        fields = [(f.group(2), csharp_kind(f.group(1)))
                  for f in re.finditer(r"public\s+([\w\[\]?]+)\s+(\w+)\s*;", m.group(2))]
        structs.append((m.group(1), fields))
    return calls, structs


def rust_declarations(code):
    """As csharp_declarations, for the `fn`s of a Rust block's `extern "C"` blocks."""
    calls = []
    for block in re.finditer(r'extern\s+"C"\s*\{', code):
        depth, end = 1, block.end()
        while end < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            end += 1
        body = code[block.end():end]
        for m in re.finditer(r"\bfn\s+(\w+)\s*\(", body):
            params, after = balanced(body, m.end() - 1)
            result = re.match(r"\s*(?:->\s*([^;]+?))?\s*;", body[after:])
            kinds = [rust_kind(p.split(":", 1)[1]) if ":" in p else "?" + p
                     for p in split_top(params)]
            calls.append((m.group(1), rust_kind(result.group(1) or "") if result else "?", kinds))
    structs = []
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\}", code, re.S):
        fields = [(f.group(1), rust_kind(f.group(2)))
                  for f in re.finditer(r"(?:pub\s+)?(\w+)\s*:\s*([^,}\n]+)", m.group(2))]
        structs.append((m.group(1), fields))
    return calls, structs


def binding_blocks(path):
    """(line number, language, code) for each ```csharp/```cs/```rust block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w+)\s*$", lines[i])
        j = i + 1
        while m and j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if m and m.group(1) in BINDING_LANGS:
            code = "\n".join(lines[i + 1:j])
            found.append((i + 1, BINDING_LANGS[m.group(1)], re.sub(r"//[^\n]*", "", code)))
        i = j + 1 if m else i + 1
    return found


def check_bindings(root, doc, header):
    """Errors for the C#/Rust blocks of `doc`, and how many declarations were checked."""
    calls, structs, types = header
    errors, checked = [], 0
    for number, lang, code in binding_blocks(doc):
        where = f"{os.path.relpath(doc, root)}:{number} ({lang})"
        declared, records = (csharp_declarations if lang == "csharp" else rust_declarations)(code)
        for name, result, params in declared:
            if not name.startswith("mixprec_"):
                continue  # the binding's own library (LibTorchSharp, torch-sys)
            checked += 1
            if name not in calls:
                errors.append(f"{where}: {name} is not a call of {HEADER}")
                continue
            want_result, want = calls[name]
            if len(params) != len(want):
                errors.append(f"{where}: {name} declared with {len(params)} parameters, "
                              f"{HEADER} has {len(want)}")
            elif params != want or result != want_result:
                errors.append(f"{where}: {name} declared as {result}({', '.join(params)}), "
                              f"{HEADER} has {want_result}({', '.join(want)})")
        for name, fields in records:
            if "struct_size" not in [f for f, _ in fields]:
                continue
            checked += 1
            same = [s for s, f in structs.items() if [n for n, _ in f] == [n for n, _ in fields]]
            if not same:
                errors.append(f"{where}: struct {name}'s fields {[f for f, _ in fields]} are not "
                              f"those of a struct of {HEADER}, in order")
            else:
                for (field, kind), (_, want) in zip(fields, structs[same[0]]):
                    if kind != want:
                        errors.append(f"{where}: struct {name}'s {field} is {kind}, "
                                      f"{same[0]}'s is {want}")
        known = set(calls) | types | {name for name, _, _ in declared}  # a bad call: said above
        names = re.findall(r"\bmixprec_\w+", re.sub(r'"[^"\n]*"', '""', code))  # not "mixprec_c"
        for name in sorted(set(names) - known):
            errors.append(f"{where}: {name} is not a name of {HEADER}")
    return errors, checked


def main():
    root = sys.argv[1]
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    header = parse_header(root)
    errors, count, declarations = [], 0, 0
    for doc in docs:
        for number, lang, code, source in blocks(doc):
            count += 1
            errors += check(root, doc, number, lang, code, source)
        found, checked = check_bindings(root, doc, header)
        errors += found
        declarations += checked
    bindings = os.path.join(root, "docs", "bindings.md")
    if os.path.isfile(bindings) and {"csharp", "rust"} - {l for _, l, _ in binding_blocks(bindings)}:
        errors.append("docs/bindings.md: no ```csharp or no ```rust block left to check")
    if not header[0]:
        errors.append(f"{HEADER}: no MIXPREC_C_EXPORT call found (has the header's style changed?)")
    for e in errors:
        print("FAIL: " + e)
    print(f"{count} code blocks in {len(docs)} files, {declarations} C#/Rust declarations of "
          f"the C ABI; {len(errors)} errors")
    return 1 if errors or count == 0 else 0

if __name__ == "__main__":
    sys.exit(main())
