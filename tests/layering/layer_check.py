#!/usr/bin/env python3
"""The top-level folders depend on each other only downward.

    server/  client/       (neither sees the other)
         \\    /
        transport/
            |
          proto/            third_party/ (build glue) is below everything

tests/ and deploy/ sit above them all. Bazel visibility already refuses most wrong edges;
this check states the whole rule in one place, so a visibility list widened by accident (or a
new package without one) is caught: for every rule under client/, server/, transport/ and
proto/, each direct dependency (deps, data) must lie in a folder its own folder may use. Test
rules (cc_test, sh_test, py_test) may also use the shared test support under tests/.

  python3 tests/layering/layer_check.py [--bazel bazel]

Run from the workspace root (./quickstart.sh test does). Prints one line per wrong edge; exits
1 if there is any, 0 otherwise, 2 when bazel query fails.
"""
import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET

# folder -> the workspace folders its rules may depend on (besides itself).
ALLOWED = {
    "proto": {"third_party"},
    "transport": {"proto", "third_party"},
    "client": {"transport", "proto", "third_party"},
    "server": {"transport", "proto", "third_party"},
}
TEST_EXTRA = {"tests"}


def folder(label):
    """//a/b:c -> a ; None for external labels and the root package."""
    if not label.startswith("//"):
        return None
    pkg = label[2:].partition(":")[0]
    return pkg.split("/")[0] if pkg else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bazel", default="bazel")
    args = ap.parse_args()
    scope = " + ".join(f"//{f}/..." for f in ALLOWED)
    out = subprocess.run([args.bazel, "query", f"kind(rule, {scope})", "--output=xml"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return 2
    bad = 0
    rules = 0
    for rule in ET.fromstring(out.stdout).iter("rule"):
        name = rule.get("name")
        own = folder(name)
        if own not in ALLOWED:
            continue
        rules += 1
        allowed = set(ALLOWED[own]) | {own}
        if rule.get("class", "").endswith("_test"):
            allowed |= TEST_EXTRA
        for lst in rule.findall("list"):
            if lst.get("name") not in ("deps", "data"):
                continue
            for dep in (e.get("value") for e in lst.findall("label")):
                f = folder(dep)
                if f is not None and f not in allowed:
                    print(f"{name}: depends on {dep} ({own}/ may use only "
                          f"{', '.join(sorted(allowed - {own}))})")
                    bad += 1
    print(f"layer check: {rules} rules in {', '.join(ALLOWED)}, {bad} wrong edges")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
