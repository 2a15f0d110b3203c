// The trace build's skeleton (bpf/lib/trace.h), behind the same C-style
// wrapper as the live one (skeleton.h): its generated header declares a
// global `struct xbng_trace`, kept out of every other file.
#pragma once

#include "dataplane/skeleton.h"

struct xbng_trace_log;

// Fills refs as xbng_skel_open does.
bool xbng_trace_skel_open(XbngSkelRefs* refs);  // false: errno set
int xbng_trace_skel_load(XbngSkelRefs* refs);   // 0 or -errno
// The trace log in the loaded object's .bss (mapped: the program's writes
// are visible there after each test run).
struct xbng_trace_log* xbng_trace_skel_log(XbngSkelRefs* refs);
void xbng_trace_skel_destroy(XbngSkelRefs* refs);
