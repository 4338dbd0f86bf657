// The progress lines of a long admin command (kvclient cluster move, split, ...): each new line
// prefixed with the seconds since the command began; a line equal to the last one is not
// repeated (a step that found nothing new to say).
//
// Thread-safety: one thread.
#ifndef UNLOADKV_TRANSPORT_PLACEMENT_PROGRESS_LINES_H_
#define UNLOADKV_TRANSPORT_PLACEMENT_PROGRESS_LINES_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace unloadkv {

class ProgressLines {
 public:
  explicit ProgressLines(std::function<void(const std::string&)> say)
      : say_(std::move(say)), start_(absl::Now()) {}

  void Tell(const std::string& what) {
    if (what == last_) return;
    last_ = what;
    say_(absl::StrFormat("[%6.1f s] %s", absl::ToDoubleSeconds(absl::Now() - start_), what));
  }
  absl::Time start() const { return start_; }

 private:
  const std::function<void(const std::string&)> say_;
  const absl::Time start_;
  std::string last_;
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_PLACEMENT_PROGRESS_LINES_H_
