// Minimal leveled logging to stderr. (Debian 12's Abseil predates absl/log.)
#ifndef UNLOADKV_TRANSPORT_BASE_LOGGING_H_
#define UNLOADKV_TRANSPORT_BASE_LOGGING_H_

#include <cstdint>
#include <mutex>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace unloadkv {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

// Writes one line "<time> <level> <message>" to stderr. Thread-safe.
void Log(LogLevel level, absl::string_view message);

// Messages below this level are dropped. Default kInfo; tests raise it to keep output short.
void SetMinLogLevel(LogLevel level);

// Hands every line that passes the level filter to `sink` instead of stderr; null: stderr
// again. For a simulation that keeps the lines in its trace, stamped with virtual time. Set
// it while no other thread logs.
using LogSink = void (*)(void* context, LogLevel level, absl::string_view message);
void SetLogSink(LogSink sink, void* context);

// Logs at most one line per `period`, for events a peer can trigger at will (refused
// connections): the lines dropped meanwhile are counted in the next line written. Thread-safe.
class ThrottledLog {
 public:
  explicit ThrottledLog(absl::Duration period) : period_(period) {}
  void Log(LogLevel level, absl::string_view message);

 private:
  const absl::Duration period_;
  std::mutex mu_;
  absl::Time next_ = absl::InfinitePast();  // guarded by mu_
  uint64_t dropped_ = 0;                    // guarded by mu_
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_LOGGING_H_
