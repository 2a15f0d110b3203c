// The C-style wrapper of skeleton.h over any generated skeleton type: the
// live object's (struct xbng) and the trace build's (struct xbng_trace) are
// the same programs, maps and read-only globals, so one template fills
// XbngSkelRefs from either. Included only by skeleton.cpp and
// trace_skeleton.cpp, after their generated skeleton header.
#pragma once

#include <cstdint>
#include <utility>

#include "dataplane/skeleton.h"

// Checks, at compile time, that the skeleton's maps are exactly those of
// include/xbng/maps.def: each row names a map of the BPF object, and the
// object has no other map than the rows and its global-data maps (.rodata,
// .bss). Then fills `r` from the opened skeleton `s` (false if `s` is null:
// the open failed, errno set).
template <typename Skel>
bool xbng_skel_refs_fill(Skel* s, XbngSkelRefs* r) {
#define XBNG_MAP(id, name, sizing, trace)                                           \
  static_assert(sizeof(std::declval<Skel&>().maps.name) == sizeof(struct bpf_map*), \
                "include/xbng/maps.def names a map the BPF object lacks: " #name);
#include "xbng/maps.def"
#undef XBNG_MAP
#define XBNG_MAP(id, name, sizing, trace) +1
  static_assert(
      sizeof(std::declval<Skel&>().maps) == sizeof(struct bpf_map*) * (0
#include "xbng/maps.def"
                                                                       + 2 /* .rodata, .bss */),
      "the BPF object has a map include/xbng/maps.def does not list");
#undef XBNG_MAP
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
  r->punt_xsk = reinterpret_cast<uint32_t*>(&s->rodata->punt_xsk);
  return true;
}

// Destroys the skeleton `r` holds, if any, with its generated destructor.
template <typename Skel>
void xbng_skel_refs_destroy(XbngSkelRefs* r, void (*destroy)(Skel*)) {
  if (r->skel) destroy(static_cast<Skel*>(r->skel));
  r->skel = nullptr;
}
