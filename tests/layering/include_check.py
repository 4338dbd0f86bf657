#!/usr/bin/env python3
"""Every #include "..." of a workspace header is declared by a direct dependency.

Bazel 4's gcc toolchain has no layering_check (it needs clang module maps), so a target could
include a header of a package it does not depend on, and compile only because another
dependency pulled the header in. This check closes that gap: it reads the cc rules from
`bazel query` (their srcs, hdrs and deps), maps each workspace header to the rule that
declares it, and fails for every quoted include in a rule's sources whose header is neither the
rule's own nor one of a direct dependency. Generated protobuf headers (x.pb.h) belong to the
cc_proto library that lists them. Includes of headers outside the workspace (Abseil, gtest,
system headers) are not checked here.

  python3 tests/layering/include_check.py [--bazel bazel] [--query //...]

Run from the workspace root (./quickstart.sh test does). Prints one line per violation naming
the file, the header, the rule that owns it and the rule that should depend on it; exits 1 if
there is any, 0 otherwise, 2 when bazel query fails.
"""
import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def label_to_path(label):
    """//a/b:c.h -> a/b/c.h ; None for external labels."""
    if not label.startswith("//"):
        return None
    pkg, _, name = label[2:].partition(":")
    return f"{pkg}/{name}" if pkg else name


def query_rules(bazel, scope):
    out = subprocess.run(
        [bazel, "query", f'kind("cc_(library|binary|test)", {scope})', "--output=xml"],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit(2)
    rules = {}
    for rule in ET.fromstring(out.stdout).iter("rule"):
        lists = {"srcs": [], "hdrs": [], "textual_hdrs": [], "deps": []}
        for lst in rule.findall("list"):
            if lst.get("name") in lists:
                lists[lst.get("name")] = [e.get("value") for e in lst.findall("label")]
        rules[rule.get("name")] = lists
    return rules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bazel", default="bazel")
    ap.add_argument("--query", default="//...")
    args = ap.parse_args()
    rules = query_rules(args.bazel, args.query)
    owners = {}  # workspace path -> the rules that declare it
    for name, r in rules.items():
        for lbl in r["hdrs"] + r["srcs"] + r["textual_hdrs"]:
            path = label_to_path(lbl)
            if path and (path.endswith(".h") or path.endswith(".inc")):
                owners.setdefault(path, set()).add(name)
    violations, checked = [], 0
    for name, r in sorted(rules.items()):
        allowed = {name} | set(r["deps"])
        for lbl in r["srcs"] + r["hdrs"] + r["textual_hdrs"]:
            path = label_to_path(lbl)
            if not path or not os.path.isfile(path):
                continue  # generated, or not a file of this checkout
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = m.group(1)
                    if header not in owners:
                        continue  # outside the workspace, or not declared by any rule
                    checked += 1
                    if not owners[header] & allowed:
                        violations.append(f"{path}:{n}: includes {header} (declared by "
                                          f"{', '.join(sorted(owners[header]))}) but {name} "
                                          "does not depend on it")
    for v in violations:
        print(v)
    print(f"include check: {checked} workspace includes in {len(rules)} rules, "
          f"{len(violations)} undeclared")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
