#include "dataplane/trace_skeleton.h"

#include "xbng/trace.h"  // the log type the skeleton names
#include "xbng_trace.skel.h"

// The skeleton's maps are exactly those of include/xbng/maps.def: each row
// names a map of the BPF object, and the object has no other map than the
// rows and its global-data maps (.rodata, .bss).
#define XBNG_MAP(id, name, sizing, trace)                                                    \
  static_assert(sizeof(((struct xbng_trace*)nullptr)->maps.name) == sizeof(struct bpf_map*), \
                "include/xbng/maps.def names a map the BPF object lacks: " #name);
#include "xbng/maps.def"
#undef XBNG_MAP
#define XBNG_MAP(id, name, sizing, trace) +1
static_assert(sizeof(((struct xbng_trace*)nullptr)->maps) ==
                  sizeof(struct bpf_map*) * (0
#include "xbng/maps.def"
                                             + 2 /* .rodata, .bss */),
              "the BPF object has a map include/xbng/maps.def does not list");
#undef XBNG_MAP

bool xbng_trace_skel_open(XbngSkelRefs* r) {
  struct xbng_trace* s = xbng_trace__open();
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

int xbng_trace_skel_load(XbngSkelRefs* r) {
  return xbng_trace__load(static_cast<struct xbng_trace*>(r->skel));
}

struct xbng_trace_log* xbng_trace_skel_log(XbngSkelRefs* r) {
  return &static_cast<struct xbng_trace*>(r->skel)->bss->trace_log;
}

void xbng_trace_skel_destroy(XbngSkelRefs* r) {
  if (r->skel) xbng_trace__destroy(static_cast<struct xbng_trace*>(r->skel));
  r->skel = nullptr;
}
