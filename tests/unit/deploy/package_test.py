#!/usr/bin/python3
"""The Debian packages (cmake/TqPackaging.cmake): builds them with cpack from this build tree,
unpacks them into a throwaway root (dpkg -x) and checks what they hold, their control data, the
systemd units (systemd-analyze verify, where available) and that the installed plugin and
programs load.

  package_test.py --build-dir DIR --source-dir DIR --cpack PATH
"""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PKG = {}  # built once: {"dir": ..., "root": ..., "debs": {name: path}}

EXPECTED_FILES = {
    "tenantqos-plugin": {"usr/lib/tenantqos/libnccl-net-tenantqos.so"},
    "tenantqos-agent": {"usr/bin/tenantqos-agent",
                        "usr/lib/systemd/system/tenantqos-agent.service"},
    "tenantqos-policyd": {"usr/bin/tenantqos-policyd", "usr/bin/tenantqosctl",
                          "usr/lib/systemd/system/tenantqos-policyd.service"},
}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def setUpModule():
    PKG["dir"] = tempfile.mkdtemp(prefix="tq-package-test-")
    out = run([ARGS.cpack, "-G", "DEB", "-B", PKG["dir"]], cwd=ARGS.build_dir, timeout=600)
    debs = {}
    for f in os.listdir(PKG["dir"]):
        if f.endswith(".deb"):
            debs[run(["dpkg-deb", "-f", os.path.join(PKG["dir"], f), "Package"]).strip()] = \
                os.path.join(PKG["dir"], f)
    assert debs, f"cpack made no .deb:\n{out}"
    PKG["debs"] = debs
    PKG["root"] = os.path.join(PKG["dir"], "root")
    os.mkdir(PKG["root"])
    for d in debs.values():
        run(["dpkg", "-x", d, PKG["root"]])


def tearDownModule():
    shutil.rmtree(PKG["dir"], ignore_errors=True)


def unit_text(name):
    with open(os.path.join(PKG["root"], "usr/lib/systemd/system", name)) as f:
        return f.read()


