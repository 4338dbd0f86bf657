#include "client/ycsb/properties.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace unloadkv::ycsb {

absl::Status Properties::ParseText(absl::string_view text, const std::string& source) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  std::string logical;
  int start_line = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view raw = absl::StripTrailingAsciiWhitespace(lines[i]);
    if (logical.empty()) {
      raw = absl::StripLeadingAsciiWhitespace(raw);
      if (raw.empty() || raw[0] == '#' || raw[0] == '!') continue;
      start_line = static_cast<int>(i) + 1;
    } else {
      raw = absl::StripLeadingAsciiWhitespace(raw);
    }
    if (!raw.empty() && raw.back() == '\\') {
      logical.append(raw.data(), raw.size() - 1);
      if (i + 1 < lines.size()) continue;
    } else {
      logical.append(raw.data(), raw.size());
    }
    size_t sep = logical.find_first_of("=:");
    if (sep == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", start_line, ": '", logical, "' is not key=value"));
    }
    std::string key(absl::StripAsciiWhitespace(absl::string_view(logical).substr(0, sep)));
    std::string value(absl::StripAsciiWhitespace(absl::string_view(logical).substr(sep + 1)));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", start_line, ": empty key"));
    }
    Set(key, value, absl::StrCat(source, ":", start_line));
    logical.clear();
  }
  return absl::OkStatus();
}

absl::Status Properties::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read workload file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseText(ss.str(), path);
}

absl::Status Properties::SetFromArg(absl::string_view kv) {
  size_t eq = kv.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("-p '", kv, "': expected key=value"));
  }
  Set(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)), "-p");
  return absl::OkStatus();
}

void Properties::Set(const std::string& key, const std::string& value, const std::string& source) {
  values_[key] = Value{value, source};
}

std::string Properties::GetString(const std::string& key, const std::string& def) const {
  auto it = values_.find(key);
  return it == values_.end() ? def : it->second.text;
}

absl::Status Properties::Bad(const std::string& key, absl::string_view why) const {
  const Value& v = values_.at(key);
  return absl::InvalidArgumentError(absl::StrCat(v.source, ": ", key, "=", v.text, ": ", why));
}

absl::StatusOr<int64_t> Properties::GetInt(const std::string& key, int64_t def, int64_t min,
                                           int64_t max) const {
  if (!Has(key)) return def;
  int64_t v;
  if (!absl::SimpleAtoi(values_.at(key).text, &v)) return Bad(key, "not an integer");
  if (v < min || v > max) return Bad(key, absl::StrCat("must be in ", min, "..", max));
  return v;
}

absl::StatusOr<double> Properties::GetDouble(const std::string& key, double def, double min,
                                             double max) const {
  if (!Has(key)) return def;
  double v;
  if (!absl::SimpleAtod(values_.at(key).text, &v)) return Bad(key, "not a number");
  if (!(v >= min && v <= max)) return Bad(key, absl::StrCat("must be in [", min, ", ", max, "]"));
  return v;
}

absl::StatusOr<bool> Properties::GetBool(const std::string& key, bool def) const {
  if (!Has(key)) return def;
  std::string t = absl::AsciiStrToLower(values_.at(key).text);
  if (t == "true") return true;
  if (t == "false") return false;
  return Bad(key, "must be true or false");
}

}  // namespace unloadkv::ycsb
