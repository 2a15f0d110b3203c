// The generated skeleton declares a global `struct xbng`, which collides with
// namespace xbng: it is only included by skeleton.cpp, behind this C-style
// wrapper.
#pragma once

#include <cstdint>

struct bpf_map;
struct bpf_program;

struct XbngSkelRefs {
  void* skel = nullptr;
  // In the order of xbng::agent::MapId.
  struct bpf_map* maps[16] = {};
  struct bpf_program* xdp_access = nullptr;
  struct bpf_program* xdp_uplink = nullptr;
  uint64_t* events_per_sec = nullptr;       // rodata, writable until load
  uint64_t* unknown_interval_ns = nullptr;  // rodata, writable until load
  uint32_t* punt_enabled = nullptr;            // rodata (issue 10)
  uint64_t* punt_sub_interval_ns = nullptr;    // rodata
  uint64_t* punt_sub_tolerance_ns = nullptr;   // rodata
  uint64_t* punt_port_per_sec = nullptr;       // rodata
};

bool xbng_skel_open(XbngSkelRefs* refs);  // false: errno set
int xbng_skel_load(XbngSkelRefs* refs);   // 0 or -errno
void xbng_skel_destroy(XbngSkelRefs* refs);
