# cmake -P StripEtcdProto.cmake IN=<file> OUT=<file>
# Copies one of etcd's v3 .proto files without its gogoproto and
# google.api.http imports and options: protoc then compiles it with the stock
# C++ and gRPC plugins, and the wire format is unchanged (those options only
# steer Go code generation and the HTTP gateway).
file(READ "${IN}" text)
string(REGEX REPLACE "import \"gogoproto/gogo.proto\";" "" text "${text}")
string(REGEX REPLACE "import \"google/api/annotations.proto\";" "" text "${text}")
string(REGEX REPLACE "option \\(gogoproto\\.[a-z_]+\\) = [a-z]+;" "" text "${text}")
# (one level of nesting: additional_bindings { ... } inside the option)
string(REGEX REPLACE "additional_bindings[ \t\n]*[{][^}]*[}]" "" text "${text}")
string(REGEX REPLACE "option \\(google\\.api\\.http\\) = [{][^}]*[}];" "" text "${text}")
string(REGEX REPLACE "\\[\\(gogoproto\\.[^]]*\\]" "" text "${text}")
string(REGEX MATCH "[^\n]*(gogoproto|google\\.api)[^\n]*" left "${text}")
if(left)
  message(FATAL_ERROR "${IN}: gogoproto or google.api options left after stripping: ${left}")
endif()
file(WRITE "${OUT}" "${text}")
