#include "tests/sim/kv_world.h"

namespace unloadkv::world {
namespace {

// Where the server's arena is mapped (a hint; writebench uses the same one): the adaptive
// policy hashes destination pages, so the address must not vary with ASLR.
void* const kArenaAddress = reinterpret_cast<void*>(uintptr_t{0x500000000000});

}  // namespace

absl::StatusOr<std::unique_ptr<KvWorld>> KvWorld::Create(const KvWorldOptions& options) {
  if (options.max_idle <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("max_idle must be positive");
  }
  std::unique_ptr<KvWorld> w(new KvWorld());
  w->max_idle_ = options.max_idle;
  w->client_model_ = options.client_model;
  w->server_model_cores_ = std::max(1, options.server_model.cpu.cores);
  w->server_device_ = w->fabric_.CreateDevice(options.server_model);
  w->server_embedding_.device = w->server_device_.get();
  w->server_embedding_.clock = &w->fabric_.clock();
  w->server_embedding_.arena_huge_pages = options.arena_huge_pages;
  w->server_embedding_.arena_address = kArenaAddress;
  KvServerOptions so = options.server;
  so.embedding = &w->server_embedding_;
  absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(so);
  if (!server.ok()) return server.status();
  w->server_ = std::move(*server);
  return w;
}

KvWorld::~KvWorld() {
  if (server_ != nullptr) server_->Shutdown();
}

absl::StatusOr<std::unique_ptr<Client>> KvWorld::Connect(ClientOptions options) {
  client_devices_.push_back(fabric_.CreateDevice(client_model_));
  std::unique_ptr<ClientEmbedding> e =
      SimClientEmbedding(client_devices_.back().get(), fabric_, lockstep_, pollers_);
  e->bootstrap = [this](const std::string&, const rpc::HelloFn& hello, absl::Duration) {
    return server_->Admit(hello);
  };
  ClientHooks hooks;
  hooks.embedding = e.get();
  options.server = "the simulated kvserver";  // names it in the SDK's errors
  client_embeddings_.push_back(std::move(e));
  return ConnectWithHooks(options, hooks);
}

absl::Status KvWorld::RunThreads(std::vector<std::function<void()>> bodies) {
  for (std::function<void()>& b : bodies) lockstep_.Spawn(std::move(b));
  return lockstep_.Run();
}

bool KvWorld::Step() {
  int work = server_->DriveOnce();
  work += pollers_.PollAll();
  if (work > 0) {
    idle_since_ns_ = -1;
    return true;
  }
  if (fabric_.idle()) {
    // Nothing in flight anywhere: let time pass so that deadlines fire, but not forever.
    if (idle_since_ns_ < 0) idle_since_ns_ = fabric_.now_ns();
    if (fabric_.now_ns() - idle_since_ns_ > absl::ToInt64Nanoseconds(max_idle_)) return false;
  }
  fabric_.Run(absl::ToInt64Nanoseconds(absl::Milliseconds(1)));
  return true;
}

}  // namespace unloadkv::world
