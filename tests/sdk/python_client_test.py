"""The Python module `unloadkv` against a real kvserver (docs/sdk.md, "Python").

Run by //tests/sdk:python_client_test with Debian's python3 and pytest; the module and the
kvserver come from the build (runfiles), UNLOADKV_MODULE_DIR and KVSERVER name them."""
import concurrent.futures
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.environ["UNLOADKV_MODULE_DIR"])
import unloadkv  # noqa: E402


@pytest.fixture(scope="module")
def server():
    """A kvserver on a free loopback port, stopped (and its exit checked) at the end."""
    p = subprocess.Popen(
        [os.environ["KVSERVER"], "--listen=127.0.0.1:0", "--metrics=",
         "--arena_bytes=16777216"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = None
    try:
        for _ in range(50):  # start-up lines; the first names the port
            line = p.stdout.readline()
            if not line:
                break
            if "listening on " in line:
                address = line.split("listening on ")[1].split()[0]
                break
        assert address, "kvserver did not start"
        threading.Thread(target=p.stdout.read, daemon=True).start()  # drain the rest
        yield address
    finally:
        p.terminate()
        assert p.wait(timeout=30) == 0


@pytest.fixture
def client(server):
    with unloadkv.Client(server=server) as c:
        yield c


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {seconds} s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real etcd (Debian's etcd-server) and one kvserver node serving two shards, with
    authentication; yields Client keyword arguments for it."""
    d = tmp_path_factory.mktemp("cluster")
    etcd_addr, peer = "127.0.0.1:%d" % _free_port(), "127.0.0.1:%d" % _free_port()
    auth = d / "auth"
    auth.write_text("app client %s\nn1 node %s\n" % (os.urandom(32).hex(), os.urandom(32).hex()))
    auth.chmod(0o600)
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["etcd", "--name=py", f"--data-dir={d / 'etcd'}",
             f"--listen-client-urls=http://{etcd_addr}", f"--advertise-client-urls=http://{etcd_addr}",
             f"--listen-peer-urls=http://{peer}", f"--initial-advertise-peer-urls=http://{peer}",
             f"--initial-cluster=py=http://{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        kv = [os.environ["KVCLIENT"], f"--etcd={etcd_addr}", "--cluster=py"]

        def initialized():
            return subprocess.run(kv + ["cluster", "init", "--shards=2", "--replicas=1",
                                        "--split_keys=m"], capture_output=True).returncode == 0
        _wait("etcd answered cluster init", initialized, 30)
        procs.append(subprocess.Popen(
            [os.environ["KVSERVER"], f"--etcd={etcd_addr}", "--cluster=py", "--node=n1",
             f"--auth_file={auth}", "--listen=127.0.0.1:0", "--metrics=",
             "--arena_bytes=16777216"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def serving():
            st = subprocess.run(kv + ["cluster", "status", "--json"], capture_output=True,
                                text=True).stdout
            return st.count('"state":"serving"') == 2
        _wait("both shards served", serving, 30)
        yield dict(etcd=etcd_addr, cluster="py", auth_file=str(auth), user="app")
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            p.wait(timeout=30)


def test_cluster_client_routes_by_the_map(cluster):
    with unloadkv.Client(**cluster) as c:
        for k in (b"apple", b"zebra", b"kiwi", b"orange"):  # both sides of the split at "m"
            c.put(k, k.upper())
        assert c.get(b"zebra") == b"ZEBRA"
        assert [k for k, _ in c.scan()] == [b"apple", b"kiwi", b"orange", b"zebra"]
        assert c.put_async(b"mango", b"M").result(timeout=10) > 0
        assert c.stats()["keys"] == 5

    # The right user with a wrong secret: the node refuses, and nothing is stored. (A cluster
    # client dials a node at its first request, so that is where the refusal surfaces.)
    wrong = pathlib.Path(cluster["auth_file"]).with_name("wrong_auth")
    wrong.write_text("app client %s\n" % os.urandom(32).hex())
    wrong.chmod(0o600)
    with unloadkv.Client(**dict(cluster, auth_file=str(wrong))) as bad:
        with pytest.raises(unloadkv.Unauthenticated, match="authentication failed"):
            bad.put(b"intruder", b"x")
    with unloadkv.Client(**cluster) as c:
        with pytest.raises(unloadkv.NotFound):
            c.get(b"intruder")


def test_version():
    assert unloadkv.__version__.count(".") == 2
    assert unloadkv.__version__.split(".")[0].isdigit()


def test_put_get_delete(client):
    client.put(b"py:1", b"alice")
    assert client.get(b"py:1") == b"alice"
    client.put(b"py:1", b"\x00binary\xff")
    assert client.get(b"py:1") == b"\x00binary\xff"
    client.delete(b"py:1")
    with pytest.raises(unloadkv.NotFound):
        client.get(b"py:1")
    with pytest.raises(KeyError):  # NotFound is a KeyError too
        client.get(b"py:1")
    with pytest.raises(unloadkv.NotFound):
        client.delete(b"py:1")


def test_field_records(client):
    record = unloadkv.encode_fields({b"name": b"alice", b"city": b"Lima"})
    assert unloadkv.decode_fields(record) == {b"name": b"alice", b"city": b"Lima"}
    assert list(unloadkv.decode_fields(record)) == [b"name", b"city"]  # the record's order
    assert unloadkv.encode_fields([(b"a", b"1"), (b"a", b"2")]) == unloadkv.encode_fields(
        {b"a": b"2"})  # a later duplicate replaces the earlier value
    client.merge_fields(b"user:7", {b"name": b"alice", b"city": b"Lima"})
    client.merge_fields(b"user:7", [(b"city", b"Osaka"), (b"age", b"30")])
    assert unloadkv.decode_fields(client.get(b"user:7")) == {
        b"name": b"alice", b"city": b"Osaka", b"age": b"30"}
    client.put(b"plain", b"not a record")
    with pytest.raises(unloadkv.FailedPrecondition):
        client.merge_fields(b"plain", {b"a": b"b"})
    assert client.get(b"plain") == b"not a record"
    with pytest.raises(unloadkv.InvalidArgument):
        unloadkv.decode_fields(b"\x05\x00\x00\x00ab")  # a name longer than the bytes
    with pytest.raises(TypeError):
        unloadkv.encode_fields([(b"only a name",)])


def test_bad_input_is_refused_and_changes_nothing(client):
    before = client.stats()["keys"]
    with pytest.raises(unloadkv.InvalidArgument):
        client.put(b"", b"empty key")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        client.put(b"k" * 100000, b"key too long")
    with pytest.raises(TypeError):
        client.put(123, b"not bytes")
    with pytest.raises(ValueError):
        client.scan(page_size=0)
    assert client.stats()["keys"] == before


def test_scan_iterates_pages_in_order(client):
    keys = [b"scan:%03d" % i for i in range(250)]
    for k in reversed(keys):
        client.put(k, k + b"=v")
    got = list(client.scan(b"scan:", b"scan;", page_size=7))
    assert [k for k, _ in got] == keys
    assert all(v == k + b"=v" for k, v in got)
    assert list(client.scan(b"scan:100", b"scan:103")) == [
        (b"scan:100", b"scan:100=v"), (b"scan:101", b"scan:101=v"), (b"scan:102", b"scan:102=v")]
    assert list(client.scan(b"nothing:", b"nothing;")) == []


def test_async_calls_are_futures(client):
    futures = [client.put_async(b"async:%04d" % i, b"v%d" % i) for i in range(500)]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    versions = [f.result(timeout=30) for f in futures]  # more than max_in_flight: back-pressure
    assert all(isinstance(v, int) and v > 0 for v in versions)
    assert client.get_async(b"async:0007").result(timeout=10) == b"v7"
    assert client.delete_async(b"async:0007").result(timeout=10) is None
    with pytest.raises(unloadkv.NotFound):
        client.get_async(b"async:0007").result(timeout=10)


def test_threads_share_a_client_and_the_gil_is_released(client):
    errors = []

    def work(t):
        try:
            for i in range(100):
                client.put(b"t%d:%d" % (t, i), b"x" * i)
                assert client.get(b"t%d:%d" % (t, i)) == b"x" * i
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(list(client.scan(b"t", b"u"))) == 400


def test_the_gil_is_released_while_waiting():
    """A connect to a peer that accepts and never answers blocks for its timeout; meanwhile
    another Python thread keeps running (it could not if the call held the GIL)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    port = silent.getsockname()[1]
    started = threading.Event()
    outcome = []

    def connect():
        started.set()
        try:
            unloadkv.Client(server="127.0.0.1:%d" % port, timeout=1.5)
        except unloadkv.Error as e:
            outcome.append(e)

    t = threading.Thread(target=connect)
    t.start()
    started.wait()
    loops = 0
    while t.is_alive():
        loops += 1
    t.join()
    silent.close()
    assert len(outcome) == 1 and isinstance(outcome[0], unloadkv.DeadlineExceeded), outcome
    print("loops while blocked:", loops)
    assert loops > 100000, loops


def test_stats(client):
    client.put(b"stats:k", b"v")
    s = client.stats()
    assert s["keys"] >= 1
    assert s["transport"] == "soft"
    assert s["connections"] >= 1
    assert s["arena_bytes"] == 16777216


def test_closed_client_refuses(server):
    c = unloadkv.Client(server=server)
    c.put(b"closed:k", b"v")
    c.close()
    assert c.closed
    c.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        c.get(b"closed:k")
    with unloadkv.Client(server=server) as again:
        assert again.get(b"closed:k") == b"v"


def test_connection_errors_are_typed():
    with pytest.raises(unloadkv.Error) as e:
        unloadkv.Client(server="127.0.0.1:1", timeout=2)
    assert isinstance(e.value, (unloadkv.Unavailable, unloadkv.DeadlineExceeded))
    with pytest.raises(ValueError):
        unloadkv.Client(server="127.0.0.1:1", timeout=0)
    with pytest.raises(unloadkv.InvalidArgument):
        unloadkv.Client(server="127.0.0.1:1", max_in_flight=0)


def test_every_function_has_a_docstring():
    for name in dir(unloadkv.Client):
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__init__"):
            continue
        assert getattr(unloadkv.Client, name).__doc__, name
    for name in ("NotFound", "Unavailable", "InvalidArgument", "DeadlineExceeded", "Error"):
        assert getattr(unloadkv, name).__doc__, name
