// Minimal leveled logging to stderr. (Debian 12's Abseil predates absl/log.)
#ifndef UNLOADKV_TRANSPORT_BASE_LOGGING_H_
#define UNLOADKV_TRANSPORT_BASE_LOGGING_H_

#include "absl/strings/string_view.h"

namespace unloadkv {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

// Writes one line "<time> <level> <message>" to stderr. Thread-safe.
void Log(LogLevel level, absl::string_view message);

// Messages below this level are dropped. Default kInfo; tests raise it to keep output short.
void SetMinLogLevel(LogLevel level);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_LOGGING_H_
