#include "server/sim/sim_invariants.h"

#include <cstring>
#include <utility>

namespace unloadkv::server {

bool SimInvariants::WriteCompleted(const void* local, size_t length, uint64_t remote_addr,
                                   uint32_t rkey) {
  if (!sim::RemoteWritable(*fabric_, rkey, remote_addr, length)) return true;
  ++counts_.writes_verified;
  if (std::memcmp(reinterpret_cast<const void*>(remote_addr), local, length) == 0) return true;
  ++counts_.write_violations;
  return false;
}

bool SimInvariants::WriteRefused(size_t length, uint64_t remote_addr, uint32_t rkey) {
  ++counts_.refusals_checked;
  if (!sim::RemoteWritable(*fabric_, rkey, remote_addr, length)) return true;
  ++counts_.refusal_violations;
  return false;
}

void SimInvariants::WriteIssued(const std::string& connection, uint64_t op, const void* local,
                                size_t length, uint64_t remote_addr, uint32_t rkey) {
  senders_[connection].writes.push_back(
      Write{op, remote_addr, rkey, std::string(static_cast<const char*>(local), length)});
}

void SimInvariants::WriteFinished(const std::string& connection, uint64_t op) {
  auto it = senders_.find(connection);
  if (it == senders_.end()) return;
  std::deque<Write>& writes = it->second.writes;
  // Writes finish in issue order (callbacks fire in post order): this is the oldest.
  for (auto w = writes.begin(); w != writes.end(); ++w) {
    if (w->op == op) {
      writes.erase(w);
      break;
    }
  }
  if (writes.empty() && it->second.messages.empty()) senders_.erase(it);
}

void SimInvariants::MessageIssued(const std::string& connection, uint64_t message, uint64_t op) {
  senders_[connection].messages.emplace(message, op);
}

bool SimInvariants::MessageDelivered(const std::string& connection, uint64_t message) {
  auto it = senders_.find(connection);
  if (it == senders_.end()) return true;
  Sender& s = it->second;
  auto m = s.messages.find(message);
  if (m == s.messages.end()) return true;
  const uint64_t before = m->second;
  // Messages are delivered in issue order: the earlier ones are gone with this one.
  s.messages.erase(s.messages.begin(), std::next(m));
  ++counts_.messages_checked;
  bool ok = true;
  for (size_t i = 0; i < s.writes.size() && s.writes[i].op < before; ++i) {
    const Write& w = s.writes[i];
    const uint64_t end = w.addr + w.bytes.size();
    bool overlapped = false;
    for (size_t j = i + 1; j < s.writes.size() && !overlapped; ++j) {
      const Write& later = s.writes[j];
      overlapped = later.addr < end && w.addr < later.addr + later.bytes.size();
    }
    if (overlapped || !sim::RemoteWritable(*fabric_, w.rkey, w.addr, w.bytes.size())) continue;
    ++counts_.writes_before_checked;
    if (std::memcmp(reinterpret_cast<const void*>(w.addr), w.bytes.data(), w.bytes.size()) != 0) {
      ++counts_.order_violations;
      ok = false;
    }
  }
  if (s.writes.empty() && s.messages.empty()) senders_.erase(it);
  return ok;
}

}  // namespace unloadkv::server
