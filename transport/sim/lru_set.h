// A fixed-capacity set with least-recently-used eviction: the translation caches of the
// modeled NIC. Not thread-safe.
#ifndef UNLOADKV_TRANSPORT_SIM_LRU_SET_H_
#define UNLOADKV_TRANSPORT_SIM_LRU_SET_H_

#include <cstddef>
#include <cstdint>
#include <list>

#include "absl/container/flat_hash_map.h"

namespace unloadkv::sim {

class LruSet {
 public:
  explicit LruSet(size_t capacity) : capacity_(capacity) {}

  // Looks `key` up; returns true on a hit. On a miss the key is inserted, evicting the least
  // recently used key when full. Either way `key` becomes the most recently used.
  bool Touch(uint64_t key) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return true;
    }
    if (capacity_ == 0) return false;
    if (index_.size() >= capacity_) {
      index_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    index_[key] = order_.begin();
    return false;
  }
  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::list<uint64_t> order_;
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_LRU_SET_H_
