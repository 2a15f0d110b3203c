#include "dataplane/trace_skeleton.h"

#include "dataplane/skeleton_impl.h"
#include "xbng/trace.h"  // the log type the skeleton names
#include "xbng_trace.skel.h"

bool xbng_trace_skel_open(XbngSkelRefs* r) { return xbng_skel_refs_fill(xbng_trace__open(), r); }

int xbng_trace_skel_load(XbngSkelRefs* r) {
  return xbng_trace__load(static_cast<struct xbng_trace*>(r->skel));
}

struct xbng_trace_log* xbng_trace_skel_log(XbngSkelRefs* r) {
  return &static_cast<struct xbng_trace*>(r->skel)->bss->trace_log;
}

void xbng_trace_skel_destroy(XbngSkelRefs* r) { xbng_skel_refs_destroy(r, &xbng_trace__destroy); }
