"""bench/puntcost.py [N]: per-frame cost of xdp_access in BPF_PROG_TEST_RUN (bpftool prog run, repeat N):
data frame forwarded vs DHCPv4 DISCOVER punted (ring buffer copy) vs DISCOVER over the
subscriber's rate limit. Frames are not modified by these paths, so repeat is valid.
Needs root and the integration environment (XBNG_BIN, XBNG_*_OBJ as in
tests/integration/CMakeLists.txt; PYTHONPATH=tests for the lab helpers). Run with /usr/bin/python3 (scapy)."""
import json, os, struct, subprocess, sys, time
from scapy.all import Ether, Dot1AD, Dot1Q, IP, UDP, Raw
from xbnglab.bringup import BringupLab
from xbnglab.cpe import cpe_sub
from xbnglab.xbngd import UPLINK_NET4

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
def run(b, prog_id, frame, repeat):
    d = b.run
    fin = os.path.join(d, "frame.bin"); open(fin, "wb").write(bytes(frame))
    ifx = b.x.dut.ifindex("acc0")
    ctx = struct.pack("IIIIII", 0, len(frame), 0, ifx, 0, 0)
    cin = os.path.join(d, "ctx.bin"); open(cin, "wb").write(ctx)
    r = subprocess.run(b.x.dut.nsenter_argv(["bpftool", "-j", "prog", "run", "id", str(prog_id), "data_in", fin,
                        "ctx_in", cin, "repeat", str(repeat)]), capture_output=True, text=True)
    return json.loads(r.stdout)

def main():
    cfgs = {"punt": "[punt]\nsubscriber_rate = 100000\nsubscriber_burst = 100000\nport_rate = 10000000\n",
            "limited": "[punt]\nsubscriber_rate = 1\nsubscriber_burst = 1\n"}
    for name, cfg in cfgs.items():
        b = BringupLab(cfg)
        try:
            s = cpe_sub(0)
            b.x.import_subs([s])
            b.x.resolve_uplink_neighbours()
            link = json.loads(subprocess.run(["bpftool", "-j", "link", "show", "pinned", b.x.pinned_map("subscribers").replace("maps/subscribers", "links/acc0")], capture_output=True, text=True).stdout)
            pid = link["prog_id"]
            port_mac = b.x.dut.mac("acc0")
            disc = Ether(dst="ff:ff:ff:ff:ff:ff", src=s["mac"]) / Dot1AD(vlan=s["outer_vlan"]) / Dot1Q(vlan=s["inner_vlan"]) / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67) / Raw(b"\0" * 300)
            for rep in ((2000, N) if name == "punt" else (N,)):
                res = run(b, pid, disc, rep)
                print(f"{name:8s} DHCPv4 DISCOVER retval {res['retval']} {res['duration']} ns/frame (repeat {rep})")
                st = b.x.stats()
                print("   ", {k: v for k, v in st.items() if k.startswith(("punt", "drop_punt")) and v})
            st = b.x.stats()
            print("   ", {k: v for k, v in st.items() if k.startswith(("punt", "drop_punt", "forward")) and v})
        finally:
            b.close()
main()
