// libFuzzer target for the transfer-progress reader of `kvclient cluster status`: arbitrary
// text where a primary's /metrics page should be (a hostile or broken endpoint). Whatever it
// returns must be usable as is: finite, non-negative figures, a named joiner, an ETA that is
// finite or "not known" (negative).
#include <cmath>
#include <cstdint>
#include <string>

#include "client/transfer_progress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const unloadkv::TransferProgress& t : unloadkv::ParseTransfers(text, "n1")) {
    if (t.to.empty() || t.from != "n1") __builtin_trap();
    for (double v : {t.bytes, t.sent_bytes, t.seconds}) {
      if (!std::isfinite(v) || v < 0) __builtin_trap();
    }
    const double eta = t.EtaSeconds();
    if (std::isnan(eta)) __builtin_trap();
  }
  return 0;
}
