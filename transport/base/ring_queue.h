// A FIFO queue on one growable circular buffer: what the data path uses where a std::deque
// would allocate. A std::deque used as a FIFO frees a block each time its head leaves one and
// allocates one each time its tail enters a new one, so a steady stream of pushes and pops
// allocates for ever; a RingQueue allocates only to grow past its largest size so far, and
// keeps that capacity until it is destroyed (or `ShrinkToFit`).
//
// A popped or erased element is replaced by a default-constructed T at once, so whatever it
// held (a callback, a buffer) is released when it leaves the queue, as with a deque.
// Requires T default-constructible and move-assignable.
//
// References and iterators are invalidated by any push (it may grow the buffer) and by erase;
// pop_front invalidates only those to the front. Not thread-safe.
#ifndef UNLOADKV_TRANSPORT_BASE_RING_QUEUE_H_
#define UNLOADKV_TRANSPORT_BASE_RING_QUEUE_H_

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace unloadkv {

template <typename T>
class RingQueue {
  template <typename Q, typename V>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iter() = default;
    Iter(Q* q, size_t i) : q_(q), i_(i) {}
    V& operator*() const { return (*q_)[i_]; }
    V* operator->() const { return &(*q_)[i_]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    bool operator!=(const Iter& o) const { return i_ != o.i_; }
    size_t index() const { return i_; }

   private:
    Q* q_ = nullptr;
    size_t i_ = 0;
  };

 public:
  using value_type = T;
  using iterator = Iter<RingQueue, T>;
  using const_iterator = Iter<const RingQueue, const T>;

  RingQueue() = default;
  RingQueue(RingQueue&& o) noexcept { swap(o); }
  RingQueue& operator=(RingQueue&& o) noexcept {
    RingQueue(std::move(o)).swap(*this);
    return *this;
  }
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }

  // Element `i` from the front (0 is the oldest). Requires i < size().
  T& operator[](size_t i) { return slots_[Slot(i)]; }
  const T& operator[](size_t i) const { return slots_[Slot(i)]; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  iterator begin() { return iterator(this, 0); }
  iterator end() { return iterator(this, size_); }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }

  void push_back(const T& v) { emplace_back() = v; }
  void push_back(T&& v) { emplace_back() = std::move(v); }
  // Appends a T built from `args` and returns it.
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == slots_.size()) Grow();
    T& slot = slots_[Slot(size_)];
    if constexpr (sizeof...(Args) > 0) slot = T(std::forward<Args>(args)...);
    ++size_;
    return slot;
  }
  // Requires !empty().
  void pop_front() {
    slots_[head_] = T();
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  // Removes the element at `it`, moving those behind it forward; returns the iterator to the
  // element that followed it. O(size() - position).
  iterator erase(iterator it) {
    const size_t i = it.index();
    for (size_t j = i; j + 1 < size_; ++j) (*this)[j] = std::move((*this)[j + 1]);
    (*this)[size_ - 1] = T();
    --size_;
    return iterator(this, i);
  }
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }
  void swap(RingQueue& o) noexcept {
    slots_.swap(o.slots_);
    std::swap(head_, o.head_);
    std::swap(size_, o.size_);
  }
  // Lets go of the capacity an empty queue holds.
  void ShrinkToFit() {
    if (empty()) RingQueue().swap(*this);
  }

 private:
  size_t Slot(size_t i) const { return (head_ + i) & (slots_.size() - 1); }
  void Grow() {
    // Capacity stays a power of two, so a slot is an index masked, not divided.
    std::vector<T> grown(slots_.empty() ? 8 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) grown[i] = std::move((*this)[i]);
    slots_.swap(grown);
    head_ = 0;
  }

  std::vector<T> slots_;  // empty, or a power of two in size
  size_t head_ = 0;       // the front's slot
  size_t size_ = 0;
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_RING_QUEUE_H_
