// For backends: the objects a QpConfig names, as the backend's own types. A backend's
// CreateQueuePair is handed CQs and an SRQ through the interface; anything but its own (another
// backend's, mixed up by a caller) is refused the same way on every backend.
#ifndef UNLOADKV_TRANSPORT_RNIC_BACKEND_OBJECTS_H_
#define UNLOADKV_TRANSPORT_RNIC_BACKEND_OBJECTS_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "transport/rnic/queue_pair.h"

namespace unloadkv::rnic {

template <typename Cq, typename Srq>
struct QpObjects {
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;  // null when the config names none
};

// `config`'s CQs and SRQ as backend `Cq` and `Srq` objects; InvalidArgument naming `backend`
// ("soft", "sim", "verbs") when one is missing or another backend's. Whether an SRQ belongs to
// this very device is the backend's to check.
template <typename Cq, typename Srq>
absl::StatusOr<QpObjects<Cq, Srq>> BackendQpObjects(const QpConfig& config,
                                                    absl::string_view backend) {
  QpObjects<Cq, Srq> o;
  o.send_cq = dynamic_cast<Cq*>(config.send_cq);
  o.recv_cq = dynamic_cast<Cq*>(config.recv_cq);
  if (o.send_cq == nullptr || o.recv_cq == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateQueuePair: send_cq and recv_cq must be CQs of a ", backend, " device"));
  }
  if (config.srq != nullptr) {
    o.srq = dynamic_cast<Srq*>(config.srq);
    if (o.srq == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CreateQueuePair: srq must be a shared receive queue of a ", backend, " device"));
    }
  }
  return o;
}

}  // namespace unloadkv::rnic

#endif  // UNLOADKV_TRANSPORT_RNIC_BACKEND_OBJECTS_H_
