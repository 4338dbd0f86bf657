// Client: the public SDK, forwarding to Client::Impl (client_impl.h).
#include "client/client.h"

#include "client/client_impl.h"

namespace unloadkv {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Impl>> impl = Impl::Connect(options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Client>(new Client(std::move(*impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  return impl_->Put(key, value);
}
absl::StatusOr<std::string> Client::Get(absl::string_view key) { return impl_->Get(key); }
absl::Status Client::Delete(absl::string_view key) { return impl_->Delete(key); }
absl::StatusOr<ScanPage> Client::Scan(absl::string_view start, absl::string_view end,
                                      uint32_t limit) {
  return impl_->Scan(start, end, limit);
}
absl::StatusOr<proto::StatsResponse> Client::Stats() { return impl_->Stats(); }

void Client::PutAsync(absl::string_view key, absl::string_view value,
                      std::function<void(absl::StatusOr<uint64_t>)> done) {
  impl_->PutAsync(key, value, std::move(done));
}
void Client::GetAsync(absl::string_view key,
                      std::function<void(absl::StatusOr<std::string>)> done) {
  impl_->GetAsync(key, std::move(done));
}
void Client::DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) {
  impl_->DeleteAsync(key, std::move(done));
}

void Client::Wait(const std::function<bool()>& done) { impl_->Wait(done); }
int Client::in_flight() const { return impl_->in_flight(); }
bool Client::connected() const { return impl_->connected(); }
WriteStats Client::write_stats() const { return impl_->write_stats(); }
const std::string& Client::staging_memory() const { return impl_->staging_memory(); }

}  // namespace unloadkv
