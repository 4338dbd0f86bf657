// Client::Connect: a NodeClient for one kvserver, or a ClusterRouter for a cluster.
#include "client/client.h"

#include <algorithm>
#include <string_view>

#include "client/client_hooks.h"
#include "client/client_impl.h"
#include "client/cluster_router.h"
#include "proto/field_record.h"
#include "transport/base/version.h"

namespace unloadkv {

static_assert(std::string_view(UNLOADKV_VERSION) == kVersion,
              "client.h's UNLOADKV_VERSION differs from transport/base/version.h");
#define UNLOADKV_STRINGIZE_(x) #x
#define UNLOADKV_STRINGIZE(x) UNLOADKV_STRINGIZE_(x)
static_assert(std::string_view(UNLOADKV_VERSION) ==
                  UNLOADKV_STRINGIZE(UNLOADKV_VERSION_MAJOR) "." UNLOADKV_STRINGIZE(
                      UNLOADKV_VERSION_MINOR) "." UNLOADKV_STRINGIZE(UNLOADKV_VERSION_PATCH),
              "UNLOADKV_VERSION differs from its MAJOR, MINOR and PATCH");

const char* Version() { return kVersion; }

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  return ConnectWithHooks(options, ClientHooks());
}

absl::StatusOr<std::unique_ptr<Client>> ConnectWithHooks(const ClientOptions& options,
                                                         const ClientHooks& hooks) {
  if (!options.etcd.empty() || hooks.cluster_map != nullptr) {
    absl::StatusOr<std::unique_ptr<ClusterRouter>> router = ClusterRouter::Connect(options, hooks);
    if (!router.ok()) return router.status();
    return std::unique_ptr<Client>(std::move(*router));
  }
  absl::StatusOr<std::unique_ptr<NodeClient>> node = NodeClient::Connect(options, hooks);
  if (!node.ok()) return node.status();
  return std::unique_ptr<Client>(std::move(*node));
}

std::string EncodeFields(const Fields& fields) {
  Fields unique;
  for (const auto& [name, value] : fields) {
    auto same = std::find_if(unique.begin(), unique.end(),
                             [&name = name](const auto& f) { return f.first == name; });
    if (same != unique.end()) {
      same->second = value;
    } else {
      unique.emplace_back(name, value);
    }
  }
  std::string out;
  for (const auto& [name, value] : unique) proto::AppendField(name, value, &out);
  return out;
}

absl::StatusOr<Fields> DecodeFields(absl::string_view record) {
  absl::StatusOr<proto::FieldViews> views = proto::DecodeFieldRecord(record);
  if (!views.ok()) return absl::InvalidArgumentError(views.status().message());
  Fields fields;
  fields.reserve(views->size());
  for (const auto& [name, value] : *views) fields.emplace_back(name, value);
  return fields;
}

Client::~Client() = default;

Client::Batch::Batch(std::unique_ptr<State> state) : state_(std::move(state)) {}
Client::Batch::Batch(Batch&&) noexcept = default;
Client::Batch::~Batch() = default;

}  // namespace unloadkv
