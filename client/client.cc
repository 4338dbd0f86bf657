// Client::Connect: a NodeClient for one kvserver, or a ClusterRouter for a cluster.
#include "client/client.h"

#include "client/client_impl.h"
#include "client/cluster_router.h"

namespace unloadkv {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (!options.etcd.empty() || options.cluster_map != nullptr) {
    absl::StatusOr<std::unique_ptr<ClusterRouter>> router = ClusterRouter::Connect(options);
    if (!router.ok()) return router.status();
    return std::unique_ptr<Client>(std::move(*router));
  }
  absl::StatusOr<std::unique_ptr<NodeClient>> node = NodeClient::Connect(options);
  if (!node.ok()) return node.status();
  return std::unique_ptr<Client>(std::move(*node));
}

Client::~Client() = default;

Client::Batch::Batch(std::unique_ptr<State> state) : state_(std::move(state)) {}
Client::Batch::Batch(Batch&&) noexcept = default;
Client::Batch::~Batch() = default;

}  // namespace unloadkv
