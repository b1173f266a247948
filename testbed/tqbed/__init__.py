"""tenantqos testbed: an emulated cluster in network namespaces on one machine.

Nodes (namespaces <prefix>-node1..N) hang off a switch namespace (<prefix>-switch) through veth
pairs joined by a bridge. Each node's physical link rate is emulated on the switch side (an HTB
class with rate = ceil = link rate and a bounded FIFO on the switch port towards the node), so
tenants contend exactly as on a shared uplink: without tenantqos the FIFO decides who gets what.

Standard library only (runs with Debian's /usr/bin/python3).
"""
