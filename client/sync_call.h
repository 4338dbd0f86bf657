// Pieces of the SDK's synchronous calls: the state a waiting caller shares with the callback
// that completes it, which failures are worth retrying, the retry loop, and response parsing.
#ifndef UNLOADKV_CLIENT_SYNC_CALL_H_
#define UNLOADKV_CLIENT_SYNC_CALL_H_

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace unloadkv::client_internal {

// The state of one synchronous call: the callback fills it under the mutex; the waiter reads
// it after Client::Wait saw `done`, taking the mutex so the callback has finished with it.
template <typename T>
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::optional<T> result;
};

// Local push-back is always worth another try; a timeout only when repeating cannot change the
// outcome (idempotent calls).
inline bool Transient(const absl::Status& st, bool idempotent) {
  return st.code() == absl::StatusCode::kResourceExhausted ||
         (idempotent && st.code() == absl::StatusCode::kDeadlineExceeded);
}

// Runs `fn` (returning absl::Status or absl::StatusOr<...>) and repeats it up to `max_retries`
// times while it fails transiently, sleeping 1, 2, 4... ms in between.
template <typename T, typename Fn>
T WithRetries(int max_retries, bool idempotent, Fn fn) {
  T r = fn();
  for (int attempt = 0; attempt < max_retries; ++attempt) {
    absl::Status st;
    if constexpr (std::is_same_v<T, absl::Status>) {
      st = r;
    } else {
      st = r.status();
    }
    if (st.ok() || !Transient(st, idempotent)) break;
    absl::SleepFor(absl::Milliseconds(1 << attempt));
    r = fn();
  }
  return r;
}

// Errors are moved, never copied, from the engine thread that made them to the caller: a
// non-OK absl::Status shares a reference-counted rep, and Debian's Abseil is not built with
// TSan, so a rep referenced from two threads and released inside the library looks like a race
// to TSan. With one owner at a time there is nothing to misreport.
template <typename Resp>
absl::StatusOr<Resp> Parse(absl::StatusOr<std::string> bytes) {
  if (!bytes.ok()) return std::move(bytes).status();
  Resp r;
  if (!r.ParseFromString(*bytes)) return absl::InternalError("server response does not parse");
  return r;
}

}  // namespace unloadkv::client_internal

#endif  // UNLOADKV_CLIENT_SYNC_CALL_H_
