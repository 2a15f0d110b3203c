// xbngd's command line: each flag declared once, in one table (flags.cpp)
// giving its name, help, default shown and what it sets. The table both
// declares the flags with CLI11 and, after parsing, merges the ones given
// over the configuration file's values (flags override the file, at the
// start and at each reload).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "config/config.h"

namespace xbng::agent {

// What the command line asks of this run besides configuration settings.
struct Invocation {
  std::string config_file;  // --config
  std::string check_file;   // --check-config
  bool teardown = false;    // --teardown
  bool version = false;     // --version
};

class CommandLine {
 public:
  // Declares every flag of the table on `app` (in the table's order, which
  // is the order of --help). `app` must outlive this object.
  explicit CommandLine(CLI::App* app);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  const Invocation& invocation() const { return run_; }
  // Sets in `cfg` every setting whose flag was given on the command line.
  void apply(Config* cfg) const;

 private:
  CLI::App* app_;
  Config values_;               // the configuration flags, as parsed
  std::string etcd_endpoints_;  // --etcd, one comma-separated string
  Invocation run_;
};

}  // namespace xbng::agent
