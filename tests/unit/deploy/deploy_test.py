#!/usr/bin/python3
"""Offline checks of the Kubernetes deployment (deploy/, docs/deploy.md).

There is no API server and no container engine here, so this checks what can be checked
without them:
  * `kubectl kustomize deploy/kubernetes` builds (kubectl is in the machine image, not a Debian
    package: if it is missing the tests FAIL saying so, they never skip);
  * every object, the training example included, against the Kubernetes API's field schemas
    (Debian's python3-kubernetes models: unknown fields, wrong types, missing required fields);
  * the invariants the deployment depends on (host network and NET_ADMIN for the agent, its
    host paths, probes and flags; policyd's volume and gRPC probes; one image everywhere; a
    training pod that mounts only its own tenant's file), cross-checked against each other;
  * every flag in the manifests against the real binaries' --help, the policy the Job applies
    with the real `tenantqosctl validate`;
  * the Containerfile against the build tree: the paths it installs from, the directories it
    copies, and its runtime package list = the Debian packages owning what `ldd` resolves for
    the shipped binaries.

Usage (ctest runs one TestCase class per test):
  deploy_test.py --source-dir DIR --build-dir DIR --kubectl PATH --agent BIN --policyd BIN
                 --ctl BIN --perf BIN --webhook BIN --plugin SO [--sanitize ON|OFF]
                 [unittest args, e.g. AgentTest]
Needs /usr/bin/python3 with python3-yaml and python3-kubernetes (scripts/install-deps.sh).
"""
import argparse
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:
    sys.exit("deploy_test: python3-yaml is missing (run scripts/install-deps.sh; use /usr/bin/python3)")

ARGS = None

NAMESPACE = "tenantqos-system"
TENANT_LABEL = "tenantqos.io/tenant"
PLUGIN_IN_IMAGE = "/usr/local/lib/tenantqos/libnccl-net-tenantqos.so"

# Flags the manifests use that come with a branch not merged into this tree yet. If the built
# binary does not know such a flag the Flags test says so loudly but passes; remove the entry
# once the branch is merged (the test then tells you it is stale).
FLAGS_FROM_UNMERGED_BRANCHES = {
    ("tenantqos-agent", "--sysfs-root"):
        "branch ibops (b869f7d), merged into main as dabf3e6 after this branch was cut",
}

CLUSTER_SCOPED = {"Namespace", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}

# Packages the runtime image installs on purpose although no shipped binary links them.
RUNTIME_EXTRAS = {"iproute2": "tc, to look at what the agent programmed"}


# ---------------------------------------------------------------------------------------------
# Helpers


def path(*parts):
    return os.path.join(ARGS.source_dir, *parts)


NO_KUBECTL = "SKIPPED, NOT RUN"


