#!/usr/bin/env python3
"""No function in transport/, client/ or server/ runs past 80 lines (tests and benchmarks aside).

A long function is usually several steps that want names (docs/testing.md). This is a text
scan, not a C++ parser: it matches braces outside comments and literals and counts a brace
block as a function when it opens at namespace or class scope after a parameter list. Good
enough for this code base's clang-formatted style; a false alarm names the file and line.

  python3 tests/layering/function_length.py [--limit 80] [DIR...]

Exits 1 listing the functions over the limit, 0 otherwise.
"""
import argparse
import os
import re
import sys

SKIP_FILE = re.compile(r"(_test|_fuzzer)\.cc$")
SKIP_DIR = {"bench"}


def strip(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return re.sub(r"//.*", "", line)


def functions(path):
    """(lines, first line, signature) of each function body in `path`."""
    out, stack, sig, raw = [], [], "", None
    for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        if raw is not None:  # inside a raw string literal R"delim( ... )delim"
            if f'){raw}"' in line:
                raw = None
            continue
        m = re.search(r'R"([^(]*)\(', line)
        if m and f'){m.group(1)}"' not in line[m.end():]:
            raw = m.group(1)
            line = line[:m.start()]
        code = strip(line)
        stripped = code.strip()
        for ch in code:
            if ch == "{":
                s = (sig + " " + code.split("{")[0]).strip()
                kind = "block"
                if not stack or stack[-1][0] in ("ns", "class"):
                    if s.startswith("namespace") or s.startswith('extern ""'):
                        kind = "ns"
                    elif re.search(r"\b(class|struct|union|enum)\b[^()]*$", s):
                        kind = "class"
                    elif "(" in s and not re.search(r"=\s*$", s):
                        kind = "func"
                stack.append((kind, n, s[-90:]))
                sig = ""
            elif ch == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "func":
                    out.append((n - start + 1, start, name))
                sig = ""
        if not stripped or stripped.startswith("#") or stripped.endswith((";", "}")):
            sig = ""
        elif "{" not in code:
            sig = (sig + " " + stripped)[-400:]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("dirs", nargs="*", default=["transport", "client", "server"])
    args = ap.parse_args()
    long, count = [], 0
    for root in args.dirs:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIR]
            for f in sorted(filenames):
                if not f.endswith((".cc", ".h")) or SKIP_FILE.search(f):
                    continue
                path = os.path.join(dirpath, f)
                for lines, start, name in functions(path):
                    count += 1
                    if lines > args.limit:
                        long.append(f"{path}:{start}: {lines} lines: {name}")
    for l in long:
        print(l)
    print(f"function length: {count} functions in {' '.join(args.dirs)}, "
          f"{len(long)} over {args.limit} lines")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
