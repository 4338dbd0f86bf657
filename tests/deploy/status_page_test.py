#!/usr/bin/env python3
"""kvserver's /status page in a real browser (Debian's chromium, headless, default JavaScript
security settings) while a two-node cluster (replication writes unloaded) serves a load.

Checks /status.json (samples every second with request rates, latencies, value writes by
path, the ring occupancy of the primary's replication writes; the shard map), then opens
/status on the primary in headless Chromium and reads back the page's DOM after it has run:
four charts drawn with points, the shard map table, no error. Saves a screenshot as a test
artifact (status.png in TEST_UNDECLARED_OUTPUTS_DIR). Every process is stopped on every path.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import fail, run_with_cluster, wait_for  # noqa: E402


def status_json(metrics):
    with urllib.request.urlopen(f"http://{metrics}/status.json", timeout=5) as r:
        if not r.headers.get("Content-Type", "").startswith("application/json"):
            fail(f"/status.json served as {r.headers.get('Content-Type')}")
        return json.load(r)


def chromium(args, tmp):
    # --no-sandbox: the test may run as root, where Chromium's process sandbox cannot start;
    # the page's JavaScript keeps its default security (same-origin fetch only).
    cmd = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp}/chromium-profile",
           "--window-size=1280,1100", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def main():
    run_with_cluster("statustest", ("etcd", "chromium"), run)


def run(tmp, cluster):
    cluster.start_etcd()
    cluster.init(shards=1, replicas=2)
    for node in ("n1", "n2"):
        cluster.start_node(node, ["--policy=unload"])
    cluster.wait_whole(backups=1)
    cluster.start_load(["--policy=unload"])
    primary = cluster.status()["shards"][0]["primary"]
    address = cluster.metrics[int(primary[1:]) - 1]

    def busy_samples():
        st = status_json(address)
        s = st["samples"]
        if len(s) >= 3 and s[-1]["put_rps"] > 0 and s[-1]["ring_slots"] > 0:
            return st
        return None
    st = wait_for("three samples of the primary under load", busy_samples, 30, step_s=0.5)
    last = st["samples"][-1]
    if st["node"] != primary:
        fail(f"/status.json names node {st['node']!r}, not {primary}")
    for key in ("rps", "put_rps", "get_rps", "put_p50_us", "put_p99_us", "get_p50_us",
                "get_p99_us", "unload_wps", "keys", "connections", "arena_used"):
        if not isinstance(last.get(key), (int, float)) or last[key] <= 0:
            fail(f"/status.json: {key} = {last.get(key)!r} under load: {last}")
    if not last["put_p50_us"] <= last["put_p99_us"]:
        fail(f"/status.json: PUT p50 above p99: {last}")
    if last["unloaded_share"] < 0.9:
        fail(f"/status.json: unloaded share {last['unloaded_share']} with every write unloaded")
    shard = st["cluster"]["shards"][0]
    if shard["primary"] != primary or shard["role"] != "primary" or len(shard["backups"]) != 1:
        fail(f"/status.json: shard map {st['cluster']}")
    print(f"/status.json of {primary}: {len(st['samples'])} samples; last: "
          f"{last['rps']:.0f} req/s, PUT p50/p99 {last['put_p50_us']:.1f}/"
          f"{last['put_p99_us']:.1f} us, unloaded {100 * last['unloaded_share']:.0f}%, ring "
          f"{last['ring_in_use']:.0f}/{last['ring_slots']:.0f}")

    url = f"http://{address}/status"
    # The page fetches /status.json at once and every second; 3 s of its (virtual) time lets it
    # run a few rounds before the DOM is dumped.
    dom = chromium(["--virtual-time-budget=3000", "--dump-dom", url], tmp)
    if dom.returncode != 0:
        fail(f"chromium --dump-dom: exit {dom.returncode}: {dom.stderr[-2000:]}")
    body = re.search(r"<body([^>]*)>", dom.stdout)
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', body.group(1))) if body else {}
    if "error" in attrs:
        fail(f"the page reported an error: {attrs['error']}")
    if attrs.get("charts") != "4" or int(attrs.get("points", "0")) < 8:
        fail(f"charts not drawn: body attributes {attrs}")
    if "Shard map" not in dom.stdout or f"<td>{primary}</td>" not in dom.stdout:
        fail("the shard map table is missing from the page")
    print(f"chromium: 4 charts drawn with {attrs['points']} points, shard map shown")

    out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", tmp)
    png = os.path.join(out_dir, "status.png")
    shot = chromium(["--virtual-time-budget=3000", f"--screenshot={png}", url], tmp)
    if shot.returncode != 0 or not os.path.exists(png):
        fail(f"chromium --screenshot: exit {shot.returncode}: {shot.stderr[-2000:]}")
    with open(png, "rb") as f:
        head = f.read(8)
    size = os.path.getsize(png)
    if head != b"\x89PNG\r\n\x1a\n" or size < 20000:
        fail(f"screenshot {png}: {size} bytes, header {head!r}")
    print(f"PASS: screenshot {png} ({size} bytes)")


if __name__ == "__main__":
    main()
