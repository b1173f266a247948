#!/usr/bin/python3
"""An independent client: Python (Debian's python3-grpcio) against the real tenantqos-policyd.

Stubs are generated at build time by protoc from proto/tenantqos/v1/policy.proto. Run with
/usr/bin/python3: the pyenv python3 on PATH has no grpc module. Mutual TLS with certificates
made by scripts/tq-certs.sh: grpc.ssl_channel_credentials with the admin's certificate.

  policyd_python_test.py --policyd BIN --stubs DIR --example examples/policy.yaml --certs SCRIPT
Exit code 0 when every check passes.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policyd", required=True)
    ap.add_argument("--stubs", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--certs", required=True, help="scripts/tq-certs.sh")
    args = ap.parse_args()
    sys.path.insert(0, args.stubs)
    import grpc
    from tenantqos.v1 import policy_pb2, policy_pb2_grpc

    tmp = tempfile.mkdtemp(prefix="tqpol-py-%d-" % os.getpid())
    log = open(os.path.join(tmp, "policyd.log"), "w")
    port_file = os.path.join(tmp, "port")
    pki = os.path.join(tmp, "pki")
    subprocess.run([args.certs, "cluster", pki, "127.0.0.1"], check=True)

    def pem(name):
        with open(os.path.join(pki, name), "rb") as f:
            return f.read()

    proc = subprocess.Popen([args.policyd, "--listen", "127.0.0.1:0", "--data-dir",
                             os.path.join(tmp, "data"), "--port-file", port_file,
                             "--tls-ca", os.path.join(pki, "ca.crt"),
                             "--tls-cert", os.path.join(pki, "policyd.crt"),
                             "--tls-key", os.path.join(pki, "policyd.key")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.exists(port_file) or proc.poll() is not None, 15, "port file")
        port = int(open(port_file).read())
        def secure(cert):
            creds = grpc.ssl_channel_credentials(pem("ca.crt"), pem(cert + ".key"), pem(cert + ".crt"))
            return grpc.secure_channel("127.0.0.1:%d" % port, creds)

        channel = secure("admin")
        stub = policy_pb2_grpc.PolicyServiceStub(channel)

        # Plaintext is refused; a viewer may read but not apply.
        try:
            policy_pb2_grpc.PolicyServiceStub(grpc.insecure_channel("127.0.0.1:%d" % port)).GetPolicy(
                policy_pb2.GetPolicyRequest(), timeout=5)
            raise AssertionError("a plaintext client was served")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        viewer_channel = secure("viewer")
        viewer = policy_pb2_grpc.PolicyServiceStub(viewer_channel)
        try:
            viewer.ApplyPolicy(policy_pb2.ApplyPolicyRequest(policy_yaml="x"), timeout=10)
            raise AssertionError("a viewer applied a policy")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert "viewer (groups tenantqos:viewers) lacks the role tenantqos:admins" in e.details(), e
        viewer_channel.close()

        try:
            stub.GetPolicy(policy_pb2.GetPolicyRequest(), timeout=10)
            raise AssertionError("GetPolicy on an empty store should fail")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e

        example = open(args.example).read()
        r = stub.ApplyPolicy(policy_pb2.ApplyPolicyRequest(policy_yaml=example, source_name="policy.yaml",
                                                           applied_by="forged"), timeout=10)
        assert r.version == 1 and r.changed, r

        snap = stub.GetPolicy(policy_pb2.GetPolicyRequest(version=0), timeout=10)
        assert snap.version == 1, snap
        names = [t.name for t in snap.policy.tenants]
        assert names == ["tenant-a", "tenant-b"], names
        a = snap.policy.tenants[0]
        assert a.guarantee_bytes_per_second == 5_000_000_000, a   # 40Gbps as integer bytes/s
        assert a.limit_bytes_per_second == 7_500_000_000, a
        assert a.weight == 2 and a.service_level == 1 and a.dscp == 26, a
        assert list(a.traffic_classes) == [1], a
        # The certificate's identity, not the request's applied_by.
        assert snap.applied_by == "admin" and snap.checksum != 0, snap
        assert list(snap.applied_by_groups) == ["tenantqos:admins"], snap
        assert snap.source_name == "policy.yaml", snap

        stream = stub.WatchPolicy(policy_pb2.WatchPolicyRequest(node="py-node", known_version=0), timeout=30)
        first = next(stream)
        assert first.version == 1, first
        assert first.policy == snap.policy

        r2 = stub.ApplyPolicy(policy_pb2.ApplyPolicyRequest(
            policy_yaml=example.replace("limit: 60Gbps", "limit: 70Gbps", 1)), timeout=10)
        assert r2.version == 2, r2
        assert [d.tenant for d in r2.diff if d.kind == policy_pb2.TenantChange.CHANGED] == ["tenant-a"], r2
        second = next(stream)
        assert second.version == 2, second
        assert second.policy.tenants[0].limit_bytes_per_second == 8_750_000_000, second
        stream.cancel()

        try:
            stub.ApplyPolicy(policy_pb2.ApplyPolicyRequest(policy_yaml=example.replace("dscp: 26", "dscp: 64")),
                             timeout=10)
            raise AssertionError("an invalid policy was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert "tenants[0].dscp: must be between 0 and 63, got 64" in e.details(), e.details()
        assert stub.GetPolicy(policy_pb2.GetPolicyRequest(), timeout=10).version == 2
        channel.close()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, "policyd exit code %s" % proc.returncode
        print("python client: mutual TLS, roles, GetPolicy, ApplyPolicy, WatchPolicy against "
              "tenantqos-policyd OK")
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        if proc.returncode not in (0, None) or sys.exc_info()[0] is not None:
            sys.stderr.write(open(os.path.join(tmp, "policyd.log")).read())
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
