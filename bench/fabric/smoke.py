#!/usr/bin/env python3
"""ctest bench_fabric_smoke: bench/fabric's simulator on a small cluster (256 nodes, 16 leaves,
16 tenants, 100 rounds) and its real-path part with 20 agents and 5 rounds (a real policyd, mutual
TLS): it runs, its JSON has every field the issue names, and at this size it meets its targets
(no guarantee missed, contended links within 0.95 of the reference's utilisation, a round well
under 20 ms, every agent holding its caps within 100 ms of the round). Exit 1 with the reason
otherwise.

  smoke.py FABRIC_SIM
"""
import json
import os
import subprocess
import sys
import tempfile

FIELDS = ["round_ms_p50", "round_ms_p99", "control_bytes_per_s_per_1000_nodes",
          "utilisation_vs_reference", "guarantees_missed", "rounds_to_converge",
          "report_bytes_per_round", "caps_bytes_per_round", "attainment_min",
          "caps_push_agents", "caps_push_rounds", "caps_push_ms_p50", "caps_push_ms_p99"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fabric.json")
        run = subprocess.run([sys.argv[1], "--nodes", "256", "--tenants", "16", "--leaf-size",
                              "16", "--rounds", "100", "--step-every", "25", "--grpc-agents", "20",
                              "--grpc-rounds", "5", "--json", out],
                             capture_output=True, text=True, timeout=100)
        print(run.stdout, end="")
        if run.returncode != 0:
            sys.exit(f"fabric_sim exited {run.returncode}: {run.stderr.strip()}")
        with open(out, encoding="utf-8") as f:
            figures = json.load(f)
    problems = [f"missing field {k}" for k in FIELDS if k not in figures]
    if not problems:
        if figures["guarantees_missed"] != 0:
            problems.append(f"{figures['guarantees_missed']} guarantee(s) missed")
        if figures["utilisation_vs_reference"] < 0.95:
            problems.append(f"utilisation vs reference {figures['utilisation_vs_reference']:.3f}"
                            " < 0.95")
        if figures["round_ms_p99"] > 20:
            problems.append(f"round p99 {figures['round_ms_p99']:.2f} ms > 20 ms")
        if figures["rounds_to_converge"] >= 25:
            problems.append("a step did not converge within its 25 rounds")
        if figures["caps_push_agents"] != 20 or figures["caps_push_rounds"] < 1:
            problems.append(f"caps push: {figures['caps_push_agents']} agents, "
                            f"{figures['caps_push_rounds']} rounds measured")
        elif figures["caps_push_ms_p99"] > 100:
            problems.append(f"caps push p99 {figures['caps_push_ms_p99']:.1f} ms > 100 ms")
    if problems:
        sys.exit("bench_fabric_smoke: " + "; ".join(problems))
    print("bench_fabric_smoke: ok")


if __name__ == "__main__":
    main()
