#include "transport/bench/gnuplot.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace unloadkv::bench {

absl::Status RunGnuplot(const std::string& script_path, const std::string& script) {
  {
    std::ofstream out(script_path);
    out << script;
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", script_path));
  }
  if (std::system(absl::StrCat("gnuplot '", script_path, "'").c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gnuplot failed on ", script_path, " (is it installed? apt-get install gnuplot-nox)"));
  }
  return absl::OkStatus();
}

}  // namespace unloadkv::bench
