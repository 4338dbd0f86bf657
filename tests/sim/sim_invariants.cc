#include "tests/sim/sim_invariants.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace unloadkv::world {

SimInvariants::Sender& SimInvariants::SenderOf(const std::string& connection) {
  auto [it, added] = senders_.try_emplace(connection);
  if (added) it->second.id = static_cast<uint32_t>(senders_.size());
  return it->second;
}

bool SimInvariants::OverwrittenSince(uint32_t sender, uint64_t seq, uint64_t addr,
                                     uint64_t length) const {
  const uint64_t from = addr > longest_ ? addr - longest_ : 0;
  for (auto it = issued_.lower_bound(from); it != issued_.end() && it->first < addr + length;
       ++it) {
    const Issued& i = it->second;
    if (i.end > addr && i.seq > seq && i.sender != sender) return true;
  }
  return false;
}

SimInvariants::Verdict SimInvariants::Examine(uint32_t sender, const Write& w) {
  // Readable while a region of a live node covers it (the write's own key may be gone: a
  // grant's window ends at its PUT).
  if (!sim::Mapped(*fabric_, w.addr, w.bytes.size())) return Verdict::kNothingToShow;
  if (OverwrittenSince(sender, w.seq, w.addr, w.bytes.size())) {
    ++counts_.overwritten;
    return Verdict::kNothingToShow;
  }
  return std::memcmp(reinterpret_cast<const void*>(w.addr), w.bytes.data(), w.bytes.size()) == 0
             ? Verdict::kHeld
             : Verdict::kMissing;
}

bool SimInvariants::WriteCompleted(const std::string& connection, uint64_t op, const void* local,
                                   size_t length, uint64_t remote_addr, uint32_t rkey) {
  Sender& s = SenderOf(connection);
  auto w =
      std::find_if(s.writes.begin(), s.writes.end(), [op](const Write& x) { return x.op == op; });
  // Every write is issued before it completes; one that was not is checked as of now.
  const Verdict v =
      w != s.writes.end()
          ? Examine(s.id, *w)
          : Examine(s.id, Write{op, next_seq_, remote_addr, rkey,
                                std::string(static_cast<const char*>(local), length)});
  if (v == Verdict::kNothingToShow) return true;
  ++counts_.writes_verified;
  if (v == Verdict::kHeld) return true;
  ++counts_.write_violations;
  return false;
}

bool SimInvariants::WriteRefused(size_t length, uint64_t remote_addr, uint32_t rkey,
                                 uint32_t target_qp) {
  ++counts_.refusals_checked;
  if (!sim::RemoteWritable(*fabric_, rkey, remote_addr, length, target_qp)) return true;
  ++counts_.refusal_violations;
  return false;
}

void SimInvariants::WriteIssued(const std::string& connection, uint64_t op, const void* local,
                                size_t length, uint64_t remote_addr, uint32_t rkey) {
  Sender& s = SenderOf(connection);
  const uint64_t seq = ++next_seq_;
  s.writes.push_back(
      Write{op, seq, remote_addr, rkey, std::string(static_cast<const char*>(local), length)});
  issued_.emplace(remote_addr, Issued{remote_addr + length, seq, s.id});
  longest_ = std::max<uint64_t>(longest_, length);
}

void SimInvariants::WriteFinished(const std::string& connection, uint64_t op) {
  std::deque<Write>& writes = SenderOf(connection).writes;
  // Writes finish in issue order (callbacks fire in post order): this is the oldest.
  for (auto w = writes.begin(); w != writes.end(); ++w) {
    if (w->op == op) {
      writes.erase(w);
      break;
    }
  }
}

void SimInvariants::MessageIssued(const std::string& connection, uint64_t message, uint64_t op) {
  SenderOf(connection).messages.emplace(message, op);
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
    if (overlapped) continue;
    const Verdict v = Examine(s.id, w);
    if (v == Verdict::kNothingToShow) continue;
    ++counts_.writes_before_checked;
    if (v == Verdict::kMissing) {
      ++counts_.order_violations;
      ok = false;
    }
  }
  return ok;
}

}  // namespace unloadkv::world
