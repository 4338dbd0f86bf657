#include "client/ycsb/memcached_db.h"

#include <libmemcached/memcached.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/field_record.h"
#include "transport/base/net.h"

namespace unloadkv::ycsb {
namespace {

absl::Status Error(memcached_st* mc, memcached_return_t rc, const std::string& key) {
  if (rc == MEMCACHED_NOTFOUND) return absl::NotFoundError(absl::StrCat("record ", key));
  return absl::UnavailableError(absl::StrCat("memcached: ", memcached_strerror(mc, rc)));
}

}  // namespace

std::string MemcachedDb::Encode(const Record& r) {
  std::string out;
  for (const auto& [name, value] : r) proto::AppendField(name, value, &out);
  return out;
}

absl::StatusOr<Record> MemcachedDb::Decode(const std::string& bytes) {
  absl::StatusOr<proto::FieldViews> f = proto::DecodeFieldRecord(bytes);
  if (!f.ok()) {
    return absl::DataLossError(
        absl::StrCat("memcached: a record value does not decode: ", f.status().message()));
  }
  Record r;
  r.reserve(f->size());
  for (const auto& [name, value] : *f) r.emplace_back(std::string(name), std::string(value));
  return r;
}

absl::StatusOr<std::unique_ptr<Db>> MemcachedDb::Connect(const std::string& address) {
  absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("memcached: ", hp.status().message()));
  }
  memcached_st* mc = memcached_create(nullptr);
  if (mc == nullptr) return absl::ResourceExhaustedError("memcached_create failed");
  memcached_return_t rc = memcached_server_add(mc, hp->host.c_str(), hp->port);
  // One request at a time per client thread, as YCSB's threads do: no batching, no delay.
  if (rc == MEMCACHED_SUCCESS) rc = memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  if (rc == MEMCACHED_SUCCESS) {
    rc = memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 5000);
  }
  if (rc != MEMCACHED_SUCCESS) {
    absl::Status st = absl::UnavailableError(
        absl::StrCat("memcached at ", address, ": ", memcached_strerror(mc, rc)));
    memcached_free(mc);
    return st;
  }
  return std::unique_ptr<Db>(new MemcachedDb(mc));
}

MemcachedDb::~MemcachedDb() { memcached_free(mc_); }

absl::Status MemcachedDb::Read(const std::string& key, const std::vector<std::string>& fields,
                               Record* out) {
  out->clear();
  size_t len = 0;
  uint32_t flags = 0;
  memcached_return_t rc;
  char* v = memcached_get(mc_, key.data(), key.size(), &len, &flags, &rc);
  if (v == nullptr) return Error(mc_, rc == MEMCACHED_SUCCESS ? MEMCACHED_NOTFOUND : rc, key);
  std::string bytes(v, len);
  std::free(v);
  absl::StatusOr<Record> r = Decode(bytes);
  if (!r.ok()) return r.status();
  for (auto& [name, value] : *r) {
    bool wanted = fields.empty();
    for (const std::string& f : fields) wanted |= f == name;
    if (wanted) out->emplace_back(std::move(name), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status MemcachedDb::Scan(const std::string&, int, const std::vector<std::string>&,
                               std::vector<Record>*) {
  return absl::UnimplementedError("memcached has no scan (as YCSB's memcached binding)");
}

absl::Status MemcachedDb::Update(const std::string& key, const Record& values) {
  const std::string v = Encode(values);
  memcached_return_t rc = memcached_replace(mc_, key.data(), key.size(), v.data(), v.size(), 0, 0);
  return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : Error(mc_, rc, key);
}

absl::Status MemcachedDb::Insert(const std::string& key, const Record& values) {
  const std::string v = Encode(values);
  memcached_return_t rc = memcached_set(mc_, key.data(), key.size(), v.data(), v.size(), 0, 0);
  return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : Error(mc_, rc, key);
}

absl::Status MemcachedDb::Delete(const std::string& key) {
  memcached_return_t rc = memcached_delete(mc_, key.data(), key.size(), 0);
  return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : Error(mc_, rc, key);
}

}  // namespace unloadkv::ycsb
