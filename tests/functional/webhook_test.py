#!/usr/bin/python3
"""tenantqos-webhook against real AdmissionReview v1 JSON over HTTPS, from Python.

Real components: certificates made here by `openssl`, the real tenantqos-policyd (policy applied
with the real tenantqosctl), the real tenantqos-webhook following it, Python's ssl/http.client
as the API server would call it, python3-jsonpatch applying the returned patch, and the offline
Kubernetes schema check of tests/unit/deploy/deploy_test.py on the result.

  webhook_test.py --webhook BIN --policyd BIN --ctl BIN --source-dir DIR [unittest args]
Needs /usr/bin/python3 with python3-yaml, python3-jsonpatch, python3-kubernetes.
"""
import argparse
import base64
import copy
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

import jsonpatch
import yaml

ARGS = None
ENV = {}  # set up once for the module: tmp dir, processes, TLS context

POLICY = """apiVersion: tenantqos/v1
kind: TenantPolicy
links:
  - {name: fabric, capacity: 100Gbps, headroom: 5%}
tenants:
  - {name: tenant-a, link: fabric, guarantee: 40Gbps, limit: 60Gbps, weight: 2,
     serviceLevel: 1, dscp: 26, namespaces: [team-a], volcanoQueues: [queue-a],
     unixGroup: "7400"}
  - {name: tenant-b, link: fabric, guarantee: 20Gbps, limit: 40Gbps, weight: 1,
     serviceLevel: 2, dscp: 18, namespaces: [team-b], volcanoQueues: [queue-b],
     unixGroup: "7401"DEFAULT}
"""
TIMEOUT_MS = 1500  # the webhook's --request-timeout-ms here (default 10 s)
WORKERS = 4       # TlsServer's default worker count


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def run(*cmd, **kw):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}): {r.stderr}")
    return r.stdout


def make_certs(d):
    """A CA, and a server certificate for localhost/127.0.0.1 signed by it."""
    ca_key, ca, key, csr, crt = (os.path.join(d, n) for n in
                                 ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt"))
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=tenantqos-test-ca")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", key, "-out", csr, "-subj", "/CN=tenantqos-webhook")
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", crt, "-days", "2", "-extfile", ext)
    return ca, crt, key


