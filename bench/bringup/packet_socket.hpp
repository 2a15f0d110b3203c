// AF_PACKET on one veth for the bring-up generator and its self-test
// responder: batched send (sendmmsg) and receive (recvmmsg) with the outer
// VLAN tag the kernel strips on receive given back from PACKET_AUXDATA.
#pragma once

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>

#include "frames.hpp"

namespace bringup {

// ---- AF_PACKET -----------------------------------------------------------------

class PacketSocket {
 public:
  explicit PacketSocket(const std::string& ifname) {
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd_ < 0) throw std::runtime_error(fmt::format("AF_PACKET socket: {}", strerror(errno)));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (!sll.sll_ifindex) throw std::runtime_error(fmt::format("no interface {}", ifname));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) < 0)
      throw std::runtime_error(fmt::format("bind {}: {}", ifname, strerror(errno)));
    int one = 1, buf = 32 << 20;
    // The kernel moves the outer tag of a received frame into metadata
    // (skb_vlan_untag): PACKET_AUXDATA gives it back.
    setsockopt(fd_, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one);
    setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
    setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
    for (auto& b : rx_) b.resize(2048);
  }
  ~PacketSocket() { close(fd_); }
  int fd() const { return fd_; }

  void queue(Bytes f) { tx_.push_back(std::move(f)); }
  size_t pending() const { return tx_.size(); }
  // Sends what is queued (sendmmsg, 64 at a time); stops when the socket is full.
  size_t flush() {
    size_t sent = 0;
    while (!tx_.empty()) {
      mmsghdr m[64];
      iovec iov[64];
      unsigned n = static_cast<unsigned>(std::min<size_t>(64, tx_.size()));
      for (unsigned k = 0; k < n; ++k) {
        iov[k] = {tx_[k].data(), tx_[k].size()};
        m[k] = {};
        m[k].msg_hdr.msg_iov = &iov[k];
        m[k].msg_hdr.msg_iovlen = 1;
      }
      int r = sendmmsg(fd_, m, n, MSG_DONTWAIT);
      if (r <= 0) break;
      tx_.erase(tx_.begin(), tx_.begin() + r);
      sent += static_cast<size_t>(r);
      frames_sent += static_cast<size_t>(r);
    }
    return sent;
  }
  // Receives up to 64 frames; f(frame span, outer vid or -1).
  template <typename F>
  int receive(F&& f) {
    mmsghdr m[64];
    iovec iov[64];
    alignas(cmsghdr) char ctl[64][CMSG_SPACE(sizeof(tpacket_auxdata))];
    for (int k = 0; k < 64; ++k) {
      iov[k] = {rx_[k].data(), rx_[k].size()};
      m[k] = {};
      m[k].msg_hdr.msg_iov = &iov[k];
      m[k].msg_hdr.msg_iovlen = 1;
      m[k].msg_hdr.msg_control = ctl[k];
      m[k].msg_hdr.msg_controllen = sizeof ctl[k];
    }
    int r = recvmmsg(fd_, m, 64, MSG_DONTWAIT, nullptr);
    for (int k = 0; k < r; ++k) {
      int outer = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m[k].msg_hdr); c; c = CMSG_NXTHDR(&m[k].msg_hdr, c)) {
        if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
        tpacket_auxdata aux;
        std::memcpy(&aux, CMSG_DATA(c), sizeof aux);
        if (aux.tp_status & TP_STATUS_VLAN_VALID) outer = aux.tp_vlan_tci & 0x0fff;
      }
      ++frames_received;
      f(std::span<const uint8_t>(rx_[k].data(), m[k].msg_len), outer);
    }
    return r;
  }
  size_t frames_sent = 0, frames_received = 0;

 private:
  int fd_ = -1;
  std::deque<Bytes> tx_;
  std::array<Bytes, 64> rx_;
};

}  // namespace bringup
