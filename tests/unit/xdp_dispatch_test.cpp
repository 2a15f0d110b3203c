// libxdp's run priority of xbng's programs: carried in the object's BTF
// (libxdp_add_run_config), read back by libxdp's own parser. Opens the
// object only: no kernel, no privilege.
#include <gtest/gtest.h>
#include <xdp/libxdp.h>

#include "dataplane/skeleton.h"
#include "dataplane/xdp_dispatch.h"

namespace {

// libxdp's run priority of `name` in the opened object.
unsigned run_prio(struct bpf_object* obj, const char* name) {
  DECLARE_LIBXDP_OPTS(xdp_program_opts, opts, .obj = obj, .prog_name = name);
  struct xdp_program* p = xdp_program__create(&opts);
  EXPECT_EQ(libxdp_get_error(p), 0) << name;
  if (libxdp_get_error(p) || !p) return 0;
  const unsigned prio = xdp_program__run_prio(p);
  xdp_program__close(p);
  return prio;
}

struct Skel {
  XbngSkelRefs refs{};
  Skel() { EXPECT_TRUE(xbng_skel_open(&refs)); }
  ~Skel() { xbng_skel_destroy(&refs); }
};

TEST(XdpDispatch, RunPriorityReachesLibxdpThroughTheBtf) {
  {
    Skel s;
    ASSERT_NE(s.refs.obj, nullptr);
    EXPECT_EQ(run_prio(s.refs.obj, "xdp_access"), 50u);  // libxdp's default: nothing set
  }
  for (unsigned prio : {0u, 10u, 100u, 4000000u}) {
    Skel s;
    ASSERT_NE(s.refs.obj, nullptr);
    xbng::agent::libxdp_add_run_config(s.refs.obj, {"xdp_access", "xdp_uplink"}, prio);
    EXPECT_EQ(run_prio(s.refs.obj, "xdp_access"), prio);
    EXPECT_EQ(run_prio(s.refs.obj, "xdp_uplink"), prio);
  }
}

}  // namespace
