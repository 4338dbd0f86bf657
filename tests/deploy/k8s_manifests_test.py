#!/usr/bin/env python3
"""deploy/k8s: both overlays render with `kubectl kustomize`, and every rendered object is
valid against the Kubernetes API models of Debian's python3-kubernetes: every field known to
its type (a misspelled or misplaced field fails), every value of the declared type, every
required field present. Then what the deployment promises: probes, resource requests, a
PodDisruptionBudget, scrape annotations, node names from the pod name, and in the RDMA overlay
the verbs transport, IPC_LOCK, hugepages and the RDMA device resource.

Without kubectl (not a Debian package) the rendering is skipped with a message, and the base's
files are validated as they are.
"""
import copy
import functools
import os
import shutil
import subprocess
import sys
import tempfile

import yaml
import kubernetes.client as k8s

K8S = "deploy/k8s"
PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str,
              "date": str}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


@functools.lru_cache(maxsize=None)
def required(cls_name):
    """The fields a model's client-side validation refuses to leave unset."""
    cls = getattr(k8s, cls_name)
    obj = cls.__new__(cls)
    obj.local_vars_configuration = k8s.Configuration()
    out = []
    for attr in cls.openapi_types:
        try:
            setattr(obj, attr, None)
        except ValueError:
            out.append(cls.attribute_map[attr])
    return tuple(out)


def check(value, typ, path, errors):
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: want a list ({typ}), got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check(v, typ[5:-1], f"{path}[{i}]", errors)
    elif typ.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: want a map ({typ}), got {type(value).__name__}")
            return
        inner = typ[typ.index(",") + 1:-1].strip()
        for key, v in value.items():
            check(v, inner, f"{path}.{key}", errors)
    elif typ == "object":
        return  # int-or-string and the like
    elif typ in PRIMITIVES:
        if typ == "int" and isinstance(value, bool) or not isinstance(value, PRIMITIVES[typ]):
            errors.append(f"{path}: want {typ}, got {type(value).__name__} {value!r}")
    else:
        cls = getattr(k8s, typ)
        if not isinstance(value, dict):
            errors.append(f"{path}: want an object ({typ}), got {type(value).__name__}")
            return
        by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
        for key, v in value.items():
            if key not in by_json:
                errors.append(f"{path}.{key}: no such field in {typ}")
            else:
                check(v, cls.openapi_types[by_json[key]], f"{path}.{key}", errors)
        for key in required(typ):
            if key not in value:
                errors.append(f"{path}: {typ} needs {key}")


def model_of(obj):
    version = obj["apiVersion"].split("/")[-1]
    name = version[0].upper() + version[1:] + obj["kind"]
    if not hasattr(k8s, name):
        fail(f"{obj['kind']} {obj.get('metadata', {}).get('name')}: no model {name}")
    return name


def validate(objects, source):
    errors = []
    for obj in objects:
        where = f"{source}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        check(obj, model_of(obj), where, errors)
    if errors:
        fail(f"{len(errors)} schema errors:\n  " + "\n  ".join(errors))


def by_kind(objects, kind, name):
    for o in objects:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    fail(f"no {kind}/{name}")


