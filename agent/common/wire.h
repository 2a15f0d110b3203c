// Big-endian reads (common/bytes.h) and an appending writer with option nesting, shared by
// the DHCPv6 and RA code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "common/bytes.h"

namespace xbng::agent::wire {

using be::get16;
using be::get32;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) { out_->clear(); }
  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v >> 8));
    u8(static_cast<uint8_t>(v));
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v >> 16));
    u16(static_cast<uint16_t>(v));
  }
  void bytes(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  void bytes(std::span<const uint8_t> b) { bytes(b.data(), b.size()); }
  // A DHCPv6 option: begin() writes code and a placeholder length; end()
  // patches the length. Nest freely.
  size_t begin(uint16_t code) {
    u16(code);
    size_t at = out_->size();
    u16(0);
    return at;
  }
  void end(size_t at) {
    size_t len = out_->size() - at - 2;
    (*out_)[at] = static_cast<uint8_t>(len >> 8);
    (*out_)[at + 1] = static_cast<uint8_t>(len);
  }
  size_t size() const { return out_->size(); }
  std::vector<uint8_t>& buf() { return *out_; }

 private:
  std::vector<uint8_t>* out_;
};

}  // namespace xbng::agent::wire