def start(cmd, name):
    with open(os.path.join(ENV["tmp"], name + ".log"), "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    ENV.setdefault("procs", []).append(p)
    return p


def read_text(path):
    with open(path) as f:
        return f.read()


def read_port(path, proc):
    wait_for(lambda: (os.path.exists(path) and read_text(path).strip()) or proc.poll() is not None,
             20, path)
    assert proc.poll() is None, f"{path}: the process exited ({proc.returncode})"
    return int(read_text(path))


def apply_policy(text):
    path = os.path.join(ENV["tmp"], "policy.yaml")
    with open(path, "w") as f:
        f.write(text)
    pki = ENV["pki"]
    return run(ARGS.ctl, "--server", f"127.0.0.1:{ENV['policyd_port']}", "--tls-ca",
               f"{pki}/ca.crt", "--tls-cert", f"{pki}/admin.crt", "--tls-key", f"{pki}/admin.key",
               "apply", "-f", path)


def setUpModule():
    try:
        start_everything()
    except BaseException:
        tearDownModule()  # unittest skips it when setUpModule fails
        raise


def start_everything():
    ENV["tmp"] = tempfile.mkdtemp(prefix="tq-webhook-test-")
    ca, crt, key = make_certs(ENV["tmp"])
    ENV["cert"], ENV["key"] = crt, key
    pd_port = os.path.join(ENV["tmp"], "policyd.port")
    # Mutual TLS to policyd (scripts/tq-certs.sh): the webhook watches with an agents' cert.
    pki = os.path.join(ENV["tmp"], "pki")
    subprocess.run([os.path.join(ARGS.source_dir, "scripts", "tq-certs.sh"), "cluster", pki,
                    "127.0.0.1", "webhook"], check=True)
    ENV["pki"] = pki
    pd = start([ARGS.policyd, "--listen", "127.0.0.1:0", "--data-dir",
                os.path.join(ENV["tmp"], "data"), "--port-file", pd_port,
                "--tls-ca", f"{pki}/ca.crt", "--tls-cert", f"{pki}/policyd.crt",
                "--tls-key", f"{pki}/policyd.key"], "policyd")
    ENV["policyd_port"] = read_port(pd_port, pd)
    apply_policy(POLICY.replace("DEFAULT", ""))
    wh_port = os.path.join(ENV["tmp"], "webhook.port")
    ENV["webhook"] = start([ARGS.webhook, "--listen", "127.0.0.1:0", "--tls-cert", crt,
                           "--tls-key", key, "--policyd", f"127.0.0.1:{ENV['policyd_port']}",
                           "--tls-ca", f"{pki}/ca.crt", "--policyd-cert", f"{pki}/agent-webhook.crt",
                           "--policyd-key", f"{pki}/agent-webhook.key", "--port-file", wh_port,
                           "--request-timeout-ms", str(TIMEOUT_MS)], "webhook")
    ENV["port"] = read_port(wh_port, ENV["webhook"])
    ENV["tls"] = ssl.create_default_context(cafile=ca)
    wait_for(lambda: get("/readyz")[0] == 200, 20, "/readyz 200 (the policy from policyd)")


def tearDownModule():
    for p in reversed(ENV.get("procs", [])):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wh = ENV.get("webhook")
    if wh is not None and wh.returncode != 0:
        print(read_text(os.path.join(ENV["tmp"], "webhook.log")))
        raise AssertionError(f"tenantqos-webhook exited {wh.returncode} on SIGTERM")
    shutil.rmtree(ENV["tmp"], ignore_errors=True)


def request(method, path, body=None, headers=None):
    c = http.client.HTTPSConnection("127.0.0.1", ENV["port"], context=ENV["tls"], timeout=20)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def get(path):
    return request("GET", path)


def review_json(pod, namespace, kind=None, operation="CREATE", uid="0b7c-1"):
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": operation, "object": pod,
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"}}})


def review(path, pod, namespace, **kw):
    status, body = request("POST", path, review_json(pod, namespace, **kw),
                           {"Content-Type": "application/json"})
    assert status == 200, (status, body)
    out = json.loads(body)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview", out
    assert out["response"]["uid"] == kw.get("uid", "0b7c-1"), out
    return out["response"]


def mutated(pod, namespace, **kw):
    """(response, the pod with the response's patch applied)."""
    r = review("/mutate", pod, namespace, **kw)
    assert r["allowed"], r
    if "patch" not in r:
        return r, copy.deepcopy(pod)
    assert r["patchType"] == "JSONPatch", r
    patch = json.loads(base64.b64decode(r["patch"]))
    return r, jsonpatch.apply_patch(pod, patch)


def example():
    with open(os.path.join(ARGS.source_dir, "deploy", "kubernetes",
                           "training-pod-example.yaml")) as f:
        return yaml.safe_load(f)


def user_pod(namespace="team-a", annotations=None):
    """The documented example without anything tenantqos: what a team writes."""
    pod = example()
    pod["metadata"]["namespace"] = namespace
    pod["metadata"].pop("labels")
    if annotations:
        pod["metadata"]["annotations"] = annotations
    spec = pod["spec"]
    spec.pop("securityContext")
    spec.pop("initContainers")
    spec["volumes"] = [v for v in spec["volumes"] if not v["name"].startswith("tenantqos-")]
    if not spec["volumes"]:
        spec.pop("volumes")
    for c in spec["containers"]:
        c["env"] = [e for e in c["env"]
                    if not re.match(r"(NCCL_NET|TENANTQOS_|LD_LIBRARY_PATH)", e["name"])]
        c["volumeMounts"] = [m for m in c["volumeMounts"] if not m["name"].startswith("tenantqos-")]
        for k in ("env", "volumeMounts"):
            if not c[k]:
                c.pop(k)
    return pod


def normalized(pod):
    """Order of env entries and mounts does not matter to Kubernetes' semantics here."""
    pod = copy.deepcopy(pod)
    for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
        for k, key in (("env", "name"), ("volumeMounts", "name")):
            if k in c:
                c[k] = sorted(c[k], key=lambda x: x[key])
    pod["spec"]["volumes"] = sorted(pod["spec"].get("volumes", []), key=lambda v: v["name"])
    return pod


def tenant_of(pod):
    envs = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return envs.get("TENANTQOS_TENANT")


class MutateTest(unittest.TestCase):
    def test_labelled_namespace_gets_the_documented_recipe(self):
        r, pod = mutated(user_pod("team-a"), "team-a")
        self.assertEqual(normalized(pod), normalized(example()),
                         "the patched pod must be training-pod-example.yaml")
        self.assertEqual(review("/validate", pod, "team-a")["allowed"], True)
        sys.path.insert(0, os.path.join(ARGS.source_dir, "tests", "unit", "deploy"))
        import deploy_test
        self.assertEqual(deploy_test.object_schema_errors(pod), [])

    def test_volcano_queue_never_overrides_the_namespace(self):
        # The namespace's own queue, or a queue of no tenant: the namespace decides.
        for queue in ("queue-b", "other"):
            _, out = mutated(user_pod("team-b", {"scheduling.volcano.sh/queue-name": queue}),
                             "team-b")
            self.assertEqual(tenant_of(out), "tenant-b")
            self.assertEqual(out["metadata"]["labels"]["tenantqos.io/tenant"], "tenant-b")
            vols = {v["name"]: v for v in out["spec"]["volumes"]}
            self.assertEqual(vols["tenantqos-tenant"]["hostPath"],
                             {"path": "/run/tenantqos/tenants/tenant-b", "type": "Directory"})
        # Another tenant's queue (issue 23: this pod used to become tenant-a): refused, and so
        # in a namespace of no tenant (this webhook runs without --queue-namespaces).
        for ns, why in (("team-b", 'but namespace "team-b" is tenant "tenant-b"\'s'),
                        ("research", 'namespace "research" has no tenant and is not one of '
                                     '--queue-namespaces')):
            pod = user_pod(ns, {"scheduling.volcano.sh/queue-name": "queue-a"})
            for path in ("/mutate", "/validate"):
                r = review(path, pod, ns)
                self.assertFalse(r["allowed"], r)
                self.assertIn('Volcano queue "queue-a" is tenant "tenant-a"\'s', r["status"]["message"])
                self.assertIn(why, r["status"]["message"])

    def test_ld_library_path_of_the_container_is_kept_after_the_plugin(self):
        pod = user_pod("team-a")
        pod["spec"]["containers"][0]["env"] = [{"name": "LD_LIBRARY_PATH", "value": "/opt/x/lib"}]
        _, out = mutated(pod, "team-a")
        env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
        self.assertEqual(env["LD_LIBRARY_PATH"], "/opt/tenantqos/lib:/opt/x/lib")

    def test_mutating_twice_changes_nothing(self):
        _, once = mutated(user_pod("team-a"), "team-a")
        r, twice = mutated(once, "team-a")
        self.assertNotIn("patch", r)
        self.assertEqual(twice, once)

    def test_neither_then_the_default_tenant(self):
        pod = user_pod("research")
        r, out = mutated(pod, "research")
        self.assertNotIn("patch", r, "no tenant, no default: the pod is left alone")
        self.assertEqual(out, pod)
        self.assertTrue(review("/validate", pod, "research")["allowed"])
        # A new policy version makes tenant-b the default; the webhook follows policyd.
        apply_policy(POLICY.replace("DEFAULT", ", default: true"))
        try:
            wait_for(lambda: b"tenantqos_webhook_policy_version 2" in get("/metrics")[1], 20,
                     "the webhook at policy version 2")
            _, out = mutated(pod, "research")
            self.assertEqual(tenant_of(out), "tenant-b")
        finally:
            apply_policy(POLICY.replace("DEFAULT", ""))
            wait_for(lambda: b"tenantqos_webhook_policy_version 3" in get("/metrics")[1], 20,
                     "the webhook at policy version 3")


class ConflictTest(unittest.TestCase):
    def refused(self, path, pod, namespace, *wants):
        r = review(path, pod, namespace)
        self.assertFalse(r["allowed"], r)
        self.assertEqual(r["status"]["code"], 403, r)
        for w in wants:
            self.assertIn(w, r["status"]["message"])
        return r["status"]["message"]

    def test_own_tenant_variable_for_another_tenant(self):
        pod = user_pod("team-a")
        pod["spec"]["containers"][0]["env"] = [{"name": "TENANTQOS_TENANT", "value": "tenant-b"}]
        for path in ("/mutate", "/validate"):
            self.refused(path, pod, "team-a", 'pod team-a/train-tenant-a-0 (tenant "tenant-a", '
                         'from its namespace "team-a")', 'container "trainer" sets '
                         'TENANTQOS_TENANT="tenant-b"', 'recipe has TENANTQOS_TENANT="tenant-a"')

    def test_other_tenantqos_variables(self):
        pod = user_pod("team-a")
        pod["spec"]["containers"][0]["env"] = [{"name": "TENANTQOS_RATE", "value": "100Gbps"}]
        self.refused("/mutate", pod, "team-a", "sets TENANTQOS_RATE itself: only "
                     "tenantqos-webhook sets TENANTQOS_*")

    def test_another_tenants_entry_or_the_whole_run_dir(self):
        for host_path in ("/run/tenantqos/tenants/tenant-b", "/run/tenantqos", "/run", "/",
                          "/run/tenantqos/tenants/../tenants/tenant-b",
                          "/var/run/tenantqos/tenants/tenant-b", "//run//tenantqos/",
                          "/run/./tenantqos/tenants/tenant-b", "/./run/tenantqos/tenants/tenant-b",
                          "run/tenantqos/tenants/tenant-b/."):
            pod = user_pod("team-a")
            pod["spec"]["volumes"] = [{"name": "x", "hostPath": {"path": host_path}}]
            pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "x", "mountPath": "/x"}]
            self.refused("/mutate", pod, "team-a", f'volume "x" mounts host path "{host_path}": '
                         'a pod of tenant "tenant-a" may mount only its own entry '
                         '"/run/tenantqos/tenants/tenant-a"')

    def test_another_tenants_group(self):
        # tenant-a's unixGroup opens tenant-a's directory on the nodes: a team-b pod (or one of
        # no tenant) claiming it is refused wherever it claims it.
        for sc in ({"supplementalGroups": [7400]}, {"runAsGroup": 7400}, {"fsGroup": 7400}):
            for ns in ("team-b", "research"):
                pod = user_pod(ns)
                pod["spec"]["securityContext"] = sc
                for path in ("/mutate", "/validate"):
                    self.refused(path, pod, ns, '7400 is tenant "tenant-a"\'s unixGroup')

    def test_label_of_another_tenant(self):
        pod = user_pod("team-a")
        pod["metadata"]["labels"] = {"tenantqos.io/tenant": "tenant-b"}
        self.refused("/validate", pod, "team-a", 'label tenantqos.io/tenant="tenant-b" '
                     'contradicts its tenant "tenant-a" (namespace "team-a")')

    def test_no_tenant_but_tenantqos_settings(self):
        _, pod = mutated(user_pod("team-a"), "team-a")
        self.refused("/validate", pod, "research", "the pod has no tenant (namespace "
                     '"research" belong to no tenant, and the policy has no default tenant)')

    def test_validate_refuses_a_pod_that_skipped_mutate(self):
        self.refused("/validate", user_pod("team-a"), "team-a",
                     "lacks its tenant's tenantqos settings (was /mutate skipped?)", "volume")


