#include "server/grant_windows.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"

namespace unloadkv::server {

void ConnectionGrants::Add(uint32_t rkey, uint64_t addr, uint64_t length) {
  MutexLock l(&mu_);
  ranges_[rkey] = {addr, length};
}

void ConnectionGrants::Remove(uint32_t rkey) {
  MutexLock l(&mu_);
  ranges_.erase(rkey);
}

rnic::AccessVerdict ConnectionGrants::Check(uint32_t rkey, uint64_t addr, uint64_t length) const {
  MutexLock l(&mu_);
  auto it = ranges_.find(rkey);
  if (it == ranges_.end()) return rnic::AccessVerdict::kUnknownKey;
  const Range& r = it->second;
  // Written to avoid overflow: addr + length may wrap for hostile inputs.
  if (addr < r.addr || addr - r.addr > r.length || length > r.length - (addr - r.addr)) {
    return rnic::AccessVerdict::kOutOfBounds;
  }
  return rnic::AccessVerdict::kOk;
}

GrantWindows::~GrantWindows() {
  MutexLock l(&mu_);
  entries_.clear();
}

std::shared_ptr<ConnectionGrants> GrantWindows::ChecksFor(uint64_t client) {
  MutexLock l(&mu_);
  std::shared_ptr<ConnectionGrants>& c = checks_[client];
  if (c == nullptr) c = std::make_shared<ConnectionGrants>();
  return c;
}

size_t GrantWindows::windows() const {
  MutexLock l(&mu_);
  return entries_.size();
}

std::vector<GrantWindows::Live> GrantWindows::LiveWindows(uint32_t shard) const {
  std::vector<Live> out;
  MutexLock l(&mu_);
  for (const auto& [key, e] : entries_) {
    if (key.shard == shard && !e.binding && !e.releasing) {
      out.push_back({e.client, e.rkey, e.addr, e.length});
    }
  }
  std::sort(out.begin(), out.end(), [](const Live& a, const Live& b) { return a.rkey < b.rkey; });
  return out;
}

void GrantWindows::Bind(const std::shared_ptr<engine::Connection>& conn, uint64_t client,
                        uint32_t shard, uint64_t generation, KvStore& store,
                        const std::vector<KvStore::Grant>& grants, const rnic::MemoryRegion& arena,
                        std::function<void(absl::StatusOr<std::vector<uint32_t>>)> done) {
  std::vector<engine::WindowGrant> specs;
  std::vector<std::unique_ptr<rnic::MemoryWindow>> windows;
  {
    MutexLock l(&mu_);
    while (windows.size() < grants.size() && !free_.empty()) {
      windows.push_back(std::move(free_.back()));
      free_.pop_back();
    }
  }
  for (size_t i = 0; i < grants.size(); ++i) {
    const KvStore::Grant& g = grants[i];
    if (i < windows.size()) {
      specs.push_back({windows[i].get(), &arena, arena.address() + g.slot.offset, g.slot.capacity});
      continue;
    }
    absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> w = device_->AllocateWindow();
    if (!w.ok()) {
      for (const KvStore::Grant& r : grants) store.RevokeGrant(client, r.id);
      return done(w.status());
    }
    specs.push_back({w->get(), &arena, arena.address() + g.slot.offset, g.slot.capacity});
    windows.push_back(std::move(*w));
  }
  // The grants are known here before their windows are bound: a PUT that names one meanwhile
  // is refused (Release), so no value is published while a window onto its slot may still
  // come into being.
  bool revoked = false;
  {
    MutexLock l(&mu_);
    // The shard stopped being primary here after the grants were made: a RevokeShard that ran
    // before these entries existed could not close this connection.
    revoked = generations_[shard] != generation;
    for (size_t i = 0; i < grants.size() && !revoked; ++i) {
      Entry& e = entries_[Key{shard, grants[i].id}];
      e.client = client;
      e.binding = true;
      e.window = std::move(windows[i]);
      e.conn = conn;
    }
  }
  if (revoked) {
    for (const KvStore::Grant& g : grants) store.RevokeGrant(client, g.id);
    return done(absl::UnavailableError(
        absl::StrCat("GRANT: shard ", shard, " stopped being primary here; retry")));
  }
  // The answer need not wait for the binds' completion: it leaves on the same send queue
  // after them (Connection::BindWindows), so the client cannot use a key before its window
  // works. A failed bind fails the connection, which ends the client's grants (DropClient).
  absl::Status posted = conn->BindWindows(specs, [](absl::Status) {});
  if (!posted.ok()) {
    for (const KvStore::Grant& g : grants) {
      Forget(Key{shard, g.id}, /*invalidated=*/false);
      store.RevokeGrant(client, g.id);
    }
    return done(posted);
  }
  std::shared_ptr<ConnectionGrants> check = ChecksFor(client);
  std::vector<uint32_t> keys;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < grants.size(); ++i) {
      auto it = entries_.find(Key{shard, grants[i].id});
      if (it == entries_.end()) {  // dropped meanwhile: the connection ended
        keys.push_back(0);
        continue;
      }
      Entry& e = it->second;
      e.rkey = specs[i].window->rkey();
      e.addr = specs[i].addr;
      e.length = specs[i].length;
      e.binding = false;
      check->Add(e.rkey, specs[i].addr, specs[i].length);
      keys.push_back(e.rkey);
    }
  }
  done(std::move(keys));
}

