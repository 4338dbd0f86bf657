// Client: the public SDK, forwarding to Client::Impl (client_impl.h).
#include "client/client.h"

#include <optional>

#include "client/client_impl.h"
#include "client/cluster_router.h"

namespace unloadkv {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (!options.etcd.empty() || options.cluster_map != nullptr) {
    absl::StatusOr<std::unique_ptr<ClusterRouter>> router = ClusterRouter::Connect(options);
    if (!router.ok()) return router.status();
    return std::unique_ptr<Client>(new Client(std::move(*router)));
  }
  absl::StatusOr<std::unique_ptr<Impl>> impl = Impl::Connect(options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Client>(new Client(std::move(*impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::Client(std::unique_ptr<ClusterRouter> router) : router_(std::move(router)) {}
Client::~Client() = default;

// Each call goes to the router in a cluster, else to the one connection.
#define UNLOADKV_DISPATCH(CALL) return router_ ? router_->CALL : impl_->CALL

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  UNLOADKV_DISPATCH(Put(key, value));
}
absl::Status Client::MergeFields(absl::string_view key, absl::string_view fields) {
  UNLOADKV_DISPATCH(Put(key, fields, /*merge=*/true));
}
absl::StatusOr<std::string> Client::Get(absl::string_view key) { UNLOADKV_DISPATCH(Get(key)); }
absl::Status Client::Delete(absl::string_view key) { UNLOADKV_DISPATCH(Delete(key)); }
absl::StatusOr<ScanPage> Client::Scan(absl::string_view start, absl::string_view end,
                                      uint32_t limit) {
  UNLOADKV_DISPATCH(Scan(start, end, limit));
}
absl::StatusOr<proto::StatsResponse> Client::Stats() { UNLOADKV_DISPATCH(Stats()); }

void Client::PutAsync(absl::string_view key, absl::string_view value,
                      std::function<void(absl::StatusOr<uint64_t>)> done) {
  UNLOADKV_DISPATCH(PutAsync(key, value, std::move(done)));
}
void Client::MergeFieldsAsync(absl::string_view key, absl::string_view fields,
                              std::function<void(absl::StatusOr<uint64_t>)> done) {
  if (router_) return router_->PutAsync(key, fields, std::move(done), /*merge=*/true);
  impl_->PutAsync(key, fields, std::move(done), /*shard=*/0, /*merge=*/true);
}
void Client::GetAsync(absl::string_view key,
                      std::function<void(absl::StatusOr<std::string>)> done) {
  UNLOADKV_DISPATCH(GetAsync(key, std::move(done)));
}
void Client::DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) {
  UNLOADKV_DISPATCH(DeleteAsync(key, std::move(done)));
}

struct Client::Batch::State {
  std::optional<engine::Connection::Batch> batch;
};
Client::Batch::Batch(std::unique_ptr<State> state) : state_(std::move(state)) {}
Client::Batch::Batch(Batch&&) noexcept = default;
Client::Batch::~Batch() = default;

Client::Batch Client::BeginBatch() {
  auto state = std::make_unique<Batch::State>();
  if (impl_) state->batch.emplace(impl_->BeginBatch());
  return Batch(std::move(state));
}

void Client::Wait(const std::function<bool()>& done) { UNLOADKV_DISPATCH(Wait(done)); }
int Client::in_flight() const { UNLOADKV_DISPATCH(in_flight()); }
bool Client::connected() const { UNLOADKV_DISPATCH(connected()); }
WriteStats Client::write_stats() const { UNLOADKV_DISPATCH(write_stats()); }
const std::string& Client::staging_memory() const { UNLOADKV_DISPATCH(staging_memory()); }

#undef UNLOADKV_DISPATCH

}  // namespace unloadkv
