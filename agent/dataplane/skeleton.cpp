#include "dataplane/skeleton.h"

#include "dataplane/skeleton_impl.h"
#include "xbng.skel.h"

bool xbng_skel_open(XbngSkelRefs* r) { return xbng_skel_refs_fill(xbng__open(), r); }

int xbng_skel_load(XbngSkelRefs* r) { return xbng__load(static_cast<struct xbng*>(r->skel)); }

void xbng_skel_destroy(XbngSkelRefs* r) { xbng_skel_refs_destroy(r, &xbng__destroy); }
