#include "client/transfer_progress.h"

#include <curl/curl.h>

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace unloadkv {
namespace {

// One sample line: name{k="v",...} value. False when it does not parse.
bool ParseSample(absl::string_view line, std::string* name,
                 std::map<std::string, std::string>* labels, double* value) {
  const size_t brace = line.find('{');
  const size_t close = line.rfind('}');
  if (brace == absl::string_view::npos || close == absl::string_view::npos || close < brace) {
    return false;
  }
  *name = std::string(line.substr(0, brace));
  absl::string_view rest = line.substr(brace + 1, close - brace - 1);
  labels->clear();
  while (!rest.empty()) {
    const size_t eq = rest.find("=\"");
    if (eq == absl::string_view::npos) return false;
    std::string key(rest.substr(0, eq));
    std::string v;
    size_t i = eq + 2;
    for (; i < rest.size() && rest[i] != '"'; ++i) {
      if (rest[i] == '\\' && i + 1 < rest.size()) ++i;  // an escaped character
      v.push_back(rest[i]);
    }
    if (i >= rest.size()) return false;  // unterminated value
    (*labels)[std::move(key)] = std::move(v);
    rest.remove_prefix(i + 1);
    if (!rest.empty() && rest[0] == ',') rest.remove_prefix(1);
  }
  absl::string_view number = line.substr(close + 1);
  while (!number.empty() && number[0] == ' ') number.remove_prefix(1);
  number = number.substr(0, number.find(' '));  // a timestamp may follow
  return absl::SimpleAtod(number, value);
}

size_t Collect(char* data, size_t size, size_t n, void* out) {
  std::string* s = static_cast<std::string*>(out);
  if (s->size() + size * n > (size_t{16} << 20)) return 0;  // a node's metrics are far smaller
  s->append(data, size * n);
  return size * n;
}

}  // namespace

double TransferProgress::EtaSeconds() const {
  if (sent_bytes <= 0 || seconds <= 0) return -1;
  const double rate = sent_bytes / seconds;
  const double eta = (bytes - sent_bytes) / rate;
  return rate > 0 && std::isfinite(eta) && eta >= 0 ? eta : -1;
}

std::string TransferProgress::Done() const {
  return absl::StrFormat("%.1f of %.1f MiB (%.0f%%)", sent_bytes / 1048576, bytes / 1048576,
                         bytes > 0 ? 100 * sent_bytes / bytes : 100);
}

std::string TransferProgress::Eta() const {
  const double eta = EtaSeconds();
  return eta < 0 ? "-" : absl::StrFormat("%.1f s", eta);
}

std::vector<TransferProgress> ParseTransfers(absl::string_view metrics, const std::string& from) {
  // (shard, backup) -> which of the three series were seen, and the figures.
  std::map<std::pair<uint32_t, std::string>, std::pair<int, TransferProgress>> seen;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, "unloadkv_transfer_")) continue;
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
    uint32_t shard = 0;
    if (!ParseSample(line, &name, &labels, &value) || !absl::SimpleAtoi(labels["shard"], &shard) ||
        labels["backup"].empty() || !std::isfinite(value) || value < 0) {
      continue;
    }
    auto& [mask, t] = seen[{shard, labels["backup"]}];
    t.shard = shard;
    t.from = from;
    t.to = labels["backup"];
    if (name == "unloadkv_transfer_bytes") {
      t.bytes = value;
      mask |= 1;
    } else if (name == "unloadkv_transfer_sent_bytes") {
      t.sent_bytes = value;
      mask |= 2;
    } else if (name == "unloadkv_transfer_seconds") {
      t.seconds = value;
      mask |= 4;
    }
  }
  std::vector<TransferProgress> out;
  for (auto& [key, entry] : seen) {
    if (entry.first == 7) out.push_back(std::move(entry.second));
  }
  return out;
}

absl::StatusOr<std::string> FetchMetrics(const std::string& address, absl::Duration timeout) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  std::string body;
  const std::string url = absl::StrCat("http://", address, "/metrics");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(url, ": ", curl_easy_strerror(rc)));
  }
  if (code != 200) return absl::UnavailableError(absl::StrCat(url, ": HTTP ", code));
  return body;
}

std::vector<TransferProgress> CollectTransfers(const cluster::ClusterView& view,
                                               absl::Duration timeout,
                                               std::vector<std::string>* unreachable) {
  std::set<std::string> primaries;  // of shards with a node joining
  for (const cluster::ShardInfo& s : view.shard_list) {
    if (!s.joining.empty() && view.IsLive(s.primary)) primaries.insert(s.primary);
  }
  std::vector<TransferProgress> out;
  for (const std::string& p : primaries) {
    const std::string& address = view.nodes.at(p).metrics_address;
    if (address.empty()) continue;  // started without --metrics: nothing to ask
    absl::StatusOr<std::string> text = FetchMetrics(address, timeout);
    if (!text.ok()) {
      if (unreachable != nullptr) unreachable->push_back(p);
      continue;
    }
    for (TransferProgress& t : ParseTransfers(*text, p)) {
      const cluster::ShardInfo* s = view.ShardById(t.shard);
      if (s != nullptr && s->primary == p) out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace unloadkv
