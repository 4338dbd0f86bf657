// Cost model of the simulated fabric: one modeled RNIC and a few modeled CPU cores per node.
// Defaults are fixed once, from published figures, and documented with sources in
// docs/sim-model.md; no experiment tunes them. Every duration is in nanoseconds of virtual time.
#ifndef UNLOADKV_TRANSPORT_SIM_MODEL_H_
#define UNLOADKV_TRANSPORT_SIM_MODEL_H_

#include <cstdint>

namespace unloadkv::sim {

struct NicModel {
  int64_t wire_latency_ns = 300;  // one way, NIC port to NIC port through one switch
  double wire_gbps = 100;         // link bandwidth, Gbit/s
  int64_t pcie_rtt_ns = 350;      // idle PCIe round trip (NIC <-> host memory)
  double pcie_gbps = 100;         // effective DMA bandwidth, Gbit/s
  int64_t nic_op_ns = 50;         // per-message pipeline occupancy, each direction
  // Requests whose payload is at most this many bytes are written into the doorbell with the
  // request (mlx5 BlueFlame/inline): one posted PCIe write instead of a fetch round trip.
  uint32_t max_inline_bytes = 128;
  // Translation caches (LRU). The MPT caches region contexts (by key), the MTT caches page
  // translations (by key and page).
  int mpt_cache_entries = 256;
  int mtt_cache_entries = 4096;
  // A translation miss costs this many dependent PCIe reads (context, then entry, then the
  // ICM page it sits in) ...
  int miss_pcie_reads = 4;
  // ... and at most this many misses are fetched at once; further misses queue.
  int translation_units = 7;
};

struct CpuModel {
  int cores = 2;                   // cores that poll completion queues (CQs are spread over them)
  int64_t poll_ns = 40;            // per completion polled
  int64_t post_ns = 80;            // per work request posted (doorbell write included)
  int64_t message_ns = 100;        // handling one received message (SEND)
  int64_t random_access_ns = 100;  // first touch of a random destination page (TLB walk + miss)
  double copy_gbps = 80;           // memcpy bandwidth, Gbit/s
};

struct NodeModel {
  NicModel nic;
  CpuModel cpu;
};

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_MODEL_H_
