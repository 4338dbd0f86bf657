// Key and value bytes for terminals and JSON.
#ifndef UNLOADKV_TRANSPORT_BASE_PRINTABLE_H_
#define UNLOADKV_TRANSPORT_BASE_PRINTABLE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace unloadkv {

// Printable ASCII as is; '\\', '\t', '\n' escaped; every other byte as \xHH.
std::string Printable(absl::string_view bytes);

// A JSON string literal (with the quotes) of `bytes`, each byte taken as the code point of
// the same value (Latin-1): printable ASCII as is, '"' and '\\' escaped, the rest as \u00HH.
// The result is ASCII, so valid UTF-8 whatever the bytes.
std::string JsonString(absl::string_view bytes);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_PRINTABLE_H_
