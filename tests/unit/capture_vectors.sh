#!/usr/bin/env bash
# Captures what real clients send (the test vectors of dhcpv6_test.cpp and
# ra_test.cpp): dhclient -6 -P -N (SOLICIT), dhclient -6 -S
# (INFORMATION-REQUEST), dhcpcd with IA_NA + IA_PD + rapid commit (SOLICIT),
# the kernel's and rdisc6's RS. Nothing answers: the first messages are what
# we need. Runs only in two namespaces it creates; private lease/pid files;
# dhcpcd's /var/lib/dhcpcd and /run/dhcpcd are private tmpfs mounts; every
# process is stopped by PID; everything is removed on exit. Needs root.
#   tests/unit/capture_vectors.sh [OUT.pcap]   then read it with tcpdump -xx
set -euo pipefail
out=${1:-/tmp/xbng-vectors.pcap}
C=xbngvec-$$-cli; S=xbngvec-$$-srv; D=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  ip netns del "$C" 2>/dev/null || true
  ip netns del "$S" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
ip netns add "$C"; ip netns add "$S"
ip -n "$C" link add vc type veth peer name vs netns "$S"
ip -n "$C" link set vc address 02:00:00:00:10:01
for n in "$C" "$S"; do ip -n "$n" link set lo up; done
ip -n "$C" link set vc up; ip -n "$S" link set vs up
sleep 2
ip netns exec "$S" tcpdump -i vs -U -w "$out" 'udp port 547 or icmp6' >/dev/null 2>&1 & pids+=($!)
sleep 1
ip netns exec "$C" dhclient -6 -P -N -d -lf "$D/a.leases" -pf "$D/a.pid" -sf /bin/true vc >/dev/null 2>&1 & pids+=($!)
sleep 3; kill "${pids[-1]}"
ip netns exec "$C" dhclient -6 -S -d -lf "$D/b.leases" -pf "$D/b.pid" -sf /bin/true vc >/dev/null 2>&1 & pids+=($!)
sleep 3; kill "${pids[-1]}"
printf 'ipv6only\nnoipv6rs\nia_na 1\nia_pd 2 -\noption rapid_commit\nduid\n' > "$D/dhcpcd.conf"
mkdir -p /run/dhcpcd
ip netns exec "$C" sh -c "mount -t tmpfs tmpfs /var/lib/dhcpcd && mount -t tmpfs tmpfs /run/dhcpcd && \
  exec dhcpcd -B -f $D/dhcpcd.conf -c /bin/true -6 vc" >/dev/null 2>&1 & pids+=($!)
sleep 4; kill "${pids[-1]}"; sleep 1
ip netns exec "$C" rdisc6 -1 -w 300 -r 1 vc >/dev/null 2>&1 || true
sleep 1
echo "captured into $out:"
tcpdump -r "$out" -nn 2>/dev/null
