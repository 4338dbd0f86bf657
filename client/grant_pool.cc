#include "client/grant_pool.h"

#include <algorithm>

namespace unloadkv::client_internal {

std::optional<proto::SlotGrant> GrantPool::TakeOrWait(int cls, Use&& use, bool* request) {
  MutexLock l(&mu_);
  Class& c = classes_[cls];
  *request = false;
  if (!c.pool.empty()) {
    proto::SlotGrant g = c.pool.back();
    c.pool.pop_back();
    return g;
  }
  c.waiters.push_back(std::move(use));
  *request = !c.requesting;
  c.requesting = true;
  return std::nullopt;
}

std::optional<proto::SlotGrant> GrantPool::TryTake(int cls) {
  MutexLock l(&mu_);
  std::vector<proto::SlotGrant>& pool = classes_[cls].pool;
  if (pool.empty()) return std::nullopt;
  proto::SlotGrant g = pool.back();
  pool.pop_back();
  return g;
}

uint32_t GrantPool::RequestSize(int cls) {
  MutexLock l(&mu_);
  return std::clamp<uint32_t>(static_cast<uint32_t>(classes_[cls].waiters.size()), kBatch,
                              proto::kMaxGrantsPerRequest);
}

GrantPool::Answered GrantPool::OnAnswer(int cls,
                                        const absl::StatusOr<proto::GrantResponse>& answer) {
  Answered out;
  MutexLock l(&mu_);
  Class& c = classes_[cls];
  if (answer.ok()) {
    for (const proto::SlotGrant& sg : answer->grants()) c.pool.push_back(sg);
  }
  while (!c.waiters.empty() && (!answer.ok() || !c.pool.empty())) {
    if (answer.ok()) {
      out.run.emplace_back(std::move(c.waiters.front()), c.pool.back());
      c.pool.pop_back();
    } else {
      // A fresh Status per waiter: each then has one owner thread (see sync_call.h, Parse).
      out.run.emplace_back(std::move(c.waiters.front()),
                           absl::Status(answer.status().code(), answer.status().message()));
    }
    c.waiters.pop_front();
  }
  out.again = !c.waiters.empty();
  c.requesting = out.again;
  return out;
}

void GrantPool::Return(const proto::SlotGrant& g) {
  MutexLock l(&mu_);
  classes_[proto::SlotClassOf(g.capacity())].pool.push_back(g);
}

}  // namespace unloadkv::client_internal
