#!/usr/bin/env python3
"""Every Grafana panel's query against a real Prometheus scraping real kvservers.

Starts, on loopback: etcd, a three-node kvserver cluster (one shard, three replicas,
replication writes unloaded, automatic placement on), a kvclient load (value writes unloaded) and Debian's prometheus
with deploy/prometheus's configuration and rules (scrape and rule evaluation every second
instead of 15 s, and a file-discovery target file naming the three nodes as cluster "test").
Once Prometheus has scraped every node and evaluated the rules, it runs every query of every
dashboard in deploy/grafana/dashboards with the template variables substituted (cluster
"test", every instance) through the HTTP API, and fails on a query error or an empty result,
except for the series in ALLOWED_EMPTY, which exist only after a fault. Prints each query with
its result count. Every process is stopped on every path.
"""
import glob
import json
import math
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import fail, free_port, run_with_cluster, wait_for  # noqa: E402

CLUSTER = "test"
# Series created on their first event: (substring of the query, why it may be empty).
ALLOWED_EMPTY = [
    ("unloadkv_connections_refused_total", "exists after the first refused admission"),
    ("unloadkv_transfer_sent_bytes", "exists only while a state transfer is under way"),
    ("unloadkv_placement_changes_total", "exists after the placer's first change (one shard "
     "on three nodes gives it none to make)"),
]


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            body = json.loads(text)
        except ValueError:  # not ready yet (503 with a plain-text body), or worse
            return None, f"HTTP {e.code}: {text.strip()}"
    if body.get("status") != "success":
        return None, body.get("error", "no error text")
    return body["data"]["result"], None


def has_data(prom, expr):
    """Whether `expr` answers with at least one finite number."""
    result, error = query(prom, expr)
    return error is None and any(math.isfinite(float(r["value"][1])) for r in result)


def main():
    run_with_cluster(CLUSTER, ("etcd", "prometheus"), run)


def run(tmp, cluster):
    cluster.start_etcd()
    # Automatic placement on, so that the placer and shard-size panels have series.
    cluster.init(shards=1, replicas=3, extra=["--auto_rebalance"])
    for i in (1, 2, 3):
        cluster.start_node(f"n{i}", ["--policy=unload", "--load_interval_s=1"])
    cluster.wait_whole(backups=2)
    load = cluster.start_load(["--policy=unload"])
    metrics = cluster.metrics

    # deploy/prometheus as shipped, but scraping and evaluating every second.
    conf_dir = os.path.join(tmp, "prometheus")
    shutil.copytree("deploy/prometheus", conf_dir)
    conf_path = os.path.join(conf_dir, "prometheus.yml")
    with open(conf_path) as f:
        conf = f.read()
    for key in ("scrape_interval", "evaluation_interval"):
        conf, n = re.subn(rf"^(\s*){key}: 15s$", rf"\g<1>{key}: 1s", conf, flags=re.M)
        if n != 1:
            fail(f"deploy/prometheus/prometheus.yml: no '{key}: 15s' line to shorten")
    conf = conf.replace("scrape_timeout: 5s", "scrape_timeout: 1s")
    with open(conf_path, "w") as f:
        f.write(conf)
    with open(os.path.join(conf_dir, "targets", "test.json"), "w") as f:
        json.dump([{"targets": metrics, "labels": {"cluster": CLUSTER}}], f)
    prom = f"127.0.0.1:{free_port()}"
    cluster.start("prometheus", ["prometheus", f"--config.file={conf_path}",
                               f"--storage.tsdb.path={tmp}/tsdb", f"--web.listen-address={prom}",
                               "--log.level=warn"])

    def all_up():
        try:
            r, _ = query(prom, f'up{{cluster="{CLUSTER}"}} == 1')
        except OSError:
            return False
        return r is not None and len(r) == 3
    wait_for(f"prometheus scraping the 3 nodes (log: {cluster.log_tail('prometheus')})", all_up, 60)

    def rules_have_data():
        r, _ = query(prom, f'instance:unloadkv_value_writes_unloaded:ratio_rate5m{{cluster="{CLUSTER}"}}')
        r2, _ = query(prom, f'instance_path:unloadkv_engine_write_latency_seconds:p99_1m{{cluster="{CLUSTER}", path="unload"}} > 0')
        return r and r2
    wait_for("the recording rules evaluated over a few scrapes", rules_have_data, 60, step_s=0.5)
    if load.poll() is not None:
        fail(f"the load stopped: {cluster.log_tail('load')}")

    failures = []
    total = with_data = 0
    for path in sorted(glob.glob("deploy/grafana/dashboards/*.json")):
        with open(path) as f:
            dash = json.load(f)
        print(f"{dash['title']} ({os.path.basename(path)})")
        for p in dash["panels"]:
            for t in p["targets"]:
                expr = t["expr"].replace("$cluster", CLUSTER).replace("$instance", ".*")
                result, error = query(prom, expr)
                total += 1
                allowed = [why for needle, why in ALLOWED_EMPTY if needle in expr]
                if error is not None:
                    failures.append((p["title"], expr))
                    print(f"  {p['title']} [{t['refId']}]: ERROR {error}\n      {expr}")
                    continue
                # A series whose value is NaN (a latency quantile of a method nobody called)
                # draws nothing: a panel needs at least one number.
                finite = [r for r in result if math.isfinite(float(r["value"][1]))]
                if not finite and allowed:
                    status = f"{len(result)} series, none finite (allowed: {allowed[0]})"
                elif not finite:
                    status = f"{len(result)} series, none finite"
                    failures.append((p["title"], expr))
                else:
                    status = f"{len(result)} series, {len(finite)} finite"
                    with_data += 1
                print(f"  {p['title']} [{t['refId']}]: {status}\n      {expr}")
    if failures:
        # A rule's series can appear an evaluation or two after the ones waited for above (on a
        # loaded machine): ask the failed queries again, once a second for at most 20 s.
        late = list(failures)
        deadline = time.monotonic() + 20
        while failures and time.monotonic() < deadline:
            time.sleep(1)
            failures = [(title, e) for title, e in failures if not has_data(prom, e)]
        if failures:
            fail(f"{len(failures)} of {total} panel queries without data after 20 s more:\n  "
                 + "\n  ".join(f"{title}: {e}" for title, e in failures))
        print(f"{len(late)} panel queries had data on a later evaluation: "
              + "; ".join(title for title, _ in late))
        with_data += len(late)
    print(f"PASS: {total} panel queries answered by a real Prometheus, {with_data} with data, "
          f"{total - with_data} empty as allowed")


if __name__ == "__main__":
    main()
