// The generated skeleton declares a global `struct xbng`, which collides with
// namespace xbng: it is only included by skeleton.cpp, behind this C-style
// wrapper.
#pragma once

#include <cstdint>

struct bpf_object;
struct bpf_program;

struct XbngSkelRefs {
  void* skel = nullptr;
  // The loaded object: Dataplane finds every map in it by its ABI name
  // (xbng::agent::map_name), so no list of maps is kept twice.
  struct bpf_object* obj = nullptr;
  struct bpf_program* xdp_access = nullptr;
  struct bpf_program* xdp_uplink = nullptr;
  uint64_t* events_per_sec = nullptr;         // rodata, writable until load
  uint64_t* unknown_interval_ns = nullptr;    // rodata, writable until load
  uint64_t* icmp_token_ns = nullptr;          // rodata, writable until load
  uint64_t* icmp_burst_ns = nullptr;          // rodata, writable until load
  uint32_t* punt_enabled = nullptr;           // rodata: punt control frames to xbngd
  uint64_t* punt_sub_interval_ns = nullptr;   // rodata
  uint64_t* punt_sub_tolerance_ns = nullptr;  // rodata
  uint64_t* punt_port_per_sec = nullptr;      // rodata
  uint32_t* punt_xsk = nullptr;               // rodata: punt through AF_XDP sockets
};

bool xbng_skel_open(XbngSkelRefs* refs);  // false: errno set
int xbng_skel_load(XbngSkelRefs* refs);   // 0 or -errno
void xbng_skel_destroy(XbngSkelRefs* refs);
