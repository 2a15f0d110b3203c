// Reading the [radius] and [plans] sections (radius_config.h) out of the
// parsed TOML file; only the config loader includes this (toml++ stays out
// of the headers the rest of the agent reads).
#pragma once

#include <toml++/toml.h>

#include <string>

#include "config/radius_config.h"

namespace xbng::agent {

// Throw std::runtime_error "config PATH: KEY: why", as the rest of the loader.
void load_radius_section(const std::string& path, const toml::table& t, RadiusConfig* out);
void load_plans_section(const std::string& path, const toml::table& t, PlanTable* out);

}  // namespace xbng::agent
