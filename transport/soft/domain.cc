// The soft device's protection domain: regions, windows and QP numbers of all its ports.
#include "transport/soft/domain.h"

#include <vector>

#include "transport/rnic/memory_region.h"

namespace unloadkv::soft {

uint32_t Domain::NewQpNum() {
  Lock l(*this);
  return next_qp_num_++;
}

uint32_t Domain::Register(uint64_t addr, uint64_t length, uint32_t access) {
  Lock l(*this);
  const uint32_t key = NewKey();
  regions_.Insert(key, {addr, length, access});
  return key;
}

void Domain::Deregister(uint32_t key) {
  Lock l(*this);
  regions_.Erase(key);
  // Its windows go with it.
  std::vector<WindowCore*> on_it;
  for (const auto& [k, w] : bound_) {
    if (w->region_key == key) on_it.push_back(w);
  }
  for (WindowCore* w : on_it) Unbind(w);
}

void Domain::AddWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  Lock l(*this);
  windows_[handle] = window;
}

void Domain::RemoveWindow(const rnic::MemoryWindow* handle, WindowCore* window) {
  Lock l(*this);
  if (window->key != 0) Unbind(window);
  windows_.erase(handle);
}

rnic::WcStatus Domain::Bind(uint32_t qp, const rnic::WindowBind& b) {
  Lock l(*this);
  auto wit = windows_.find(b.window);
  if (wit == windows_.end()) return rnic::WcStatus::kWindowBindError;  // another device's
  WindowCore* w = wit->second;
  if (w->key != 0) return rnic::WcStatus::kWindowBindError;  // type 2: invalidate first
  const uint32_t region_key = b.region->lkey();
  if (!regions_.CanBind(region_key, b.access, b.addr, b.length)) {
    return rnic::WcStatus::kWindowBindError;
  }
  const uint32_t key = NewKey();
  regions_.Insert(key, {b.addr, b.length, b.access, qp, region_key});
  w->key = key;
  w->qp = qp;
  w->region_key = region_key;
  w->last_key.store(key, std::memory_order_release);
  bound_[key] = w;
  qp_windows_[qp].insert(key);
  return rnic::WcStatus::kSuccess;
}

bool Domain::IsBoundTo(uint32_t key, uint32_t qp) const {
  Lock l(*this);
  auto it = bound_.find(key);
  return it != bound_.end() && it->second->qp == qp;
}

bool Domain::Invalidate(uint32_t key, uint32_t qp) {
  Lock l(*this);
  auto it = bound_.find(key);
  if (it == bound_.end() || it->second->qp != qp) return false;
  Unbind(it->second);
  return true;
}

void Domain::UnbindAllOf(uint32_t qp, bool forget) {
  Lock l(*this);
  auto it = qp_windows_.find(qp);
  if (it == qp_windows_.end()) return;
  while (!it->second.empty()) Unbind(bound_.at(*it->second.begin()));
  if (forget) qp_windows_.erase(it);
}

uint32_t Domain::NewKey() {
  return keys_.Next([&](uint32_t k) { return regions_.Contains(k); });
}

void Domain::Unbind(WindowCore* w) {
  regions_.Erase(w->key);
  bound_.erase(w->key);
  if (auto q = qp_windows_.find(w->qp); q != qp_windows_.end()) q->second.erase(w->key);
  w->key = 0;
  w->qp = 0;
}

}  // namespace unloadkv::soft
