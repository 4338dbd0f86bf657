#include "server/connection_budget.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace unloadkv::server {
namespace {

std::string HumanBytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30)) return absl::StrFormat("%.1f GiB", n / double(1 << 30));
  if (n >= (uint64_t{1} << 20)) return absl::StrFormat("%.1f MiB", n / double(1 << 20));
  return absl::StrFormat("%.0f KiB", n / 1024.0);
}

}  // namespace

absl::StatusOr<ConnectionBudget> ResolveConnectionBudget(int requested,
                                                         const engine::EngineOptions& eo,
                                                         const rnic::DeviceLimits& limits,
                                                         uint64_t available_bytes) {
  if (requested < 0 || requested > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_connections=", requested, ": must be in 1..65536, or 0 for what the node holds"));
  }
  ConnectionBudget b;
  // At worst every connection comes from a peer device of its own.
  b.bytes_per_connection = engine::Engine::MaxConnectionBytes(eo) + limits.host_bytes_per_peer;
  const uint64_t srq_bound = engine::Engine::MaxConnectionsPerWorker(eo, limits);
  const uint64_t shared = engine::Engine::SharedBufferBytes(eo);
  const uint64_t budget = available_bytes / 2;
  const uint64_t memory_bound =
      budget > shared ? (budget - shared) / std::max<uint64_t>(1, b.bytes_per_connection) : 0;
  const std::string why = absl::StrCat(
      "each may hold ", HumanBytes(b.bytes_per_connection), " at worst (reserved staging ",
      "buffers, message buffers and send slots, staging headers, transport buffers); half of "
      "MemAvailable is ",
      HumanBytes(budget), "; the device's shared receive queues and CQ take ", srq_bound);
  if (requested == 0) {
    uint64_t n = std::min<uint64_t>({srq_bound, memory_bound, 65536});
    if (available_bytes == 0) n = std::min<uint64_t>(srq_bound, 256);  // memory unknown
    if (n == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("--max_connections: this node holds no connection: ", why));
    }
    b.max_connections = static_cast<int>(n);
    b.summary = available_bytes == 0 ? absl::StrCat(n, " (MemAvailable unknown: the pre-set 256)")
                                     : absl::StrCat(n, " (what the node holds: ", why, ")");
    return b;
  }
  if (static_cast<uint64_t>(requested) > srq_bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_connections=", requested, ": the device's queues take at most ", srq_bound,
        " connections per worker (shared receive queues of ", limits.max_qp_wr,
        " receives, each connection reserving ", eo.min_message_credits, " for messages and ",
        uint64_t{eo.min_staging_credits + 1} * static_cast<uint64_t>(eo.staging_lanes),
        " for staged writes; a CQ of ", limits.max_cqe, " entries)"));
  }
  b.max_connections = requested;
  b.summary = static_cast<uint64_t>(requested) > memory_bound && available_bytes > 0
                  ? absl::StrCat(requested, " (set; more than the ", memory_bound,
                                 " the node holds at worst: ", why, ")")
                  : absl::StrCat(requested, " (set)");
  return b;
}

uint64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t kib = 0;
    if (f.size() >= 2 && f[0] == "MemAvailable:" && absl::SimpleAtoi(f[1], &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace unloadkv::server
