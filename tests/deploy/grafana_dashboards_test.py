#!/usr/bin/env python3
"""deploy/grafana: the committed dashboards are what their source writes, and every panel has a
title, a unit and a description, queries through the cluster and instance variables, and
dashboards have distinct uids."""
import json
import os
import subprocess
import sys
import tempfile

SRC = "deploy/grafana"


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    committed_dir = os.path.join(SRC, "dashboards")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(SRC, "dashboards.py"), "--out", out], check=True)
        generated = sorted(os.listdir(out))
        committed = sorted(f for f in os.listdir(committed_dir) if f.endswith(".json"))
        if generated != committed:
            fail(f"dashboards.py writes {generated}, deploy/grafana/dashboards holds {committed}")
        for name in generated:
            with open(os.path.join(out, name)) as a, open(os.path.join(committed_dir, name)) as b:
                if a.read() != b.read():
                    fail(f"{name} differs from what dashboards.py writes: run "
                         "python3 deploy/grafana/dashboards.py and commit the result")
    uids, panels, queries = set(), 0, 0
    for name in committed:
        with open(os.path.join(committed_dir, name)) as f:
            d = json.load(f)
        if d["uid"] in uids:
            fail(f"{name}: uid {d['uid']} used twice")
        uids.add(d["uid"])
        names = [v["name"] for v in d["templating"]["list"]]
        for var in ("datasource", "cluster", "instance"):
            if var not in names:
                fail(f"{name}: no template variable {var}")
        for p in d["panels"]:
            where = f"{name}: panel {p.get('id')} '{p.get('title')}'"
            for key in ("title", "description"):
                if not p.get(key, "").strip():
                    fail(f"{where}: no {key}")
            if not p["fieldConfig"]["defaults"].get("unit"):
                fail(f"{where}: no unit")
            if not p.get("targets"):
                fail(f"{where}: no query")
            for t in p["targets"]:
                if '$cluster' not in t["expr"] or '$instance' not in t["expr"]:
                    fail(f"{where}: query does not filter by $cluster and $instance: {t['expr']}")
                queries += 1
            panels += 1
    print(f"PASS: {len(committed)} dashboards, {panels} panels, {queries} queries, "
          "all generated from dashboards.py")


if __name__ == "__main__":
    main()