class OptOutTest(unittest.TestCase):
    """The opt-out is the webhook configurations' namespaceSelector: the API server does not
    call the webhook for a namespace it excludes. Checked against the shipped configuration
    with the API server's matchExpressions semantics."""

    def configurations(self):
        with open(os.path.join(ARGS.source_dir, "deploy", "kubernetes", "webhook.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        return [w for d in docs if d["kind"].endswith("WebhookConfiguration")
                for w in d["webhooks"]]

    @staticmethod
    def selects(selector, labels):
        for e in selector.get("matchExpressions", []):
            has, val = e["key"] in labels, labels.get(e["key"])
            ok = {"In": has and val in e.get("values", []),
                  "NotIn": not has or val not in e.get("values", []),
                  "Exists": has, "DoesNotExist": not has}[e["operator"]]
            if not ok:
                return False
        return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())

    def test_documented_label_opts_out(self):
        hooks = self.configurations()
        self.assertEqual(len(hooks), 2)
        with open(os.path.join(ARGS.source_dir, "docs", "deploy.md")) as f:
            self.assertTrue("tenantqos.io/webhook: disabled" in f.read(),
                            "docs/deploy.md must document the opt-out label")
        for w in hooks:
            sel = w["namespaceSelector"]
            self.assertTrue(self.selects(sel, {"kubernetes.io/metadata.name": "team-a"}))
            self.assertFalse(self.selects(sel, {"kubernetes.io/metadata.name": "team-a",
                                                "tenantqos.io/webhook": "disabled"}))
            self.assertFalse(self.selects(sel, {"kubernetes.io/metadata.name": "tenantqos-system"}),
                             "the webhook's own namespace is never reviewed")
            self.assertFalse(self.selects(sel, {"kubernetes.io/metadata.name": "kube-system"}))
        # What an opted-out pod looks like: exactly as written (the webhook is not called), and
        # the webhook itself would have mutated it, so the exclusion is what protects it.
        _, out = mutated(user_pod("team-a"), "team-a")
        self.assertNotEqual(out, user_pod("team-a"))


