// Internal state of simulated nodes. Not part of the public interface.
#ifndef UNLOADKV_TRANSPORT_SIM_NODE_H_
#define UNLOADKV_TRANSPORT_SIM_NODE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "transport/rnic/key_source.h"
#include "transport/rnic/memory_window.h"
#include "transport/rnic/queue_pair.h"
#include "transport/rnic/region_table.h"
#include "transport/rnic/srq_state.h"
#include "transport/sim/fabric.h"
#include "transport/sim/lru_set.h"

namespace unloadkv::sim {

struct SimCqState {
  std::deque<rnic::WorkCompletion> queue;
  int core = 0;
  bool alive = true;
};

// A request travelling from a requester QP to its responder.
struct Request {
  rnic::Opcode opcode;
  uint32_t psn;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm;
  uint32_t length;      // bytes to write/send, or to read
  std::string payload;  // WRITE*/SEND* data, gathered at post time
};

struct Outstanding {
  rnic::SendWorkRequest wr;
  uint32_t psn = 0;
  rnic::WcStatus local_error = rnic::WcStatus::kSuccess;
  // A bind or local invalidation (done when posted): completes once `done` (the NIC finished
  // it, in modeled time) and every earlier request completed.
  bool local_op = false;
  bool done = false;
  uint64_t local_id = 0;
};

// A memory window (rnic/memory_window.h).
struct SimWindowState {
  uint32_t key = 0;  // while bound
  uint32_t qp = 0;
  uint32_t region_key = 0;
  uint32_t last_key = 0;  // MemoryWindow::rkey()
};

// A shared receive queue: its receives and the QPs (numbers, on its node) drawing from it.
struct SimSrqState {
  explicit SimSrqState(const rnic::SrqConfig& config) : state(config) {}
  rnic::SrqState state;
  std::set<uint32_t> qps;  // ordered: which waiting QP gets a new receive is deterministic
};

struct SimQpState {
  uint32_t qp_num = 0;
  int node = 0;
  rnic::QpConfig config;
  SimCqState* send_cq = nullptr;
  SimCqState* recv_cq = nullptr;
  std::shared_ptr<SimCqState> send_cq_ref, recv_cq_ref;  // keep CQs alive
  rnic::QpState state = rnic::QpState::kReset;
  int peer_node = -1;
  uint32_t peer_qp = 0;
  uint32_t next_psn = 0;
  uint64_t epoch = 0;  // bumped on error: in-flight events of an older epoch are dropped
  std::deque<Outstanding> outstanding;
  std::deque<rnic::RecvWorkRequest> recvs;  // without an SRQ
  // Receives taken by requests being placed (in placement order): a failure flushes them, as
  // a NIC flushes the WQE of a message in progress, so their buffers (an SRQ's, too) come back.
  std::deque<rnic::RecvWorkRequest> placing;
  std::shared_ptr<SimSrqState> srq;  // receives come from here instead
  std::deque<Request> inbound;       // arrived, not yet executed (waits for Connect or a receive)
  bool rnr_armed = false;
  uint32_t rnr_psn = 0;
  int64_t tx_ready_ns = 0;      // requests of this QP leave the NIC in order
  int64_t last_placed_ns = 0;   // and are placed at the target in order
  int64_t last_arrival_ns = 0;  // with jitter: no request overtakes an earlier one
  bool poisoned = false;
  absl::flat_hash_set<uint32_t> window_keys;  // windows bound to this QP
  uint64_t next_local_id = 1;
  // A request or response of this QP was lost on a cut link: it sends nothing more and fails
  // after the transport timeout (Fabric::SetLinkCut).
  bool lost = false;
};

struct NodeState {
  int id = 0;
  NodeModel model;
  bool alive = true;
  rnic::RegionTable regions;
  // key -> translation page size and region start. Pages are counted from the region's start,
  // as if every registration were page-aligned, so that translation-cache results do not
  // depend on where the host placed a buffer (ASLR): the fabric stays deterministic.
  struct Paging {
    uint64_t page_size;
    uint64_t base;
  };
  absl::flat_hash_map<uint32_t, Paging> paging;
  // Keys from a generator seeded by the fabric (runs replay), unpredictable without the seed.
  rnic::KeySource keys = rnic::KeySource::Seeded(0);
  absl::flat_hash_map<const rnic::MemoryWindow*, SimWindowState*> windows;
  absl::flat_hash_map<uint32_t, SimWindowState*> bound;  // by key
  uint32_t next_qp = 1;
  int next_core = 0;
  absl::flat_hash_map<uint32_t, std::unique_ptr<SimQpState>> qps;
  LruSet mpt{0}, mtt{0};
  std::vector<int64_t> translation_unit_free;
  std::vector<int64_t> core_free;
  int64_t tx_free_ns = 0, rx_free_ns = 0, link_free_ns = 0;
  int cpu_slowdown = 1;  // Fabric::SetCpuSlowdown
  NodeStats stats;
};

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_NODE_H_
