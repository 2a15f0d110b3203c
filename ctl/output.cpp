#include "ctl/output.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace xbng::agent {

using google::protobuf::util::JsonPrintOptions;

std::string to_json(const google::protobuf::Message& m) {
  JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  jo.always_print_primitive_fields = true;
  std::string s;
  (void)google::protobuf::util::MessageToJsonString(m, &s, jo);
  return s;
}

std::string join(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s.push_back(';');
    s.append(x);
  }
  return s;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace xbng::agent
