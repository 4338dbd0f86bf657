#include "transport/base/logging.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace unloadkv {
namespace {
std::atomic<int> min_level{0};
LogSink log_sink = nullptr;  // written only while nothing logs (SetLogSink's contract)
void* log_sink_context = nullptr;
}  // namespace

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

void SetLogSink(LogSink sink, void* context) {
  log_sink = sink;
  log_sink_context = context;
}

void Log(LogLevel level, absl::string_view message) {
  if (static_cast<int>(level) < min_level.load(std::memory_order_relaxed)) return;
  if (log_sink != nullptr) return log_sink(log_sink_context, level, message);
  static constexpr const char* kNames[] = {"I", "W", "E"};
  std::string line =
      absl::StrCat(absl::FormatTime("%H:%M:%E6S", absl::Now(), absl::LocalTimeZone()), " ",
                   kNames[static_cast<int>(level)], " ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void ThrottledLog::Log(LogLevel level, absl::string_view message) {
  const absl::Time now = absl::Now();
  uint64_t dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (now < next_) {
      ++dropped_;
      return;
    }
    next_ = now + period_;
    dropped = dropped_;
    dropped_ = 0;
  }
  if (dropped == 0) {
    unloadkv::Log(level, message);
  } else {
    unloadkv::Log(level, absl::StrCat(message, " (and ", dropped, " more like it not logged)"));
  }
}

}  // namespace unloadkv