absl::Status GrantWindows::Release(uint64_t client, uint32_t shard, uint64_t grant_id,
                                   std::function<void()> then) {
  std::shared_ptr<engine::Connection> conn;
  uint32_t rkey = 0;
  std::shared_ptr<ConnectionGrants> check;
  const Key key{shard, grant_id};
  {
    MutexLock l(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.client != client) {
      then();  // nothing of this client's bound here: the store decides
      return absl::OkStatus();
    }
    Entry& e = it->second;
    if (e.releasing || e.binding) {
      return absl::FailedPreconditionError(
          absl::StrCat("grant ", grant_id,
                       e.binding ? " is not granted yet (its window is being bound)"
                                 : " is being used by another PUT"));
    }
    e.releasing = true;
    conn = e.conn.lock();
    rkey = e.rkey;
    auto c = checks_.find(client);
    if (c != checks_.end()) check = c->second;
  }
  if (check != nullptr) check->Remove(rkey);  // its staged writes are refused from here on
  // The invalidation's callback points to its state: a capture of it would allocate.
  Releasing* r = ObjectPool<Releasing>::Take();
  r->windows = this;
  r->key = key;
  r->then = std::move(then);
  auto finish = [r](absl::Status st) {
    r->windows->Forget(r->key, /*invalidated=*/st.ok());
    std::function<void()> run = std::move(r->then);
    ObjectPool<Releasing>::Give(r);
    run();
  };
  if (conn == nullptr || !conn->InvalidateWindow(rkey, finish).ok()) {
    // The connection is gone or failed: its windows died with its QPs. Close waits for the
    // staged writes still being copied.
    if (conn != nullptr) conn->Close();
    finish(absl::UnavailableError("the connection ended"));
  }
  return absl::OkStatus();
}

void GrantWindows::Forget(const Key& key, bool invalidated) {
  std::unique_ptr<rnic::MemoryWindow> window;  // destroyed after the lock is released
  MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  window = std::move(it->second.window);
  entries_.erase(it);
  // A window whose invalidation completed is unbound and can be bound again; one that died with
  // its connection's QPs is given back to the device.
  if (invalidated && window != nullptr && free_.size() < kMaxFreeWindows) {
    free_.push_back(std::move(window));
  }
}

void GrantWindows::DropClient(uint64_t client) {
  std::vector<std::unique_ptr<rnic::MemoryWindow>> gone;
  MutexLock l(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.client == client) {
      gone.push_back(std::move(it->second.window));
      entries_.erase(it++);
    } else {
      ++it;
    }
  }
  checks_.erase(client);
}

uint64_t GrantWindows::Generation(uint32_t shard) const {
  MutexLock l(&mu_);
  auto it = generations_.find(shard);
  return it == generations_.end() ? 0 : it->second;
}

void GrantWindows::RevokeShard(uint32_t shard) {
  std::vector<std::shared_ptr<engine::Connection>> holders;
  {
    MutexLock l(&mu_);
    ++generations_[shard];
    for (const auto& [key, e] : entries_) {
      if (key.shard != shard) continue;
      if (std::shared_ptr<engine::Connection> c = e.conn.lock()) holders.push_back(std::move(c));
    }
  }
  if (!holders.empty()) {
    Log(LogLevel::kInfo,
        absl::StrCat("kvserver: shard ", shard, " is no longer primary here: ", "closing the ",
                     holders.size(), " client connections holding windows into it"));
  }
  for (const std::shared_ptr<engine::Connection>& c : holders) c->Close();
  std::vector<std::unique_ptr<rnic::MemoryWindow>> gone;
  MutexLock l(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.shard == shard) {
      gone.push_back(std::move(it->second.window));
      entries_.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace unloadkv::server
