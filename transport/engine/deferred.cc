#include "transport/engine/deferred.h"

#include <utility>

namespace unloadkv::engine {
namespace {

// Storage given back by this thread's Deferreds, kept with its capacity. A thread takes back
// as many as it gives (RunCallbacks swaps one into the connection and gets another out), so
// the pool stays about as deep as the thread's nesting of Deferreds. A Deferred destroyed
// after the pool (a connection destroyed by a static destructor, after the thread's
// thread_locals) frees its storage instead: pool_gone is trivially destructible, so it stays
// readable.
thread_local bool pool_gone = false;

template <typename Storage>
struct PoolHolder {
  std::vector<std::unique_ptr<Storage>> spares;
  ~PoolHolder() { pool_gone = true; }
};

template <typename Storage>
std::vector<std::unique_ptr<Storage>>* Pool() {
  if (pool_gone) return nullptr;
  thread_local PoolHolder<Storage> pool;
  return &pool.spares;
}

}  // namespace

Deferred::Deferred() {
  std::vector<std::unique_ptr<Storage>>* pool = Pool<Storage>();
  if (pool == nullptr || pool->empty()) {
    storage_ = std::make_unique<Storage>();
  } else {
    storage_ = std::move(pool->back());
    pool->pop_back();
  }
}

Deferred::~Deferred() {
  storage_->entries.clear();  // callbacks not run: destroyed here, as the caller requires
  storage_->held.clear();
  // At most kMaxSpares kept: a thread that destroys more Deferreds than it makes (connections
  // made on one thread and closed on another) would otherwise grow its pool for good.
  constexpr size_t kMaxSpares = 64;
  std::vector<std::unique_ptr<Storage>>* pool = Pool<Storage>();
  if (pool != nullptr && pool->size() < kMaxSpares) pool->push_back(std::move(storage_));
}

void Deferred::Write(WriteCallback done, const WriteResult& result) {
  storage_->entries.emplace_back(WriteDone{std::move(done), result});
}

void Deferred::Send(SendCallback done, rnic::WcStatus status) {
  storage_->entries.emplace_back(SendDone{std::move(done), status});
}

void Deferred::Window(WindowCallback done, const absl::Status& status) {
  storage_->entries.emplace_back(WindowDone{std::move(done), status});
}

void Deferred::Deliver(const std::shared_ptr<const MessageHandler>& handler, const Held& message) {
  Storage& s = *storage_;
  Delivery* last = s.entries.empty() ? nullptr : std::get_if<Delivery>(&s.entries.back());
  if (last == nullptr || last->handler != handler) {
    s.entries.emplace_back(Delivery{handler, s.held.size(), 0});
    last = std::get_if<Delivery>(&s.entries.back());
  }
  s.held.push_back(message);
  ++last->count;
}

void Deferred::Call(std::function<void()> f) { storage_->entries.emplace_back(std::move(f)); }

bool Deferred::empty() const { return storage_->entries.empty(); }

size_t Deferred::size() const { return storage_->entries.size(); }

void Deferred::Append(Deferred& from) {
  Storage& to = *storage_;
  Storage& s = *from.storage_;
  const size_t base = to.held.size();
  to.held.insert(to.held.end(), s.held.begin(), s.held.end());
  for (Entry& e : s.entries) {
    if (Delivery* d = std::get_if<Delivery>(&e)) d->first += base;
    to.entries.push_back(std::move(e));
  }
  s.entries.clear();
  s.held.clear();
}

void Deferred::Run(DeliverFn deliver) {
  Storage& s = *storage_;
  const size_t n = s.entries.size();
  for (size_t i = 0; i < n; ++i) {
    Entry& e = s.entries[i];
    if (WriteDone* w = std::get_if<WriteDone>(&e)) {
      w->done(w->result);
    } else if (SendDone* d = std::get_if<SendDone>(&e)) {
      d->done(d->status);
    } else if (WindowDone* wd = std::get_if<WindowDone>(&e)) {
      wd->done(wd->status);
    } else if (Delivery* m = std::get_if<Delivery>(&e)) {
      static const MessageHandler kNone;
      deliver(m->handler != nullptr ? *m->handler : kNone,
              absl::MakeConstSpan(s.held.data() + m->first, m->count));
    } else {
      std::get<std::function<void()>>(e)();
    }
  }
  s.entries.clear();
  s.held.clear();
}

}  // namespace unloadkv::engine
