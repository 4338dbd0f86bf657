// A write that failed before its PUT left this client (the connection was lost while it waited
// for a slot grant, or before the PUT was posted) changed nothing at the server: unlike a PUT
// whose answer was lost, it is safe to send again. The SDK marks such failures with a status
// payload; the cluster router retries them by the map instead of failing them "outcome
// unknown". The status code (UNAVAILABLE, ...) is kept, so a single-node client reports the
// same error as before.
#ifndef UNLOADKV_CLIENT_NOT_SENT_H_
#define UNLOADKV_CLIENT_NOT_SENT_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace unloadkv::client_internal {

inline constexpr absl::string_view kNotSentPayload = "unloadkv.dev/write-not-sent";

// `st` (not OK) marked as a write the server never received.
inline absl::Status NotSent(absl::Status st) {
  if (!st.ok()) st.SetPayload(kNotSentPayload, absl::Cord("1"));
  return st;
}

inline bool WasNotSent(const absl::Status& st) {
  return !st.ok() && st.GetPayload(kNotSentPayload).has_value();
}

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_NOT_SENT_H_
