"""A kvserver cluster on loopback for the deploy tests: etcd, N kvserver nodes and a kvclient
load, each a real process in its own session, every one stopped by stop_all() (call it in a
finally). Run from the test's runfiles root (server/kvserver and client/kvclient there)."""
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KVSERVER = "server/kvserver"
KVCLIENT = "client/kvclient"


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    raise SystemExit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, limit_s, step_s=0.1):
    """check() until it returns something true (returned), at most limit_s seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(step_s)
    fail(f"{what}: not within {limit_s} s")


class LocalCluster:
    def __init__(self, tmp, name="test"):
        self.tmp = tmp
        self.name = name
        self.procs = []
        self.metrics = []  # "host:port" of each node's metrics endpoint
        self.etcd = None
        # Every node and client authenticates (docs/security.md): one file of users, mode 600.
        self.auth_file = os.path.join(tmp, "auth")
        with open(os.open(self.auth_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(f"app client {secrets.token_hex(32)}\n")
            for n in range(1, 6):
                f.write(f"n{n} node {secrets.token_hex(32)}\n")

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
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def flags(self):
        return [f"--etcd={self.etcd}", f"--cluster={self.name}"]

    def start_etcd(self):
        port, peer = free_port(), free_port()
        self.etcd = f"127.0.0.1:{port}"
        self.start("etcd", [
            "etcd", "--name=deploytest", f"--data-dir={self.tmp}/etcd",
            f"--listen-client-urls=http://{self.etcd}",
            f"--advertise-client-urls=http://{self.etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=deploytest=http://127.0.0.1:{peer}", "--log-level=warn"])

        def ready():
            try:
                with urllib.request.urlopen(f"http://{self.etcd}/health", timeout=1) as r:
                    return b'"true"' in r.read()
            except OSError:
                return False
        wait_for("etcd answering", ready, 30)

    def init(self, shards, replicas, extra=()):
        r = subprocess.run([KVCLIENT, *self.flags(), "cluster", "init", f"--shards={shards}",
                            f"--replicas={replicas}", *extra], capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            fail(f"cluster init: {r.stdout}{r.stderr}")

    def start_node(self, node, extra=()):
        out = open(os.path.join(self.tmp, node + ".out"), "w+")
        self.start(node, [KVSERVER, *self.flags(), f"--node={node}", "--listen=127.0.0.1:0",
                          f"--auth_file={self.auth_file}",
                          "--metrics=127.0.0.1:0", "--arena_bytes=67108864",
                          "--huge_pages=false", *extra], stdout=out)

        def metrics_line():
            out.seek(0)
            m = re.search(r"metrics at http://([0-9.:]+)/metrics", out.read())
            return m.group(1) if m else None
        self.metrics.append(wait_for(f"kvserver {node} started ({self.log_tail(node)})",
                                     metrics_line, 30))

    def status(self):
        r = subprocess.run([KVCLIENT, *self.flags(), "cluster", "status", "--json"],
                           capture_output=True, text=True, timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def wait_whole(self, backups):
        def whole():
            st = self.status()
            shard = st["shards"][0] if st else None
            return shard and shard["primary"] and len(shard["backups"]) == backups
        wait_for(f"one primary and {backups} backup(s) in the map", whole, 60, step_s=0.5)

    def start_load(self, extra=()):
        return self.start("load", [KVCLIENT, *self.flags(), f"--auth_file={self.auth_file}",
                                   "--user=app", "load", "--ops=100000000",
                                   "--in_flight=8", "--keys=2000", "--value_size=1000",
                                   "--read_fraction=0.5", *extra])


# Debian packages of the tools the deploy tests run.
PACKAGES = {"etcd": "etcd-server", "prometheus": "prometheus", "chromium": "chromium"}


def run_with_cluster(name, tools, body):
    """Checks `tools` are installed, then body(tmp, cluster) with a LocalCluster named `name`
    in a fresh directory; stops every process and removes the directory on every path."""
    for tool in tools:
        if shutil.which(tool) is None:
            fail(f"{tool} not found: install Debian's {PACKAGES.get(tool, tool)} package "
                 "(./quickstart.sh test does)")
    tmp = tempfile.mkdtemp(prefix=name + ".")
    cluster = LocalCluster(tmp, name)
    try:
        body(tmp, cluster)
    finally:
        cluster.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
