#!/usr/bin/env python3
"""Every Grafana panel's query against a real Prometheus scraping real kvservers.

Starts, on loopback: etcd, a three-node kvserver cluster (one shard, three replicas,
replication writes unloaded), a kvclient load (value writes unloaded) and Debian's prometheus
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
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

KVSERVER = "server/kvserver"
KVCLIENT = "client/kvclient"
CLUSTER = "test"
# Series created on their first event: (substring of the query, why it may be empty).
ALLOWED_EMPTY = [
    ("unloadkv_connections_refused_total", "exists after the first refused admission"),
]


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    raise SystemExit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, limit_s, step_s=0.1):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(step_s)
    fail(f"{what}: not within {limit_s} s")


class Processes:
    """Starts processes in their own session; stops all of them, last started first."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, name, args, stdout=None):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=stdout or log, stderr=log, start_new_session=True)
        self.procs.append((name, p))
        return p

    def log_tail(self, name, lines=20):
        try:
            with open(os.path.join(self.tmp, name + ".log")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def stop_all(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        return None, body.get("error", "no error text")
    return body["data"]["result"], None


def main():
    for tool in ("etcd", "prometheus"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found: install Debian's {tool if tool == 'prometheus' else 'etcd-server'}"
                 " package (./quickstart.sh test does)")
    tmp = tempfile.mkdtemp(prefix="panels.")
    procs = Processes(tmp)
    try:
        run(tmp, procs)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, procs):
    etcd_port, peer_port = free_port(), free_port()
    etcd = f"127.0.0.1:{etcd_port}"
    procs.start("etcd", [
        "etcd", "--name=panels", f"--data-dir={tmp}/etcd",
        f"--listen-client-urls=http://{etcd}", f"--advertise-client-urls=http://{etcd}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=panels=http://127.0.0.1:{peer_port}", "--log-level=warn"])

    def etcd_ready():
        try:
            with urllib.request.urlopen(f"http://{etcd}/health", timeout=1) as r:
                return b'"true"' in r.read()
        except OSError:
            return False
    wait_for("etcd answering", etcd_ready, 30)
    cluster_flags = [f"--etcd={etcd}", f"--cluster={CLUSTER}"]
    init = subprocess.run([KVCLIENT, *cluster_flags, "cluster", "init", "--shards=1",
                           "--replicas=3"], capture_output=True, text=True, timeout=30)
    if init.returncode != 0:
        fail(f"cluster init: {init.stdout}{init.stderr}")

    metrics = []
    for i in (1, 2, 3):
        out = open(os.path.join(tmp, f"n{i}.out"), "w+")
        procs.start(f"n{i}", [KVSERVER, *cluster_flags, f"--node=n{i}", "--listen=127.0.0.1:0",
                              "--metrics=127.0.0.1:0", "--arena_bytes=67108864",
                              "--huge_pages=false", "--policy=unload"], stdout=out)

        def metrics_line(out=out, i=i):
            out.seek(0)
            m = re.search(r"metrics at http://([0-9.:]+)/metrics", out.read())
            return m.group(1) if m else None
        metrics.append(wait_for(f"kvserver n{i} started (log: {procs.log_tail(f'n{i}')})",
                                metrics_line, 30))

    def whole():
        st = subprocess.run([KVCLIENT, *cluster_flags, "cluster", "status", "--json"],
                            capture_output=True, text=True, timeout=30)
        if st.returncode != 0:
            return False
        shard = json.loads(st.stdout)["shards"][0]
        return shard["primary"] and len(shard["backups"]) == 2
    wait_for("one primary and two backups in the map", whole, 60, step_s=0.5)

    procs.start("load", [KVCLIENT, *cluster_flags, "load", "--ops=100000000", "--in_flight=8",
                         "--keys=2000", "--value_size=1000", "--read_fraction=0.5",
                         "--policy=unload"])

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
    procs.start("prometheus", ["prometheus", f"--config.file={conf_path}",
                               f"--storage.tsdb.path={tmp}/tsdb", f"--web.listen-address={prom}",
                               "--log.level=warn"])

    def all_up():
        try:
            r, _ = query(prom, f'up{{cluster="{CLUSTER}"}} == 1')
        except OSError:
            return False
        return r is not None and len(r) == 3
    wait_for(f"prometheus scraping the 3 nodes (log: {procs.log_tail('prometheus')})", all_up, 60)

    def rules_have_data():
        r, _ = query(prom, f'instance:unloadkv_value_writes_unloaded:ratio_rate5m{{cluster="{CLUSTER}"}}')
        r2, _ = query(prom, f'instance_path:unloadkv_engine_write_latency_seconds:p99_1m{{cluster="{CLUSTER}", path="unload"}} > 0')
        return r and r2
    wait_for("the recording rules evaluated over a few scrapes", rules_have_data, 60, step_s=0.5)
    if procs.procs[-2][1].poll() is not None:  # the load
        fail(f"the load stopped: {procs.log_tail('load')}")

    failures = []
    total = 0
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
                    status = f"ERROR {error}"
                    failures.append(f"{p['title']}: {expr}: {error}")
                elif not result and allowed:
                    status = f"0 series (allowed: {allowed[0]})"
                elif not result:
                    status = "0 series"
                    failures.append(f"{p['title']}: {expr}: empty")
                else:
                    status = f"{len(result)} series"
                print(f"  {p['title']} [{t['refId']}]: {status}\n      {expr}")
    if failures:
        fail(f"{len(failures)} of {total} panel queries failed:\n  " + "\n  ".join(failures))
    print(f"PASS: {total} panel queries answered with data by a real Prometheus")


if __name__ == "__main__":
    main()
