"""xbnglab: the helpers of the integration tests, the demo and the benchmarks.

    lab      network namespaces, veths, bpffs pins, cleanup on every exit; packet sockets
    xbngd    the standard lab (sub <-> dut <-> net) with the real xbngd; the addressing
             plan; the xbngctl wrapper
    etcd     a real etcd cluster in a lab namespace; xbngd nodes driven from it
    cpe      CPE namespaces behind the TC/XDP tag push/pop emulator; the CPE subscriber plan
    bringup  real DHCP/RA clients (dhclient, dhcpcd) in such CPEs
    frames   scapy frame builders and checks
    traffic  steady numbered traffic with exact loss accounting
    prom     the Prometheus text exposition parser
    fixture  the suite base classes: one lab per TestCase class, closed on every exit

Imported as a package (``from xbnglab import lab``): ctest, scripts/demo and
bench/run put tests/ on PYTHONPATH.
"""
