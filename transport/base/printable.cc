#include "transport/base/printable.h"

#include "absl/strings/str_cat.h"

namespace unloadkv {

std::string Printable(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char ch : bytes) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(ch, absl::kZeroPad2));
    }
  }
  return out;
}

std::string JsonString(absl::string_view bytes) {
  std::string out = "\"";
  for (unsigned char ch : bytes) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      absl::StrAppend(&out, "\\u00", absl::Hex(ch, absl::kZeroPad2));
    }
  }
  out += '"';
  return out;
}

}  // namespace unloadkv
