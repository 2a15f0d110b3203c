// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// The three tables, each row one gtest case (Upstream/Table.Row/<n>_<desc>).
#include "harness.h"

namespace bpftest {

INSTANTIATE_TEST_SUITE_P(Upstream, Table, testing::ValuesIn(upstream_rows()), row_name);
INSTANTIATE_TEST_SUITE_P(Control, Table, testing::ValuesIn(control_rows()), row_name);
INSTANTIATE_TEST_SUITE_P(Downstream, Table, testing::ValuesIn(downstream_rows()), row_name);
INSTANTIATE_TEST_SUITE_P(Router, Table, testing::ValuesIn(router_rows()), row_name);
INSTANTIATE_TEST_SUITE_P(Police, Table, testing::ValuesIn(police_rows()), row_name);
INSTANTIATE_TEST_SUITE_P(Punt, Table, testing::ValuesIn(punt_rows()), row_name);

}  // namespace bpftest