class BadRequestTest(unittest.TestCase):
    def post(self, body, path="/mutate"):
        return request("POST", path, body, {"Content-Type": "application/json"})

    def assert_alive(self):
        self.assertEqual(get("/healthz"), (200, b"ok\n"))

    def test_not_json_too_deep_oversized(self):
        status, body = self.post(b"{not json")
        self.assertEqual(status, 400)
        self.assertIn(b"not JSON", body)
        status, body = self.post(b"[" * 100000 + b"]" * 100000)
        self.assertEqual(status, 400)
        self.assertIn(b"nests deeper than 64", body)
        # Oversized: refused from the header, before any of the body is read.
        raw = ENV["tls"].wrap_socket(socket.create_connection(("127.0.0.1", ENV["port"]), 10),
                                     server_hostname="localhost")
        with raw:
            raw.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                        % (5 << 20))
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.endswith(b"\n"):
                chunk = raw.recv(4096)
                if not chunk:
                    break
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 413 "), reply)
        self.assertIn(b"exceeds", reply)
        status, body = self.post(json.dumps({"kind": "AdmissionReview"}).encode())
        self.assertEqual(status, 400)
        self.assertIn(b"not an admission.k8s.io/v1 AdmissionReview", body)
        self.assert_alive()

    def test_non_pod_review_is_an_error_response(self):
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
        r = review("/mutate", deployment, "team-a",
                   kind={"group": "apps", "version": "v1", "kind": "Deployment"})
        self.assertFalse(r["allowed"])
        self.assertEqual(r["status"]["code"], 400)
        self.assertIn('reviews Pods only, got "apps/Deployment"', r["status"]["message"])
        r = review("/validate", {"kind": "Pod"}, "team-a")
        self.assertFalse(r["allowed"])
        self.assertIn("not a Pod with a spec", r["status"]["message"])

    def test_wrong_types_never_crash(self):
        pod = user_pod("team-a")
        pod["spec"]["containers"][0]["env"] = "oops"
        pod["spec"]["volumes"] = [{"name": 5, "hostPath": []}, 7]
        pod["metadata"]["annotations"] = ["x"]
        r = review("/mutate", pod, "team-a")
        self.assertIn("allowed", r)
        self.assert_alive()

    def test_methods_paths_and_plain_http(self):
        self.assertEqual(get("/mutate")[0], 405)
        self.assertEqual(get("/nope")[0], 404)
        s = socket.create_connection(("127.0.0.1", ENV["port"]), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")  # plaintext to a TLS port
        try:
            s.recv(100)  # whatever the TLS stack answers, then the connection is closed
        except OSError:
            pass
        s.close()
        self.assert_alive()

    def test_slow_peers_are_cut_at_the_deadline(self):
        # Peers that connect and send nothing, or dribble a TLS handshake, occupy every worker;
        # each is closed at the deadline, and a real request is answered after it.
        start = time.monotonic()
        idle = [socket.create_connection(("127.0.0.1", ENV["port"]), timeout=10)
                for _ in range(WORKERS)]
        try:
            idle[0].sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
            self.assertEqual(get("/healthz"), (200, b"ok\n"))
            for s in idle:
                try:
                    self.assertEqual(s.recv(100), b"", "closed by the server")
                except ConnectionResetError:
                    pass
            elapsed = time.monotonic() - start
            self.assertLess(elapsed, TIMEOUT_MS / 1000 + 5, "cut at the deadline")
        finally:
            for s in idle:
                s.close()

    def test_metrics(self):
        mutated(user_pod("team-a"), "team-a")
        status, body = get("/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        self.assertRegex(text, r'tenantqos_webhook_reviews_total\{endpoint="mutate",'
                               r'outcome="mutated"\} [1-9]')
        self.assertIn("tenantqos_webhook_policyd_connected 1", text)


class FollowTest(unittest.TestCase):
    """A webhook of its own, following a policyd of its own that the test replaces: by one with
    a re-created store (issue 22: the webhook kept deciding with the old policy), and by one
    whose certificates were all rotated to another CA while the webhook ran."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tq-webhook-follow-", dir=ENV["tmp"])
        self.pki = os.path.join(self.tmp, "pki")
        certs = os.path.join(ARGS.source_dir, "scripts", "tq-certs.sh")
        self.certs = certs
        subprocess.run([certs, "cluster", self.pki, "127.0.0.1", "webhook"], check=True)
        # The webhook's files, replaced in place (rename) by the rotation.
        self.live = os.path.join(self.tmp, "live")
        os.mkdir(self.live)
        self.install("ca", "agent-webhook")
        self.policyd = None
        self.port = self.free_port()
        self.start_policyd("data-1", "ca", "policyd")
        port_file = os.path.join(self.tmp, "webhook.port")
        self.log = os.path.join(self.tmp, "webhook.log")
        with open(self.log, "w") as log:
            self.webhook = subprocess.Popen(
                [ARGS.webhook, "--listen", "127.0.0.1:0", "--tls-cert", ENV["cert"], "--tls-key",
                 ENV["key"], "--policyd", f"127.0.0.1:{self.port}",
                 "--tls-ca", f"{self.live}/ca.crt", "--policyd-cert", f"{self.live}/client.crt",
                 "--policyd-key", f"{self.live}/client.key", "--port-file", port_file],
                stdout=log, stderr=subprocess.STDOUT)
        self.webhook_port = read_port(port_file, self.webhook)

    def tearDown(self):
        for p in (self.webhook, self.policyd):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)

    @staticmethod
    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def install(self, ca, cert):
        for src, dst in ((f"{ca}.crt", "ca.crt"), (f"{cert}.crt", "client.crt"),
                         (f"{cert}.key", "client.key")):
            shutil.copy(os.path.join(self.pki, src), os.path.join(self.live, dst + ".new"))
            os.rename(os.path.join(self.live, dst + ".new"), os.path.join(self.live, dst))

    def start_policyd(self, data, ca, cert):
        if self.policyd is not None:
            self.policyd.send_signal(signal.SIGTERM)
            self.policyd.wait(10)
        self.ca, self.admin = ca, "admin" if ca == "ca" else "admin2"
        with open(os.path.join(self.tmp, data + ".log"), "w") as log:
            self.policyd = subprocess.Popen(
                [ARGS.policyd, "--listen", f"127.0.0.1:{self.port}", "--data-dir",
                 os.path.join(self.tmp, data), "--tls-ca", f"{self.pki}/{ca}.crt", "--tls-cert",
                 f"{self.pki}/{cert}.crt", "--tls-key", f"{self.pki}/{cert}.key"],
                stdout=log, stderr=subprocess.STDOUT)

    def apply(self, default_b, guarantee=40):
        """Applies POLICY (tenant-b the default tenant when `default_b`, tenant-a's guarantee
        `guarantee` Gbps: a different policy is a new version)."""
        path = os.path.join(self.tmp, "policy.yaml")
        with open(path, "w") as f:
            f.write(POLICY.replace("DEFAULT", ", default: true" if default_b else "")
                    .replace("guarantee: 40Gbps", f"guarantee: {guarantee}Gbps"))
        # policyd may still be starting: tenantqosctl exits 3 while it is unreachable.
        def attempt():
            r = subprocess.run([ARGS.ctl, "--server", f"127.0.0.1:{self.port}", "--tls-ca",
                                f"{self.pki}/{self.ca}.crt", "--tls-cert",
                                f"{self.pki}/{self.admin}.crt", "--tls-key",
                                f"{self.pki}/{self.admin}.key", "apply", "-f", path],
                               capture_output=True, text=True, timeout=30)
            if r.returncode not in (0, 3):
                raise AssertionError(r.stderr)
            return r.returncode == 0
        wait_for(attempt, 30, "tenantqosctl apply")

    def readyz(self):
        c = http.client.HTTPSConnection("127.0.0.1", self.webhook_port, context=ENV["tls"],
                                        timeout=10)
        try:
            c.request("GET", "/readyz")
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def test_a_recreated_store_is_adopted_and_said_so(self):
        for g in (40, 39, 38):
            self.apply(False, g)
        wait_for(lambda: "ready: policy v3 of store" in self.readyz()[1], 20, "v3 at the webhook")
        old = re.search(r"of store ([0-9a-f]{32})", self.readyz()[1]).group(1)
        # policyd comes back on the same address with an empty data dir: a new store whose v1
        # is older by number than the v3 the webhook holds.
        self.start_policyd("data-2", "ca", "policyd")
        self.apply(True)
        wait_for(lambda: "ready: policy v1 of store" in self.readyz()[1], 30,
                 "the webhook adopting v1 of the re-created store")
        status, body = self.readyz()
        self.assertEqual(status, 200, body)
        new = re.search(r"ready: policy v1 of store ([0-9a-f]{32})", body).group(1)
        self.assertNotEqual(new, old)
        self.assertIn(f"adopted a re-created policy store {new} (v1), replacing v3 of store {old}",
                      body)
        log = read_text(self.log)
        self.assertIn(f"policy store changed (epoch {old} -> {new}): adopting v1 of the new "
                      "store, replacing v3 of the old one", log)

    def test_certificates_rotate_without_a_restart(self):
        self.apply(False)
        wait_for(lambda: "ready: policy v1" in self.readyz()[1], 20, "v1 at the webhook")
        # Everything moves to a new CA: the webhook's files are replaced under it, and policyd
        # restarts trusting and presenting the new CA only, so the old client certificate is
        # refused: the webhook follows only if it re-read its files.
        subprocess.run([self.certs, "ca", self.pki, "ca2"], check=True)
        subprocess.run([self.certs, "issue", self.pki, "ca2", "policyd2", "tenantqos-policyd",
                        "--san", "IP:127.0.0.1,DNS:localhost"], check=True)
        subprocess.run([self.certs, "issue", self.pki, "ca2", "webhook2", "webhook",
                        "tenantqos:agents"], check=True)
        subprocess.run([self.certs, "issue", self.pki, "ca2", "admin2", "admin",
                        "tenantqos:admins"], check=True)
        self.install("ca2", "webhook2")
        self.start_policyd("data-1", "ca2", "policyd2")
        self.apply(True)  # v2
        wait_for(lambda: "ready: policy v2" in self.readyz()[1], 30,
                 "v2 at the webhook over the rotated certificates")
        self.assertEqual(self.webhook.poll(), None, "the webhook kept running")


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("--webhook", "--policyd", "--ctl", "--source-dir"):
        p.add_argument(name, required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
