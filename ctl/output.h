// What the command families share to print: a message as JSON (proto field
// names, defaults included), a repeated field joined.
#pragma once

#include <google/protobuf/message.h>
#include <google/protobuf/repeated_ptr_field.h>

#include <string>

namespace xbng::agent {

std::string to_json(const google::protobuf::Message& m);
std::string join(const google::protobuf::RepeatedPtrField<std::string>& v);
// The contents of a file; throws std::runtime_error "cannot read PATH".
std::string read_all(const std::string& path);

}  // namespace xbng::agent
