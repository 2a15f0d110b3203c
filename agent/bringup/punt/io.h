// Punt I/O: below the protocols, knowing nothing of DHCP or ND.
//   RX: one thread drains the `punt` BPF ring buffer (records of struct
//       xbng_punt_record: the frame with both tags, and its port/VLANs) and
//       hands each frame to the handler, on that thread. The AF_XDP
//       transport (xsk.h) hands the same PuntedFrame to the same handler.
//   TX: whole QinQ frames written as they are on the access port through one
//       AF_PACKET socket per port (no VLAN netdev; the frame carries its tags).
//       The replies an RX thread builds while it drains one batch go out
//       together (sendmmsg per port) when the batch ends: PuntTx::Batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/ringbuf_poller.h"

namespace xbng::agent::punt {

struct PuntedFrame {
  uint32_t kind = 0;  // enum xbng_punt_kind
  uint32_t ifindex = 0;
  uint16_t outer_vid = 0, inner_vid = 0;
  uint64_t timestamp_ns = 0;  // CLOCK_MONOTONIC, from XDP
  std::span<const uint8_t> frame;
};

// Sends a whole frame on an access port; false on failure. Thread-safe.
using Sender = std::function<bool(uint32_t ifindex, std::span<const uint8_t> frame)>;

class PuntTx {
 public:
  // Opens a socket per ifindex. Throws std::runtime_error.
  explicit PuntTx(const std::vector<uint32_t>& access_ifindexes);
  ~PuntTx();
  PuntTx(const PuntTx&) = delete;
  PuntTx& operator=(const PuntTx&) = delete;
  // Sends now, or within the Batch open on this thread (true then means
  // queued; a failure at the flush is counted as punt_tx_error).
  bool send(uint32_t ifindex, std::span<const uint8_t> frame);

  // The replies this thread sends while the Batch lives are queued and go
  // out when it ends (or when kBatchMax are queued): one sendmmsg per port
  // instead of one send per frame. Other threads send at once as before.
  class Batch {
   public:
    explicit Batch(PuntTx* tx) : tx_(tx) {  // nullptr: no batching
      if (tx_) tx_->begin_batch();
    }
    ~Batch() {
      if (tx_) tx_->end_batch();
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    PuntTx* tx_;
  };
  // The same without the scope; end_batch() sends what is queued.
  void begin_batch();
  void end_batch();
  static constexpr size_t kBatchMax = 64;

 private:
  void flush();
  std::map<uint32_t, int> fds_;
};

class PuntRx {
 public:
  using Handler = std::function<void(const PuntedFrame&)>;
  // Starts the RX thread. The replies of each poll of the ring go out in a
  // batch through `batch_tx` (nullptr: one by one). Throws
  // std::runtime_error.
  PuntRx(int punt_ringbuf_fd, Handler handler, PuntTx* batch_tx = nullptr);
  ~PuntRx();
  PuntRx(const PuntRx&) = delete;
  PuntRx& operator=(const PuntRx&) = delete;
  uint64_t received() const { return received_.load(); }
  // Runs the RX thread at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority) { return poller_.set_fifo_priority(priority); }

 private:
  void on_record(std::span<const uint8_t> record);
  Handler handler_;
  PuntTx* batch_tx_;
  bool in_batch_ = false;  // the RX thread's own
  std::atomic<uint64_t> received_{0};
  RingbufPoller poller_;  // last: its thread stops before the rest goes
};

}  // namespace xbng::agent::punt
