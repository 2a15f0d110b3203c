#include "skeleton.h"

#include "xbng.skel.h"

bool xbng_skel_open(XbngSkelRefs* r) {
  struct xbng* s = xbng__open();
  if (!s) return false;
  r->skel = s;
  r->obj = s->obj;
  r->xdp_access = s->progs.xdp_access;
  r->xdp_uplink = s->progs.xdp_uplink;
  r->events_per_sec = reinterpret_cast<uint64_t*>(&s->rodata->events_per_sec);
  r->unknown_interval_ns = reinterpret_cast<uint64_t*>(&s->rodata->unknown_interval_ns);
  r->icmp_token_ns = reinterpret_cast<uint64_t*>(&s->rodata->icmp_token_ns);
  r->icmp_burst_ns = reinterpret_cast<uint64_t*>(&s->rodata->icmp_burst_ns);
  r->punt_enabled = reinterpret_cast<uint32_t*>(&s->rodata->punt_enabled);
  r->punt_sub_interval_ns = reinterpret_cast<uint64_t*>(&s->rodata->punt_sub_interval_ns);
  r->punt_sub_tolerance_ns = reinterpret_cast<uint64_t*>(&s->rodata->punt_sub_tolerance_ns);
  r->punt_port_per_sec = reinterpret_cast<uint64_t*>(&s->rodata->punt_port_per_sec);
  return true;
}

int xbng_skel_load(XbngSkelRefs* r) { return xbng__load(static_cast<struct xbng*>(r->skel)); }

void xbng_skel_destroy(XbngSkelRefs* r) {
  if (r->skel) xbng__destroy(static_cast<struct xbng*>(r->skel));
  r->skel = nullptr;
}