def check_promises(objects, rdma):
    sts = by_kind(objects, "StatefulSet", "kvserver")
    pod = sts["spec"]["template"]
    c = pod["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        if c.get(probe, {}).get("httpGet", {}).get("port") != "metrics":
            fail(f"kvserver: no {probe} on the metrics port")
    if not c.get("resources", {}).get("requests"):
        fail("kvserver: no resource requests")
    ann = pod["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "9464":
        fail("kvserver: no Prometheus scrape annotations")
    if "--node=$(POD_NAME)" not in c["args"]:
        fail("kvserver: node name not from the pod name")
    # Authentication (docs/security.md): the users come from a Secret no other user may read.
    if "--auth_file=/etc/unloadkv/auth/auth" not in c["args"]:
        fail("kvserver: no --auth_file")
    vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    secret = vols.get("auth", {}).get("secret", {})
    if secret.get("secretName") != "unloadkv-auth" or secret.get("defaultMode", 0o644) & 0o007:
        fail(f"kvserver: the auth file is not a Secret kept from others: {vols.get('auth')}")
    # Durability (docs/durability.md): the shard logs on a volume of the pod's own that outlives
    # it, mounted where --data_dir points.
    if "--data_dir=/var/lib/unloadkv" not in c["args"]:
        fail("kvserver: no --data_dir")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])]
    if mounts.get("data") != "/var/lib/unloadkv" or "data" not in claims:
        fail(f"kvserver: the data dir is not a persistent volume per pod: {mounts}, {claims}")
    env = {e["name"]: e for e in c["env"]}
    if env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] != "metadata.name":
        fail("kvserver: POD_NAME is not the pod's name")
    if by_kind(objects, "Service", "kvserver")["spec"].get("clusterIP") != "None":
        fail("kvserver: the Service is not headless")
    by_kind(objects, "PodDisruptionBudget", "kvserver")
    etcd = by_kind(objects, "StatefulSet", "etcd")
    if etcd["spec"]["replicas"] != 3:
        fail("etcd: not 3 members")
    by_kind(objects, "Job", "unloadkv-cluster-init")
    transport = [a for a in c["args"] if a.startswith("--transport=")]
    caps = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
    res = c["resources"]
    if rdma:
        if transport != ["--transport=verbs"]:
            fail(f"rdma overlay: transport {transport}")
        if "IPC_LOCK" not in caps:
            fail("rdma overlay: no IPC_LOCK")
        for key in ("hugepages-2Mi", "rdma/hca_shared_devices_a"):
            if key not in res.get("limits", {}):
                fail(f"rdma overlay: no {key} limit")
    elif transport != ["--transport=soft"] or caps:
        fail(f"soft overlay: transport {transport}, capabilities {caps}")


def main():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP rendering: kubectl is not installed (it is not a Debian package); "
              "validating the base's files as they are")
        with open(os.path.join(K8S, "base", "kustomization.yaml")) as f:
            resources = yaml.safe_load(f)["resources"]
        objects = []
        for r in resources:
            with open(os.path.join(K8S, "base", r)) as f:
                objects += [o for o in yaml.safe_load_all(f) if o]
        validate(objects, "base")
        print(f"PASS: {len(objects)} objects of the base valid (python3-kubernetes "
              f"{k8s.__version__ if hasattr(k8s, '__version__') else ''})")
        return
    version = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True)
    print(f"kubectl: {version.stdout.strip().splitlines()[0] if version.stdout else '?'}")
    # A real copy: kustomize does not follow the runfiles' symlinked files.
    tmp = tempfile.mkdtemp()
    tree = os.path.join(tmp, "k8s")
    shutil.copytree(K8S, tree)
    total = 0
    for overlay in ("soft", "rdma"):
        path = os.path.join(tree, "overlays", overlay)
        out = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"kubectl kustomize deploy/k8s/overlays/{overlay}: {out.stderr}")
        objects = [o for o in yaml.safe_load_all(out.stdout) if o]
        validate(objects, overlay)
        check_promises(objects, rdma=overlay == "rdma")
        kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        print(f"  {overlay}: {len(objects)} objects valid: {', '.join(kinds)}")
        total += len(objects)
    # The check bites: a misspelled field deep in a pod template and a wrong type are caught.
    bad = copy.deepcopy(by_kind(objects, "StatefulSet", "kvserver"))
    bad["spec"]["replicas"] = "3"
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/"
    errors = []
    check(bad, model_of(bad), "probe", errors)
    if len(errors) != 2:
        fail(f"a misspelled field and a string replica count gave {errors}")
    shutil.rmtree(tmp)
    print(f"PASS: {total} rendered objects valid against the Kubernetes API models")


if __name__ == "__main__":
    main()