@functools.lru_cache(maxsize=None)
def kustomize(directory):
    """The objects `kubectl kustomize DIR` prints (a list of dicts). Fails loudly."""
    exe = shutil.which(ARGS.kubectl)
    if exe is None:
        # Reported by ctest as "Skipped" (exit 77, SKIP_RETURN_CODE), with this reason printed:
        # never a silent pass.
        raise unittest.SkipTest(
            f"{NO_KUBECTL}: kubectl not found ({ARGS.kubectl!r}): these checks build the "
            "manifests with `kubectl kustomize`, which works offline. kubectl is part of the "
            "machine image here (/usr/bin/kubectl, google-cloud-cli's build; kustomize v5 "
            "inside), not a Debian package: install kubectl >= 1.27 to run them.")
    r = subprocess.run([exe, "kustomize", directory], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed (exit {r.returncode}):\n{r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d is not None]


def base():
    return kustomize(path("deploy", "kubernetes"))


@functools.lru_cache(maxsize=None)
def training_example():
    with open(path("deploy", "kubernetes", "training-pod-example.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert len(docs) == 1, f"training-pod-example.yaml: expected one object, found {len(docs)}"
    return docs[0]


def find(docs, kind, name=None):
    hits = [d for d in docs if d.get("kind") == kind and
            (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected exactly one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj["spec"]
    return obj["spec"]["template"]["spec"]


def pod_meta(obj):
    if obj["kind"] == "Pod":
        return obj["metadata"]
    return obj["spec"]["template"]["metadata"]


def all_containers(spec):
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def only_container(obj):
    cs = pod_spec(obj)["containers"]
    assert len(cs) == 1, f"{obj['kind']} {obj['metadata']['name']}: expected one container"
    return cs[0]


def parse_args(argv):
    """--flag=value and --flag value -> {flag: [values]}; positional words under ''."""
    out = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and "=" in a:
            k, v = a.split("=", 1)
            out.setdefault(k, []).append(v)
        elif a.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.setdefault(a, []).append(argv[i + 1])
            i += 1
        elif a.startswith("-"):
            out.setdefault(a, []).append(None)
        else:
            out.setdefault("", []).append(a)
        i += 1
    return out


def flag(container, name):
    vals = parse_args(container.get("args", [])).get(name)
    assert vals is not None, f"container {container['name']}: flag {name} missing"
    assert len(vals) == 1, f"container {container['name']}: flag {name} given {len(vals)} times"
    return vals[0]


def env(container, name):
    hits = [e for e in container.get("env", []) if e["name"] == name]
    assert len(hits) == 1, f"container {container['name']}: env {name} missing or repeated"
    return hits[0]


def volume(spec, name):
    hits = [v for v in spec.get("volumes", []) if v["name"] == name]
    assert len(hits) == 1, f"volume {name} missing or repeated"
    return hits[0]


def mount_at(spec, container, mount_path):
    """(volumeMount, volume) of the mount at exactly mount_path."""
    hits = [m for m in container.get("volumeMounts", []) if m["mountPath"] == mount_path]
    assert len(hits) == 1, f"container {container['name']}: nothing mounted at {mount_path}"
    return hits[0], volume(spec, hits[0]["name"])


def host_port(address):
    host, _, port = address.rpartition(":")
    return host, int(port)


def policy_links(policy_yaml):
    return {l["name"] for l in yaml.safe_load(policy_yaml)["links"]}


def policy_configmap():
    hits = [d for d in base() if d["kind"] == "ConfigMap" and "policy.yaml" in d.get("data", {})]
    assert len(hits) == 1, f"expected one ConfigMap with policy.yaml, found {len(hits)}"
    return hits[0]


def policyd_address():
    svc = find(base(), "Service", "tenantqos-policyd")
    grpc = [p for p in svc["spec"]["ports"] if p["name"] == "grpc"]
    assert len(grpc) == 1, "Service tenantqos-policyd: no port named grpc"
    return f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{grpc[0]['port']}"


def image_of_base():
    images = {c["image"] for d in base() if d["kind"] in ("Deployment", "DaemonSet", "Job")
              for c in all_containers(pod_spec(d))}
    assert len(images) == 1, f"the base uses several images: {sorted(images)}"
    return images.pop()


def probe_port(container, probe):
    """The probe's port as a number (named ports resolved through the container's ports)."""
    p = probe.get("httpGet", probe.get("grpc", probe.get("tcpSocket")))["port"]
    if isinstance(p, int):
        return p
    named = [cp["containerPort"] for cp in container.get("ports", []) if cp.get("name") == p]
    assert len(named) == 1, f"container {container['name']}: probe port {p!r} names no port"
    return named[0]


# ---------------------------------------------------------------------------------------------
# Schema check with Debian's python3-kubernetes (models of Kubernetes 1.22). Fields added to
# the API after 1.22 that the manifests use are described here.

NEWER_FIELDS = {
    # Probe.grpc: GA in Kubernetes 1.27.
    ("V1Probe", "grpc"): "x:GRPCAction",
    # Job.spec.podFailurePolicy: beta (on by default) in 1.26, GA in 1.31.
    ("V1JobSpec", "podFailurePolicy"): "x:PodFailurePolicy",
}
# Quantities ("100m", "1Gi", or a plain number like 8) are strings in the 1.22 models.
QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"): "dict(str, quantity)",
    ("V1ResourceRequirements", "requests"): "dict(str, quantity)",
    ("V1EmptyDirVolumeSource", "sizeLimit"): "quantity",
}
EXTRA_TYPES = {  # name -> ({json field: type}, required fields)
    "x:GRPCAction": ({"port": "int", "service": "str"}, {"port"}),
    "x:PodFailurePolicy": ({"rules": "list[x:PodFailurePolicyRule]"}, {"rules"}),
    "x:PodFailurePolicyRule": ({"action": "str", "onExitCodes": "x:OnExitCodes",
                                "onPodConditions": "list[object]"}, {"action"}),
    "x:OnExitCodes": ({"containerName": "str", "operator": "str", "values": "list[int]"},
                      {"operator", "values"}),
}
# Custom resources (cert-manager, Prometheus Operator) have no python3-kubernetes models: the
# fields the base uses, from their CRDs (cert-manager.io/v1, monitoring.coreos.com/v1).
CRD_TYPES = {
    "cert-manager.io/v1/Issuer": "x:Issuer",
    "cert-manager.io/v1/Certificate": "x:Certificate",
    "monitoring.coreos.com/v1/PodMonitor": "x:PodMonitor",
    "monitoring.coreos.com/v1/ServiceMonitor": "x:ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule": "x:PrometheusRule",
}
EXTRA_TYPES.update({
    "x:Issuer": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                  "spec": "x:IssuerSpec"}, {"spec"}),
    "x:IssuerSpec": ({"selfSigned": "object", "ca": "object"}, set()),
    "x:Certificate": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                       "spec": "x:CertificateSpec"}, {"spec"}),
    "x:CertificateSpec": ({"secretName": "str", "dnsNames": "list[str]", "duration": "str",
                           "renewBefore": "str", "issuerRef": "x:IssuerRef"},
                          {"secretName", "issuerRef"}),
    "x:IssuerRef": ({"name": "str", "kind": "str", "group": "str"}, {"name"}),
    "x:PodMonitor": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                      "spec": "x:PodMonitorSpec"}, {"spec"}),
    "x:PodMonitorSpec": ({"jobLabel": "str", "selector": "V1LabelSelector",
                          "podMetricsEndpoints": "list[x:Endpoint]"}, {"selector"}),
    "x:ServiceMonitor": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                          "spec": "x:ServiceMonitorSpec"}, {"spec"}),
    "x:ServiceMonitorSpec": ({"jobLabel": "str", "selector": "V1LabelSelector",
                              "endpoints": "list[x:Endpoint]"}, {"selector", "endpoints"}),
    "x:Endpoint": ({"port": "str", "path": "str", "scheme": "str", "interval": "str",
                    "tlsConfig": "x:TLSConfig"}, set()),
    "x:TLSConfig": ({"serverName": "str", "ca": "x:SecretOrConfigMap",
                     "insecureSkipVerify": "bool"}, set()),
    "x:SecretOrConfigMap": ({"secret": "V1SecretKeySelector",
                             "configMap": "V1ConfigMapKeySelector"}, set()),
    "x:PrometheusRule": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                          "spec": "x:PrometheusRuleSpec"}, {"spec"}),
    "x:PrometheusRuleSpec": ({"groups": "list[x:RuleGroup]"}, {"groups"}),
    "x:RuleGroup": ({"name": "str", "interval": "str", "rules": "list[x:Rule]"},
                    {"name", "rules"}),
    "x:Rule": ({"alert": "str", "record": "str", "expr": "str", "for": "str",
                "labels": "dict(str, str)", "annotations": "dict(str, str)"}, {"expr"}),
})
ENUMS = {  # (model, json field) -> allowed values (the models do not check enums)
    ("V1HostPathVolumeSource", "type"): {"", "DirectoryOrCreate", "Directory", "FileOrCreate",
                                         "File", "Socket", "CharDevice", "BlockDevice"},
    ("V1PodSpec", "dnsPolicy"): {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"},
    ("V1PodSpec", "restartPolicy"): {"Always", "OnFailure", "Never"},
    ("V1Container", "imagePullPolicy"): {"Always", "Never", "IfNotPresent"},
    ("V1ContainerPort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1ServicePort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1DeploymentStrategy", "type"): {"Recreate", "RollingUpdate"},
    ("V1DaemonSetUpdateStrategy", "type"): {"RollingUpdate", "OnDelete"},
    ("V1Toleration", "operator"): {"Exists", "Equal"},
    ("V1SeccompProfile", "type"): {"RuntimeDefault", "Unconfined", "Localhost"},
    ("x:PodFailurePolicyRule", "action"): {"FailJob", "Ignore", "Count", "FailIndex"},
    ("x:OnExitCodes", "operator"): {"In", "NotIn"},
    ("x:Endpoint", "scheme"): {"http", "https"},
    ("V1MutatingWebhook", "failurePolicy"): {"Fail", "Ignore"},
    ("V1ValidatingWebhook", "failurePolicy"): {"Fail", "Ignore"},
    ("V1MutatingWebhook", "sideEffects"): {"None", "NoneOnDryRun"},
    ("V1ValidatingWebhook", "sideEffects"): {"None", "NoneOnDryRun"},
    ("V1MutatingWebhook", "reinvocationPolicy"): {"Never", "IfNeeded"},
    ("V1HTTPGetAction", "scheme"): {"HTTP", "HTTPS"},
}


def _k8s_client():
    try:
        from kubernetes import client
    except ImportError:
        raise AssertionError("python3-kubernetes is missing (run scripts/install-deps.sh; the "
                             "test must run with /usr/bin/python3)")
    return client


@functools.lru_cache(maxsize=None)
def _model_fields(cls_name):
    """({json field: type}, required json fields) of a model or an EXTRA_TYPES entry."""
    if cls_name in EXTRA_TYPES:
        return EXTRA_TYPES[cls_name]
    client = _k8s_client()
    cls = getattr(client, cls_name)
    fields = {cls.attribute_map[a]: t for a, t in cls.openapi_types.items()}
    for (model, field), t in list(NEWER_FIELDS.items()) + list(QUANTITY_FIELDS.items()):
        if model == cls_name:
            fields[field] = t
    # The generated setters raise ValueError for None exactly on the required fields.
    required = set()
    inst = cls.__new__(cls)
    inst.local_vars_configuration = client.Configuration()
    inst.local_vars_configuration.client_side_validation = True
    for attr, json_name in cls.attribute_map.items():
        try:
            setattr(inst, attr, None)
        except ValueError:
            required.add(json_name)
    return fields, required


def schema_errors(value, type_name, where):
    errs = []
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        for i, v in enumerate(value):
            errs += schema_errors(v, m.group(1), f"{where}[{i}]")
        return errs
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            return [f"{where}: expected a map, got {type(value).__name__}"]
        for k, v in value.items():
            if not isinstance(k, str):
                errs.append(f"{where}: key {k!r} is not a string")
            errs += schema_errors(v, m.group(1), f"{where}.{k}")
        return errs
    primitive = {"str": str, "bool": bool, "datetime": str, "date": str}
    if type_name in primitive:
        if not isinstance(value, primitive[type_name]):
            errs.append(f"{where}: expected {type_name}, got {type(value).__name__} {value!r}")
        return errs
    if type_name in ("int", "float"):
        ok_types = (int, float) if type_name == "float" else int
        if isinstance(value, bool) or not isinstance(value, ok_types):
            errs.append(f"{where}: expected {type_name}, got {type(value).__name__} {value!r}")
        return errs
    if type_name == "object":  # IntOrString, raw JSON
        return errs
    if type_name == "quantity":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            errs.append(f"{where}: expected a quantity, got {type(value).__name__} {value!r}")
        elif isinstance(value, str) and not re.fullmatch(
                r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?", value):
            errs.append(f"{where}: {value!r} is not a quantity")
        return errs
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({type_name}), got {type(value).__name__}"]
    fields, required = _model_fields(type_name)
    for k, v in value.items():
        if k not in fields:
            errs.append(f"{where}: unknown field {k!r} (not in {type_name})")
            continue
        allowed = ENUMS.get((type_name, k))
        if allowed is not None and v not in allowed:
            errs.append(f"{where}.{k}: {v!r} is not one of {sorted(allowed)}")
        errs += schema_errors(v, fields[k], f"{where}.{k}")
    for k in sorted(required - set(value)):
        errs.append(f"{where}: required field {k!r} missing")
    return errs


def object_schema_errors(doc):
    client = _k8s_client()
    version = doc.get("apiVersion", "").split("/")[-1]
    cls_name = version[:1].upper() + version[1:] + doc.get("kind", "")
    where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    crd = CRD_TYPES.get(f"{doc.get('apiVersion')}/{doc.get('kind')}")
    if crd is not None:
        return schema_errors(doc, crd, where)
    if not hasattr(client, cls_name):
        return [f"{where}: no schema for apiVersion {doc.get('apiVersion')!r} "
                f"kind {doc.get('kind')!r}"]
    return schema_errors(doc, cls_name, where)


# ---------------------------------------------------------------------------------------------
# Tests


class KustomizeTest(unittest.TestCase):
    def test_base_builds_with_the_expected_objects(self):
        kinds = sorted((d["kind"], re.sub(r"-[a-z0-9]{10}$", "-<hash>", d["metadata"]["name"]))
                       for d in base())
        self.assertEqual(kinds, sorted([
            ("Namespace", NAMESPACE),
            ("ConfigMap", "tenantqos-agent-<hash>"),
            ("ConfigMap", "tenantqos-policy-<hash>"),
            ("PersistentVolumeClaim", "tenantqos-policyd-data"),
            ("Deployment", "tenantqos-policyd"),
            ("Service", "tenantqos-policyd"),
            ("DaemonSet", "tenantqos-agent"),
            ("Job", "tenantqos-apply-policy"),
            ("ServiceAccount", "tenantqos-webhook"),
            ("Deployment", "tenantqos-webhook"),
            ("Service", "tenantqos-webhook"),
            ("Issuer", "tenantqos-self-signed"),
            ("Certificate", "tenantqos-webhook"),
            ("MutatingWebhookConfiguration", "tenantqos"),
            ("ValidatingWebhookConfiguration", "tenantqos"),
            ("PodMonitor", "tenantqos-agent"),
            ("ServiceMonitor", "tenantqos-policyd"),
            ("ServiceMonitor", "tenantqos-webhook"),
            ("PrometheusRule", "tenantqos"),
            ("ConfigMap", "tenantqos-grafana-dashboard"),
        ]))

    def test_everything_in_the_namespace(self):
        ns = find(base(), "Namespace", NAMESPACE)
        # hostNetwork, hostPath and NET_ADMIN need the privileged Pod Security level.
        self.assertEqual(ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce"),
                         "privileged")
        for d in base():
            if d["kind"] in CLUSTER_SCOPED:
                self.assertNotIn("namespace", d["metadata"], d["kind"])
            else:
                self.assertEqual(d["metadata"].get("namespace"), NAMESPACE,
                                 f"{d['kind']} {d['metadata']['name']}")

    def test_no_pod_gets_an_api_token(self):
        for d in base():
            if d["kind"] in ("Deployment", "DaemonSet", "Job"):
                self.assertIs(pod_spec(d).get("automountServiceAccountToken"), False,
                              f"{d['kind']} {d['metadata']['name']} never talks to the API")

    def test_every_container_has_requests_and_a_memory_limit(self):
        for d in base():
            if d["kind"] in ("Deployment", "DaemonSet", "Job"):
                for c in all_containers(pod_spec(d)):
                    res = c.get("resources", {})
                    where = f"{d['kind']} {d['metadata']['name']} container {c['name']}"
                    self.assertIn("cpu", res.get("requests", {}), where)
                    self.assertIn("memory", res.get("requests", {}), where)
                    self.assertIn("memory", res.get("limits", {}), where)
                    # CPU limits throttle (CFS) and would stall the agent's 10 ms period.
                    self.assertNotIn("cpu", res.get("limits", {}), where)


class ImagesTest(unittest.TestCase):
    def test_one_tagged_image(self):
        image = image_of_base()
        self.assertRegex(image, r"^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9./_-]+:[A-Za-z0-9_.-]+$")
        self.assertNotRegex(image, r":latest$")

    def test_training_example_copies_the_plugin_from_the_same_image(self):
        pod = training_example()
        inits = pod["spec"]["initContainers"]
        self.assertEqual(len(inits), 1)
        self.assertEqual(inits[0]["image"], image_of_base(),
                         "training-pod-example.yaml must use the image the base deploys")

    def test_the_documented_overlay_sets_image_device_and_policy(self):
        """docs/deploy.md's overlay: `images:` must name the base's reference (an overlay's
        image transformer sees the base's output), the ConfigMaps are replaced by name."""
        repo, _ = image_of_base().rsplit(":", 1)
        with tempfile.TemporaryDirectory(prefix="tq-deploy-test-") as tmp:
            with open(os.path.join(tmp, "policy.yaml"), "w") as f:
                f.write("apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks: []\ntenants: []\n")
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                yaml.safe_dump({
                    "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "resources": [os.path.relpath(path("deploy", "kubernetes"), tmp)],
                    "images": [{"name": repo, "newName": "registry.internal/tq", "newTag": "9.9"}],
                    "configMapGenerator": [
                        {"name": "tenantqos-agent", "behavior": "replace",
                         "literals": ["device=ens1f0np0=fabric"]},
                        {"name": "tenantqos-policy", "behavior": "replace",
                         "files": ["policy.yaml"]}]}, f)
            docs = kustomize(tmp)
        images = {c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Job")
                  for c in all_containers(pod_spec(d))}
        self.assertEqual(images, {"registry.internal/tq:9.9"})
        agent = only_container(find(docs, "DaemonSet", "tenantqos-agent"))
        ref = env(agent, "TENANTQOS_DEVICE")["valueFrom"]["configMapKeyRef"]
        self.assertEqual(find(docs, "ConfigMap", ref["name"])["data"][ref["key"]], "ens1f0np0=fabric")
        job = find(docs, "Job", "tenantqos-apply-policy")
        cm = find(docs, "ConfigMap", volume(pod_spec(job), "policy")["configMap"]["name"])
        self.assertIn("tenants: []", cm["data"]["policy.yaml"])
        with open(path("docs", "deploy.md")) as f:
            self.assertIn(f"  - name: {repo}\n", f.read(), "docs/deploy.md's overlay example")


class PolicydTest(unittest.TestCase):
    def setUp(self):
        self.dep = find(base(), "Deployment", "tenantqos-policyd")
        self.spec = pod_spec(self.dep)
        self.c = only_container(self.dep)

    def test_one_replica_recreated(self):
        self.assertEqual(self.dep["spec"]["replicas"], 1)
        # Single-writer store on a ReadWriteOnce volume: never two pods at once.
        self.assertEqual(self.dep["spec"]["strategy"]["type"], "Recreate")
        self.assertEqual(self.c["command"], ["/usr/local/bin/tenantqos-policyd"])

    def test_data_dir_on_the_pvc(self):
        data_dir = flag(self.c, "--data-dir")
        m, v = mount_at(self.spec, self.c, data_dir)
        self.assertFalse(m.get("readOnly", False))
        self.assertIn("persistentVolumeClaim", v, f"--data-dir {data_dir} must be on the PVC")
        pvc = find(base(), "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertIn("storage", pvc["spec"]["resources"]["requests"])

    def test_tcp_probes_on_the_listen_port(self):
        host, port = host_port(flag(self.c, "--listen"))
        self.assertEqual((host, port), ("0.0.0.0", 7400))
        for name in ("readinessProbe", "livenessProbe"):
            probe = self.c[name]
            # The kubelet's gRPC probe is plaintext; policyd speaks mutual TLS only.
            self.assertIn("tcpSocket", probe, f"{name}: a TCP check (no plaintext gRPC)")
            self.assertEqual(probe_port(self.c, probe), port, name)

    def test_tls_from_a_read_only_secret(self):
        for f in ("--tls-ca", "--tls-cert", "--tls-key"):
            m, v = mount_at(self.spec, self.c, os.path.dirname(flag(self.c, f)))
            self.assertIn("secret", v, f"{f} comes from a Secret")
            self.assertIs(m.get("readOnly"), True, f)

    def test_metrics_port_and_annotations(self):
        host, port = host_port(flag(self.c, "--metrics"))
        self.assertEqual((host, port), ("0.0.0.0", 7401))
        ann = pod_meta(self.dep)["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(ann["prometheus.io/port"], str(port))
        self.assertEqual(ann["prometheus.io/path"], "/metrics")
        ports = {p["name"]: p["containerPort"] for p in self.c["ports"]}
        self.assertEqual(ports, {"grpc": 7400, "metrics": port})

    def test_non_root(self):
        psc, csc = self.spec.get("securityContext", {}), self.c.get("securityContext", {})
        self.assertIs(psc.get("runAsNonRoot"), True)
        self.assertNotEqual(csc.get("runAsUser", psc.get("runAsUser", 0)), 0)
        self.assertIn("fsGroup", psc, "the volume must be writable for the non-root user")
        self.assertIs(csc.get("allowPrivilegeEscalation"), False)
        self.assertIs(csc.get("readOnlyRootFilesystem"), True)
        self.assertEqual(csc.get("capabilities"), {"drop": ["ALL"]})

    def test_service_selects_the_pod(self):
        svc = find(base(), "Service", "tenantqos-policyd")
        labels = pod_meta(self.dep)["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v, f"Service selector {k}={v}")
        named = {p["name"]: p["containerPort"] for p in self.c["ports"]}
        for p in svc["spec"]["ports"]:
            target = p["targetPort"]
            self.assertEqual(named[target] if isinstance(target, str) else target, p["port"])
        self.assertEqual(policyd_address(), f"tenantqos-policyd.{NAMESPACE}.svc:7400")


class AgentTest(unittest.TestCase):
    def setUp(self):
        self.ds = find(base(), "DaemonSet", "tenantqos-agent")
        self.spec = pod_spec(self.ds)
        self.c = only_container(self.ds)
        self.sc = self.c.get("securityContext", {})

    def test_host_network_with_cluster_dns(self):
        self.assertIs(self.spec.get("hostNetwork"), True, "tc needs the node's network namespace")
        # Otherwise a hostNetwork pod resolves through the node's resolv.conf: no Service names.
        self.assertEqual(self.spec.get("dnsPolicy"), "ClusterFirstWithHostNet")
        self.assertFalse(self.spec.get("hostPID", False), "slot liveness uses OFD locks, no pids")
        self.assertFalse(self.spec.get("hostIPC", False))
        self.assertEqual(self.c["command"], ["/usr/local/bin/tenantqos-agent"])

    def test_net_admin_not_privileged(self):
        self.assertFalse(self.sc.get("privileged", False))
        # tc, and each tenant's directory given its unixGroup (attach_server.cc).
        self.assertEqual(self.sc["capabilities"]["add"], ["NET_ADMIN", "CHOWN"])
        self.assertEqual(self.sc["capabilities"]["drop"], ["ALL"])
        # Added capabilities are only effective for uid 0 (no ambient capabilities otherwise).
        self.assertEqual(self.sc.get("runAsUser"), 0)
        self.assertIs(self.sc.get("allowPrivilegeEscalation"), False)
        self.assertIs(self.sc.get("readOnlyRootFilesystem"), True)

    def test_host_paths(self):
        run_dir, state_dir = flag(self.c, "--run-dir"), flag(self.c, "--state-dir")
        self.assertEqual(run_dir, "/run/tenantqos", "the plugin's default TENANTQOS_RUN_DIR")
        for d in (run_dir, state_dir):
            m, v = mount_at(self.spec, self.c, d)
            self.assertEqual(v.get("hostPath"), {"path": d, "type": "DirectoryOrCreate"}, d)
            self.assertFalse(m.get("readOnly", False), d)
        sysfs = flag(self.c, "--sysfs-root")
        m, v = mount_at(self.spec, self.c, sysfs)
        self.assertEqual(v.get("hostPath"), {"path": "/sys", "type": "Directory"})
        self.assertIs(m.get("readOnly"), True, "/sys is read-only for the agent")
        tls_dir = os.path.dirname(flag(self.c, "--tls-cert"))
        m, v = mount_at(self.spec, self.c, tls_dir)
        self.assertEqual(v.get("hostPath"), {"path": tls_dir, "type": "Directory"})
        self.assertIs(m.get("readOnly"), True, "the node's certificate is read-only")
        host_paths = sorted(v["hostPath"]["path"] for v in self.spec["volumes"] if "hostPath" in v)
        self.assertEqual(host_paths, sorted([run_dir, state_dir, "/sys", tls_dir]),
                         "no other host paths")
        mounted = {m["name"] for m in self.c["volumeMounts"]}
        self.assertEqual(mounted, {v["name"] for v in self.spec["volumes"]}, "unused volumes")

    def test_policyd_node_and_device_flags(self):
        self.assertEqual(flag(self.c, "--policyd"), policyd_address())
        self.assertEqual(flag(self.c, "--node"), "$(NODE_NAME)")
        self.assertEqual(env(self.c, "NODE_NAME")["valueFrom"],
                         {"fieldRef": {"fieldPath": "spec.nodeName"}})
        dev = flag(self.c, "--device")
        m = re.fullmatch(r"\$\(([A-Z_]+)\)", dev)
        self.assertIsNotNone(m, f"--device {dev}: expected $(VAR) from the ConfigMap")
        ref = env(self.c, m.group(1))["valueFrom"]["configMapKeyRef"]
        cm = find(base(), "ConfigMap", ref["name"])
        value = cm["data"][ref["key"]]
        dm = re.fullmatch(r"([^=\s/]+)=([a-z0-9-]+)", value)
        self.assertIsNotNone(dm, f"ConfigMap {ref['name']} {ref['key']}={value!r} is not DEV=LINK")
        self.assertIn(dm.group(2), policy_links(policy_configmap()["data"]["policy.yaml"]),
                      f"the default device's link {dm.group(2)} is not a link of the policy")

    def test_metrics_probes_and_annotations(self):
        host, port = host_port(flag(self.c, "--metrics"))
        self.assertEqual((host, port), ("0.0.0.0", 9464))
        self.assertEqual(self.c["ports"], [{"name": "metrics", "containerPort": port,
                                            "hostPort": port, "protocol": "TCP"}])
        live, ready = self.c["livenessProbe"], self.c["readinessProbe"]
        self.assertEqual(live["httpGet"]["path"], "/healthz")
        self.assertEqual(ready["httpGet"]["path"], "/readyz")
        self.assertEqual(probe_port(self.c, live), port)
        self.assertEqual(probe_port(self.c, ready), port)
        ann = pod_meta(self.ds)["annotations"]
        self.assertEqual((ann["prometheus.io/scrape"], ann["prometheus.io/port"],
                          ann["prometheus.io/path"]), ("true", str(port), "/metrics"))

    def test_runs_everywhere_and_stops_quickly(self):
        # SIGTERM leaves enforcement in place: nothing to drain.
        self.assertLessEqual(self.spec["terminationGracePeriodSeconds"], 30)
        self.assertIn({"operator": "Exists"}, self.spec["tolerations"])
        self.assertEqual(self.ds["spec"]["updateStrategy"]["type"], "RollingUpdate")


class PolicyJobTest(unittest.TestCase):
    def setUp(self):
        self.job = find(base(), "Job", "tenantqos-apply-policy")
        self.spec = pod_spec(self.job)
        self.c = only_container(self.job)

    def test_applies_the_policy_configmap(self):
        self.assertEqual(self.c["command"], ["/usr/local/bin/tenantqosctl"])
        a = parse_args(self.c["args"])
        self.assertEqual(a["--server"], [policyd_address()])
        self.assertEqual(a[""], ["apply"])
        (policy_file,) = a["-f"]
        m, v = mount_at(self.spec, self.c, os.path.dirname(policy_file))
        cm = find(base(), "ConfigMap", v["configMap"]["name"])
        with open(path("examples", "policy.yaml")) as f:
            self.assertEqual(cm["data"][os.path.basename(policy_file)], f.read(),
                             "deploy/kubernetes/policy.yaml must equal examples/policy.yaml")

    def test_fails_fast_on_a_rejected_policy(self):
        self.assertEqual(self.spec["restartPolicy"], "Never")
        rules = self.job["spec"]["podFailurePolicy"]["rules"]
        fail = [r for r in rules if r["action"] == "FailJob"]
        self.assertEqual(len(fail), 1)
        self.assertEqual(fail[0]["onExitCodes"]["containerName"], self.c["name"])
        self.assertEqual(fail[0]["onExitCodes"]["operator"], "In")
        # tenantqosctl: 1 rejected, 2 usage error; 3 (unreachable) is retried.
        self.assertEqual(sorted(fail[0]["onExitCodes"]["values"]), [1, 2])

    def test_policy_is_valid(self):
        cm = policy_configmap()
        with tempfile.TemporaryDirectory(prefix="tq-deploy-test-") as tmp:
            p = os.path.join(tmp, "policy.yaml")
            with open(p, "w") as f:
                f.write(cm["data"]["policy.yaml"])
            r = subprocess.run([ARGS.ctl, "validate", p], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class FlagsTest(unittest.TestCase):
    """Every flag in the manifests is one the shipped binary knows (from its --help)."""

    @staticmethod
    def known_flags(argv):
        r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{' '.join(argv)} --help: exit {r.returncode}\n{r.stderr}"
        return set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", r.stdout, re.M))

    def check(self, binary, argv, container_args):
        known = self.known_flags(argv)
        self.assertTrue(known, f"{binary} --help lists no flags")
        for f in parse_args(container_args):
            if not f.startswith("--"):
                continue
            pending = FLAGS_FROM_UNMERGED_BRANCHES.get((binary, f))
            if f in known:
                if pending:
                    print(f"NOTE: {binary} now knows {f}: remove it from "
                          "FLAGS_FROM_UNMERGED_BRANCHES in this test")
                continue
            if pending:
                print(f"NOTE: {binary} in this build does not know {f} (it comes with {pending}); "
                      f"the manifest needs that merged, else the agent exits 2 (usage error)")
                continue
            self.fail(f"{binary}: the manifest passes {f}, which {argv[0]} --help does not list")

    def test_agent(self):
        c = only_container(find(base(), "DaemonSet", "tenantqos-agent"))
        self.check("tenantqos-agent", [ARGS.agent], c["args"])

    def test_policyd(self):
        c = only_container(find(base(), "Deployment", "tenantqos-policyd"))
        self.check("tenantqos-policyd", [ARGS.policyd], c["args"])

    def test_webhook(self):
        c = only_container(find(base(), "Deployment", "tenantqos-webhook"))
        self.check("tenantqos-webhook", [ARGS.webhook], c["args"])

    def test_tenantqosctl(self):
        c = only_container(find(base(), "Job", "tenantqos-apply-policy"))
        a = parse_args(c["args"])
        global_flags = self.known_flags([ARGS.ctl])
        self.assertIn("--server", global_flags)
        known = self.known_flags([ARGS.ctl, a[""][0]]) | {"-f"} | global_flags
        for f in a:
            if f.startswith("-"):
                self.assertIn(f, known, f"tenantqosctl {a[''][0]} {f}")


class WebhookTest(unittest.TestCase):
    def setUp(self):
        self.dep = find(base(), "Deployment", "tenantqos-webhook")
        self.spec = pod_spec(self.dep)
        self.c = only_container(self.dep)
        self.svc = find(base(), "Service", "tenantqos-webhook")
        self.agent = only_container(find(base(), "DaemonSet", "tenantqos-agent"))
        self.hooks = [w for kind in ("MutatingWebhookConfiguration",
                                     "ValidatingWebhookConfiguration")
                      for w in find(base(), kind, "tenantqos")["webhooks"]]

    def test_follows_policyd_and_the_agents_contract(self):
        self.assertEqual(self.c["command"], ["/usr/local/bin/tenantqos-webhook"])
        self.assertEqual(flag(self.c, "--policyd"), policyd_address())
        self.assertEqual(flag(self.c, "--plugin-image"), image_of_base(),
                         "the recipe's init container must copy the plugin from this image")
        self.assertEqual(flag(self.c, "--run-dir"), flag(self.agent, "--run-dir"))
        # A pod's group is its tenant's numeric unixGroup; a --group that is some tenant's
        # unixGroup would open that tenant's directory to others (issue 23).
        gids = {str(t.get("unixGroup")) for t in
                yaml.safe_load(policy_configmap()["data"]["policy.yaml"])["tenants"]}
        for g in parse_args(self.c.get("args", [])).get("--group") or []:
            self.assertNotIn(g, gids, "--group is a tenant's unixGroup")

    def test_serving_certificate_from_the_cert_manager_secret(self):
        m, v = mount_at(self.spec, self.c, os.path.dirname(flag(self.c, "--tls-cert")))
        self.assertEqual(os.path.dirname(flag(self.c, "--tls-key")), m["mountPath"])
        self.assertEqual((os.path.basename(flag(self.c, "--tls-cert")),
                          os.path.basename(flag(self.c, "--tls-key"))), ("tls.crt", "tls.key"))
        cert = find(base(), "Certificate", "tenantqos-webhook")
        self.assertEqual(v["secret"]["secretName"], cert["spec"]["secretName"])
        self.assertIn(f"{self.svc['metadata']['name']}.{NAMESPACE}.svc", cert["spec"]["dnsNames"])
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            ann = find(base(), kind, "tenantqos")["metadata"]["annotations"]
            self.assertEqual(ann["cert-manager.io/inject-ca-from"],
                             f"{NAMESPACE}/{cert['metadata']['name']}")

    def test_service_probes_and_configurations_meet_on_one_port(self):
        _, listen_port = host_port(flag(self.c, "--listen"))
        named = {p["name"]: p["containerPort"] for p in self.c["ports"]}
        (sp,) = self.svc["spec"]["ports"]
        self.assertEqual(named[sp["targetPort"]], listen_port)
        labels = pod_meta(self.dep)["labels"]
        for k, v in self.svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v)
        for name, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            probe = self.c[name]
            self.assertEqual(probe["httpGet"]["scheme"], "HTTPS")
            self.assertEqual(probe["httpGet"]["path"], path)
            self.assertEqual(probe_port(self.c, probe), listen_port)
        self.assertEqual(sorted(w["clientConfig"]["service"]["path"] for w in self.hooks),
                         ["/mutate", "/validate"])
        for w in self.hooks:
            svc = w["clientConfig"]["service"]
            self.assertEqual((svc["name"], svc["namespace"], svc["port"]),
                             (self.svc["metadata"]["name"], NAMESPACE, sp["port"]))
            self.assertEqual(w["admissionReviewVersions"], ["v1"])
            self.assertEqual(w["sideEffects"], "None")
            self.assertEqual(w["failurePolicy"], "Fail", "docs/deploy.md documents Fail")
            self.assertEqual(w["rules"], [{"apiGroups": [""], "apiVersions": ["v1"],
                                           "operations": ["CREATE"], "resources": ["pods"],
                                           "scope": "Namespaced"}])
            # Its own namespace is never reviewed: the webhook's pods must start without it.
            excluded = [e for e in w["namespaceSelector"]["matchExpressions"]
                        if e["key"] == "kubernetes.io/metadata.name"]
            self.assertEqual(excluded[0]["operator"], "NotIn")
            self.assertIn(NAMESPACE, excluded[0]["values"])

    def test_non_root_without_api_access(self):
        psc, csc = self.spec["securityContext"], self.c["securityContext"]
        self.assertIs(psc.get("runAsNonRoot"), True)
        self.assertIs(self.spec.get("automountServiceAccountToken"), False)
        self.assertIs(csc.get("readOnlyRootFilesystem"), True)
        self.assertEqual(csc.get("capabilities"), {"drop": ["ALL"]})
        self.assertGreaterEqual(self.dep["spec"]["replicas"], 2, "failurePolicy Fail: keep two")


class MonitoringTest(unittest.TestCase):
    """deploy/prometheus/rules.yaml, deploy/grafana/tenantqos.json and their copies in the base;
    every metric they use exists (docs/agent.md's table, the agent's and policyd's metrics code,
    docs/cli.md's policyd table)."""

    @staticmethod
    def known_metrics():
        """Metric names the code exports or the metrics tables document."""
        names = {"up"}  # Prometheus's own, per target
        for f in ("docs/agent.md", "docs/cli.md", "agent/metrics.cc", "policy/metrics.cc",
                  "webhook/webhook.cc"):
            with open(path(f)) as fh:
                names |= set(re.findall(r"\b(tenantqos_[a-z0-9_]+)", fh.read()))
        return names

    def check_metrics(self, exprs, what):
        known = self.known_metrics()
        for expr in exprs:
            # Metric names: identifiers outside strings, label matchers and range selectors.
            bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^]]*\]', " ", expr)
            for name in sorted(set(re.findall(r"\b(tenantqos_[a-z0-9_]+|up)\b", bare))):
                self.assertIn(name, known, f"{what}: {name} in {expr!r} is no metric the code "
                                           "exports")

    def rules(self):
        with open(path("deploy", "prometheus", "rules.yaml")) as f:
            return yaml.safe_load(f)

    def dashboard(self):
        with open(path("deploy", "grafana", "tenantqos.json")) as f:
            return json.load(f)

    def test_the_metric_check_can_fail(self):
        with self.assertRaises(AssertionError):
            self.check_metrics(['rate(tenantqos_no_such_total{tenant="a"}[5m])'], "x")

    def test_rules_metrics_exist(self):
        exprs = [r["expr"] for g in self.rules()["groups"] for r in g["rules"]]
        self.assertEqual(len(exprs), 8)
        self.check_metrics(exprs, "rules.yaml")

    def test_prometheusrule_is_the_rules_file(self):
        pr = find(base(), "PrometheusRule", "tenantqos")
        self.assertEqual(pr["spec"], self.rules(),
                         "deploy/kubernetes/prometheusrule.yaml must hold rules.yaml's groups")

    def test_dashboard_is_datasource_templated(self):
        d = self.dashboard()
        ds = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual([(v["name"], v["query"]) for v in ds], [("datasource", "prometheus")])
        for p in d["panels"]:
            self.assertEqual(p["datasource"], {"type": "prometheus", "uid": "${datasource}"},
                             p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])
        titles = {p["title"] for p in d["panels"]}
        for want in ("Delivered rate vs guarantee and limit", "Allocation", "Throttled time",
                     "Guarantee attainment (while it has demand)", "Ungoverned traffic",
                     "Policy version per node", "policyd connectivity"):
            self.assertIn(want, titles)
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")

    def test_dashboard_metrics_exist(self):
        d = self.dashboard()
        exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
        exprs += [v["definition"] for v in d["templating"]["list"] if "definition" in v]
        self.check_metrics(exprs, "tenantqos.json")

    def test_dashboard_configmap_is_the_file(self):
        cm = find(base(), "ConfigMap", "tenantqos-grafana-dashboard")
        self.assertEqual(cm["metadata"]["labels"].get("grafana_dashboard"), "1")
        with open(path("deploy", "grafana", "tenantqos.json")) as f:
            self.assertEqual(cm["data"]["tenantqos.json"], f.read(),
                             "deploy/kubernetes/grafana-dashboard-tenantqos.json must equal "
                             "deploy/grafana/tenantqos.json")

    def test_monitors_select_the_right_ports(self):
        agent = find(base(), "DaemonSet", "tenantqos-agent")
        pm = find(base(), "PodMonitor", "tenantqos-agent")
        labels = pod_meta(agent)["labels"]
        for k, v in pm["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v)
        # up{job="tenantqos-agent"} in the rules: the job label comes from this pod label.
        self.assertEqual(labels[pm["spec"]["jobLabel"]], "tenantqos-agent")
        (ep,) = pm["spec"]["podMetricsEndpoints"]
        self.assertIn(ep["port"], {p["name"] for p in only_container(agent)["ports"]})
        for name in ("tenantqos-policyd", "tenantqos-webhook"):
            sm = find(base(), "ServiceMonitor", name)
            svc = find(base(), "Service", name)
            for k, v in sm["spec"]["selector"]["matchLabels"].items():
                self.assertEqual(svc["metadata"]["labels"].get(k), v)
            for ep in sm["spec"]["endpoints"]:
                self.assertIn(ep["port"], {p["name"] for p in svc["spec"]["ports"]})


class TrainingExampleTest(unittest.TestCase):
    def setUp(self):
        self.pod = training_example()
        self.spec = self.pod["spec"]
        self.tenant = self.pod["metadata"]["labels"][TENANT_LABEL]
        self.trainer = only_container(self.pod)
        agent = only_container(find(base(), "DaemonSet", "tenantqos-agent"))
        self.agent_run_dir = flag(agent, "--run-dir")
        with open(path("deploy", "kubernetes", "policy.yaml")) as f:
            tenants = {t["name"]: t for t in yaml.safe_load(f)["tenants"]}
        self.tenant_group = int(tenants[self.tenant]["unixGroup"])

    def test_not_in_the_base(self):
        with open(path("deploy", "kubernetes", "kustomization.yaml")) as f:
            k = yaml.safe_load(f)
        self.assertNotIn("training-pod-example.yaml", k["resources"])
        self.assertEqual(self.pod["kind"], "Pod")

    def test_nccl_uses_the_plugin_and_only_it(self):
        self.assertEqual(env(self.trainer, "NCCL_NET_PLUGIN")["value"], "tenantqos")
        self.assertEqual(env(self.trainer, "NCCL_NET")["value"], "tenantqos")

    def test_tenant_as_in_the_pod_label(self):
        self.assertRegex(self.tenant, r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
        self.assertEqual(env(self.trainer, "TENANTQOS_TENANT"),
                         {"name": "TENANTQOS_TENANT", "value": self.tenant})

    def test_plugin_copied_into_an_emptydir_on_ld_library_path(self):
        (init,) = self.spec["initContainers"]
        so = f"libnccl-net-{env(self.trainer, 'NCCL_NET_PLUGIN')['value']}.so"
        self.assertEqual(os.path.basename(PLUGIN_IN_IMAGE), so)
        self.assertEqual(init["command"][0], "cp")
        src, dst = init["command"][1:]
        self.assertEqual(src, PLUGIN_IN_IMAGE)
        _, v = mount_at(self.spec, init, dst.rstrip("/"))
        self.assertIn("emptyDir", v)
        trainer_mounts = [m for m in self.trainer["volumeMounts"] if m["name"] == v["name"]]
        self.assertEqual(len(trainer_mounts), 1)
        ld = env(self.trainer, "LD_LIBRARY_PATH")["value"].split(":")
        self.assertEqual(ld[0], trainer_mounts[0]["mountPath"], "the plugin's directory first")

    def test_mounts_only_its_own_tenant_directory(self):
        run_dir = env(self.trainer, "TENANTQOS_RUN_DIR")["value"]
        host_vols = [v for v in self.spec["volumes"] if "hostPath" in v]
        self.assertEqual(len(host_vols), 1, "exactly one host path: the tenant's own directory")
        v = host_vols[0]
        # Type Directory: the pod waits for the agent to serve the tenant; DirectoryOrCreate
        # would let the kubelet create an empty directory the agent then has to take over.
        self.assertEqual(v["hostPath"], {"path": f"{self.agent_run_dir}/tenants/{self.tenant}",
                                         "type": "Directory"})
        mounts = [(c["name"], m) for c in all_containers(self.spec)
                  for m in c.get("volumeMounts", []) if m["name"] == v["name"]]
        self.assertEqual(len(mounts), 1, "only the trainer mounts the tenant directory")
        name, m = mounts[0]
        self.assertEqual(name, self.trainer["name"])
        self.assertEqual(m["mountPath"], f"{run_dir}/tenants/{self.tenant}",
                         "the plugin connects to TENANTQOS_RUN_DIR/tenants/TENANTQOS_TENANT")
        self.assertNotIn("subPath", m)
        self.assertFalse(self.spec.get("hostPID", False), "slots work across PID namespaces")

    def test_joins_its_tenants_group(self):
        # The agent makes the tenant's directory 0750 root:<the tenant's unixGroup>.
        self.assertIn(self.tenant_group, self.spec["securityContext"]["supplementalGroups"])


class SchemaTest(unittest.TestCase):
    def test_base_objects(self):
        errs = [e for d in base() for e in object_schema_errors(d)]
        self.assertEqual(errs, [], "\n".join(errs))

    def test_training_example(self):
        errs = object_schema_errors(training_example())
        self.assertEqual(errs, [], "\n".join(errs))

    def test_the_check_can_fail(self):
        bad = yaml.safe_load("""
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}, annotations: {prometheus.io/scrape: true}}
    spec:
      hostNetwork: "true"
      dnsPolicy: ClusterFirstWithHostNetwork
      containers:
        - name: c
          image: i
          redinessProbe: {httpGet: {path: /readyz, port: 1}}
          livenessProbe: {grpc: {service: x}}
          ports: [{containerPort: "9464"}]
          resources: {requests: {memory: 64MB}}
      volumes: [{name: v, hostPath: {path: /x, type: Dir}}]
""")
        errs = "\n".join(object_schema_errors(bad))
        for want in ["annotations.prometheus.io/scrape: expected str",
                     "hostNetwork: expected bool",
                     "dnsPolicy: 'ClusterFirstWithHostNetwork' is not one of",
                     "unknown field 'redinessProbe'",
                     "grpc: required field 'port' missing",
                     "containerPort: expected int",
                     "hostPath.type: 'Dir' is not one of",
                     "requests.memory: '64MB' is not a quantity"]:
            self.assertIn(want, errs)


class ContainerfileTest(unittest.TestCase):
    def setUp(self):
        with open(path("deploy", "container", "Containerfile")) as f:
            self.text = f.read()
        # Instructions with their continuation lines joined, comments dropped.
        joined = re.sub(r"\\\n", " ", "\n".join(
            l for l in self.text.splitlines() if not l.lstrip().startswith("#")))
        self.instructions = [l.strip() for l in joined.splitlines() if l.strip()]
        stages, cur = {}, None
        for ins in self.instructions:
            m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", ins, re.I)
            if m:
                cur = m.group(2)
                stages[cur] = {"from": m.group(1), "ins": []}
            else:
                stages[cur]["ins"].append(ins)
        self.stages = stages

    def install_components(self):
        """The components the build stage installs (`cmake --install ... --component C`)."""
        comps = []
        for ins in self.stages["build"]["ins"]:
            for cmd in ins.split("&&"):
                words = shlex.split(re.sub(r"^RUN\s+", "", cmd.strip()))
                if words[:2] == ["cmake", "--install"]:
                    self.assertEqual(words[2], "/build", cmd)
                    self.assertEqual(words[words.index("--prefix") + 1], "/out/usr/local", cmd)
                    comps.append(words[words.index("--component") + 1])
        return comps

    def shipped(self):
        """{path in the image: the built file it is a copy of}: the install() rules of the
        components the Containerfile installs, run on this build tree."""
        built = {os.path.basename(f): f for f in (ARGS.policyd, ARGS.agent, ARGS.ctl, ARGS.perf,
                                                  ARGS.webhook, ARGS.plugin)}
        out = {}
        with tempfile.TemporaryDirectory(prefix="tq-deploy-test-") as tmp:
            for comp in self.install_components():
                r = subprocess.run(["cmake", "--install", ARGS.build_dir, "--prefix",
                                    os.path.join(tmp, "usr/local"), "--component", comp],
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stderr)
            for dirpath, _, files in os.walk(tmp):
                for f in files:
                    installed = os.path.join(dirpath, f)
                    image_path = "/" + os.path.relpath(installed, tmp)
                    self.assertIn(f, built, f"{image_path}: not a file this test knows")
                    with open(installed, "rb") as a, open(built[f], "rb") as b:
                        self.assertTrue(a.read() == b.read(), f"{image_path} != {built[f]}")
                    out[image_path] = built[f]
        return out

    def test_bookworm_stages(self):
        self.assertEqual(set(self.stages), {"build", "runtime"})
        self.assertRegex(self.stages["build"]["from"], r"debian:bookworm$")
        self.assertRegex(self.stages["runtime"]["from"], r"debian:bookworm-slim$")
        self.assertIn("RUN scripts/install-deps.sh", self.stages["build"]["ins"])

    def test_installs_what_the_manifests_and_the_example_use(self):
        shipped = self.shipped()
        want = {"/usr/local/bin/tenantqos-policyd": ARGS.policyd,
                "/usr/local/bin/tenantqos-agent": ARGS.agent,
                "/usr/local/bin/tenantqosctl": ARGS.ctl,
                "/usr/local/bin/tenantqos-perf": ARGS.perf,
                "/usr/local/bin/tenantqos-webhook": ARGS.webhook,
                PLUGIN_IN_IMAGE: ARGS.plugin}
        self.assertEqual(set(shipped), set(want))
        for image_path, built in shipped.items():
            self.assertTrue(os.path.samefile(built, want[image_path]), image_path)
        commands = {c["command"][0] for d in base()
                    if d["kind"] in ("Deployment", "DaemonSet", "Job")
                    for c in all_containers(pod_spec(d))}
        self.assertLessEqual(commands, set(shipped))

    def test_copies_every_source_directory(self):
        with open(path("CMakeLists.txt")) as f:
            subdirs = set(re.findall(r"^add_subdirectory\((\S+)\)", f.read(), re.M))
        subdirs.discard("bench")  # TQ_BUILD_BENCH=OFF in the image
        copied = set()
        for ins in self.stages["build"]["ins"]:
            m = re.match(r"COPY\s+(\S+)\s+\S+$", ins)
            if m and not ins.startswith("COPY --from"):
                copied.add(m.group(1))
                self.assertTrue(os.path.exists(path(m.group(1))), f"COPY {m.group(1)}: no such path")
        self.assertLessEqual(subdirs | {"CMakeLists.txt", "cmake"}, copied)
        self.assertIn("-DTQ_BUILD_BENCH=OFF", self.text)

    def test_user_matches_the_manifests(self):
        users = [i for i in self.stages["runtime"]["ins"] if i.startswith("USER ")]
        self.assertEqual(users, ["USER 65532:65532"])
        dep = find(base(), "Deployment", "tenantqos-policyd")
        self.assertEqual(pod_spec(dep)["securityContext"]["runAsUser"], 65532)

    def test_runtime_packages_are_exactly_what_the_binaries_load(self):
        runs = [i for i in self.stages["runtime"]["ins"] if "apt-get install" in i]
        self.assertEqual(len(runs), 1)
        after = runs[0].split("--no-install-recommends", 1)[1].split("&&", 1)[0]
        listed = set(after.split())
        libs_of = {built: self.ldd(built) for built in self.shipped().values()}
        owners = self.owners({l for libs in libs_of.values() for l in libs})
        needed = {}
        for built, libs in libs_of.items():
            for lib in libs:
                needed.setdefault(owners[lib], set()).add(os.path.basename(built))
        if ARGS.sanitize == "ON":  # sanitizer runtimes are not shipped
            needed = {p: b for p, b in needed.items() if not re.match(r"lib(asan|ubsan)\d+$", p)}
        missing = {p: sorted(b) for p, b in needed.items() if p not in listed}
        extra = listed - set(needed) - set(RUNTIME_EXTRAS)
        self.assertEqual(missing, {},
                         "runtime packages the Containerfile lacks (package: who needs it)")
        self.assertEqual(extra, set(), "runtime packages no shipped file needs")

    @staticmethod
    def ldd(binary):
        r = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"ldd {binary}: {r.stderr}"
        libs = []
        for line in r.stdout.splitlines():
            assert "not found" not in line, f"ldd {binary}: {line.strip()}"
            m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
            if m:
                libs.append(m.group(1))
        return libs

    @staticmethod
    def owners(libs):
        """{library path: Debian package}, with one dpkg-query for all of them."""
        def candidates(lib):
            real = os.path.realpath(lib)
            out = [lib, real]
            for p in (lib, real):  # merged /usr: dpkg knows the path the package shipped
                out.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
            return out
        every = sorted({c for lib in libs for c in candidates(lib)})
        r = subprocess.run(["dpkg-query", "-S"] + every, capture_output=True, text=True, timeout=60)
        owned = {}
        for line in r.stdout.splitlines():
            if line.startswith("diversion "):
                continue
            pkgs, _, p = line.rpartition(": ")
            owned[p] = pkgs.split(",")[0].split(":")[0].strip()
        result = {}
        for lib in libs:
            hit = [owned[c] for c in candidates(lib) if c in owned]
            assert hit, f"no Debian package owns {lib} (tried {candidates(lib)})"
            result[lib] = hit[0]
        return result


class PluginCompatTest(unittest.TestCase):
    """docs/deploy.md states the glibc/libstdc++ a training image needs for the plugin."""

    def test_documented_minimum_versions(self):
        r = subprocess.run(["objdump", "-T", ARGS.plugin], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)

        def newest(prefix):
            vs = re.findall(rf"\b{prefix}_([0-9.]+)\b", r.stdout)
            return max((tuple(int(x) for x in v.split(".")) for v in vs), default=None)

        glibc, glibcxx = newest("GLIBC"), newest("GLIBCXX")
        with open(path("docs", "deploy.md")) as f:
            doc = f.read()
        m = re.search(r"glibc >= ([0-9.]+)", doc)
        self.assertIsNotNone(m, "docs/deploy.md must say `glibc >= X.Y`")
        self.assertGreaterEqual(tuple(int(x) for x in m.group(1).split(".")), glibc,
                                f"the plugin needs GLIBC_{'.'.join(map(str, glibc))}")
        if glibcxx is None:  # libstdc++ linked in statically
            self.assertIn("needs no GLIBCXX_ version", doc.replace("\n", " "),
                          "docs/deploy.md must say the plugin needs no GLIBCXX_ version")
            return
        m = re.search(r"GLIBCXX_([0-9.]+)", doc)
        self.assertIsNotNone(m, "docs/deploy.md must name the GLIBCXX_ version needed")
        self.assertGreaterEqual(tuple(int(x) for x in m.group(1).split(".")), glibcxx,
                                f"the plugin needs GLIBCXX_{'.'.join(map(str, glibcxx))}")


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("--source-dir", "--build-dir", "--kubectl", "--agent", "--policyd", "--ctl",
                 "--perf", "--webhook", "--plugin"):
        p.add_argument(name, required=True)
    p.add_argument("--sanitize", default="OFF")
    ARGS, rest = p.parse_known_args()
    prog = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False)
    r = prog.result
    if not r.wasSuccessful():
        sys.exit(1)
    if any(NO_KUBECTL in reason for _, reason in r.skipped):
        sys.exit(77)


if __name__ == "__main__":
    main()