def directives(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


class PackagesTest(unittest.TestCase):
    def test_three_packages_with_exactly_their_files(self):
        self.assertEqual(set(PKG["debs"]), set(EXPECTED_FILES))
        for name, deb in PKG["debs"].items():
            listing = run(["dpkg-deb", "-c", deb])
            files = {l.split()[-1].lstrip("./") for l in listing.splitlines()
                     if l.startswith("-")}
            self.assertEqual(files, EXPECTED_FILES[name], name)

    def test_control(self):
        for name, deb in PKG["debs"].items():
            self.assertRegex(run(["dpkg-deb", "-f", deb, "Version"]).strip(), r"^\d+\.\d+\.\d+$")
            depends = run(["dpkg-deb", "-f", deb, "Depends"])
            self.assertIn("libc6", depends, f"{name}: Depends from dpkg-shlibdeps")
        self.assertIn("libgrpc++", run(["dpkg-deb", "-f", PKG["debs"]["tenantqos-agent"],
                                        "Depends"]))
        self.assertNotIn("grpc", run(["dpkg-deb", "-f", PKG["debs"]["tenantqos-plugin"],
                                      "Depends"]), "the plugin needs libc and libgcc only")

    def test_agent_postinst_creates_the_group(self):
        with tempfile.TemporaryDirectory() as d:
            run(["dpkg-deb", "-e", PKG["debs"]["tenantqos-agent"], d])
            script = os.path.join(d, "postinst")
            self.assertTrue(os.access(script, os.X_OK))
            run(["sh", "-n", script])
            with open(script) as f:
                self.assertIn("addgroup --system tenantqos", f.read())

    def test_installed_plugin_loads(self):
        so = os.path.join(PKG["root"], "usr/lib/tenantqos/libnccl-net-tenantqos.so")
        lib = ctypes.CDLL(so, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        for v in ("v12", "v11", "v10", "v9"):
            self.assertIsNotNone(getattr(lib, f"ncclNetPlugin_{v}", None), v)
        out = run(["objdump", "-h", so])
        self.assertNotIn(".debug_info", out, "packaged files are stripped")

    def test_installed_programs_run(self):
        for prog in ("tenantqos-agent", "tenantqos-policyd", "tenantqosctl"):
            run([os.path.join(PKG["root"], "usr/bin", prog), "--help"], timeout=30)

    def test_agent_unit(self):
        d = directives(unit_text("tenantqos-agent.service"))
        self.assertEqual(d["CapabilityBoundingSet"], ["CAP_NET_ADMIN CAP_CHOWN"])
        self.assertEqual(d["AmbientCapabilities"], ["CAP_NET_ADMIN CAP_CHOWN"])
        self.assertEqual(d["User"], ["root"])
        self.assertEqual(d["Group"], ["tenantqos"], "the postinst's group owns the tenant files")
        self.assertEqual(d["Restart"], ["on-failure"])
        self.assertEqual(d["RuntimeDirectory"], ["tenantqos"])
        self.assertEqual(d["RuntimeDirectoryPreserve"], ["yes"], "fail-static across restarts")
        self.assertEqual(d["StateDirectory"], ["tenantqos"])
        self.assertIn("--run-dir=/run/tenantqos", d["ExecStart"][0])
        self.assertIn("--state-dir=/var/lib/tenantqos", d["ExecStart"][0])
        self.assertIn("--tls-cert=/etc/tenantqos/tls/agent.crt", d["ExecStart"][0], "mutual TLS")
        self.assertNotIn("--insecure", " ".join(d["ExecStart"] + d.get("Environment", [])))
        self.check_flags("tenantqos-agent", d)

    def test_policyd_unit(self):
        d = directives(unit_text("tenantqos-policyd.service"))
        self.assertEqual(d["DynamicUser"], ["yes"], "its own user")
        self.assertEqual(d["StateDirectory"], ["tenantqos-policyd"])
        self.assertIn("--data-dir=/var/lib/tenantqos-policyd", d["ExecStart"][0])
        self.assertEqual(d["CapabilityBoundingSet"], [""])
        self.assertEqual(d["Restart"], ["on-failure"])
        # Mutual TLS with root-only key files: systemd hands the dynamic user copies (%d).
        self.assertEqual(sorted(d["LoadCredential"]),
                         ["tls-ca:/etc/tenantqos/tls/ca.crt", "tls-cert:/etc/tenantqos/tls/policyd.crt",
                          "tls-key:/etc/tenantqos/tls/policyd.key"])
        self.assertIn("--tls-key=%d/tls-key", d["ExecStart"][0])
        self.assertNotIn("--insecure", " ".join(d["ExecStart"] + d.get("Environment", [])))
        self.check_flags("tenantqos-policyd", d)

    def check_flags(self, prog, d):
        """Every flag in ExecStart and the default arguments is one the program knows."""
        helptext = run([os.path.join(PKG["root"], "usr/bin", prog), "--help"])
        known = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", helptext, re.M))
        words = " ".join(d["ExecStart"] + d.get("Environment", []))
        for f in re.findall(r"(--[a-z][a-z0-9-]*)", words):
            self.assertIn(f, known, f"{prog}'s unit passes {f}")

    def test_units_verify(self):
        exe = shutil.which("systemd-analyze")
        if exe is None:
            self.skipTest("systemd-analyze is not installed")
        with tempfile.TemporaryDirectory() as d:
            # The throwaway root has no systemd of its own (--root would lack sysinit.target):
            # verify on this host, with ExecStart pointing at the unpacked binaries.
            for name in ("tenantqos-agent.service", "tenantqos-policyd.service"):
                with open(os.path.join(d, name), "w") as f:
                    f.write(unit_text(name).replace("/usr/bin/",
                                                    os.path.join(PKG["root"], "usr/bin/")))
            r = subprocess.run([exe, "verify"] + [os.path.join(d, n) for n in os.listdir(d)],
                               capture_output=True, text=True, timeout=60)
            # verify exits 0 on unknown keys and bad values, printing them: any output fails.
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_verify_can_fail(self):
        exe = shutil.which("systemd-analyze")
        if exe is None:
            self.skipTest("systemd-analyze is not installed")
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.service")
            with open(bad, "w") as f:
                f.write("[Service]\nExecStart=/bin/true\nRestart=sometimes\n")
            r = subprocess.run([exe, "verify", bad], capture_output=True, text=True, timeout=60)
            self.assertIn("restart", (r.stdout + r.stderr).lower())


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("--build-dir", "--source-dir", "--cpack"):
        p.add_argument(name, required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
