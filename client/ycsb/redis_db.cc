#include "client/ycsb/redis_db.h"

#include <hiredis/hiredis.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/base/net.h"

namespace unloadkv::ycsb {
namespace {

constexpr char kIndex[] = "_indices";

// YCSB's RedisClient.hash: String.hashCode() of the key, as the sorted-set score.
double KeyScore(const std::string& key) {
  int32_t h = 0;
  for (unsigned char ch : key) h = static_cast<int32_t>(31u * static_cast<uint32_t>(h) + ch);
  return h;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// Runs one command given as separate arguments (binary-safe).
absl::StatusOr<Reply> Command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply r(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (r == nullptr) {
    return absl::UnavailableError(absl::StrCat("redis: ", c->errstr[0] ? c->errstr : "no reply"));
  }
  if (r->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(absl::StrCat("redis: ", std::string(r->str, r->len)));
  }
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Db>> RedisDb::Connect(const std::string& address) {
  absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) return absl::InvalidArgumentError(absl::StrCat("redis: ", hp.status().message()));
  timeval tv{5, 0};
  redisContext* c = redisConnectWithTimeout(hp->host.c_str(), hp->port, tv);
  if (c == nullptr || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return absl::UnavailableError(absl::StrCat("cannot connect to redis at ", address, ": ", why));
  }
  redisSetTimeout(c, tv);
  return std::unique_ptr<Db>(new RedisDb(c));
}

RedisDb::~RedisDb() { redisFree(c_); }

absl::Status RedisDb::Read(const std::string& key, const std::vector<std::string>& fields,
                           Record* out) {
  out->clear();
  if (fields.empty()) {
    auto r = Command(c_, {"HGETALL", key});
    if (!r.ok()) return r.status();
    if ((*r)->elements == 0) return absl::NotFoundError(absl::StrCat("record ", key));
    for (size_t i = 0; i + 1 < (*r)->elements; i += 2) {
      out->emplace_back(std::string((*r)->element[i]->str, (*r)->element[i]->len),
                        std::string((*r)->element[i + 1]->str, (*r)->element[i + 1]->len));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> args{"HMGET", key};
  args.insert(args.end(), fields.begin(), fields.end());
  auto r = Command(c_, args);
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < (*r)->elements && i < fields.size(); ++i) {
    if ((*r)->element[i]->type == REDIS_REPLY_NIL) continue;
    out->emplace_back(fields[i], std::string((*r)->element[i]->str, (*r)->element[i]->len));
  }
  if (out->empty()) return absl::NotFoundError(absl::StrCat("record ", key));
  return absl::OkStatus();
}

absl::Status RedisDb::Scan(const std::string& start_key, int count,
                           const std::vector<std::string>& fields, std::vector<Record>* out) {
  out->clear();
  auto keys = Command(c_, {"ZRANGEBYSCORE", kIndex, absl::StrCat(KeyScore(start_key)), "+inf",
                           "LIMIT", "0", absl::StrCat(count)});
  if (!keys.ok()) return keys.status();
  for (size_t i = 0; i < (*keys)->elements; ++i) {
    Record r;
    absl::Status st =
        Read(std::string((*keys)->element[i]->str, (*keys)->element[i]->len), fields, &r);
    if (!st.ok()) return st;
    out->push_back(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status RedisDb::Update(const std::string& key, const Record& values) {
  std::vector<std::string> args{"HMSET", key};
  for (const auto& [f, v] : values) {
    args.push_back(f);
    args.push_back(v);
  }
  return Command(c_, args).status();
}

absl::Status RedisDb::Insert(const std::string& key, const Record& values) {
  if (absl::Status st = Update(key, values); !st.ok()) return st;
  return Command(c_, {"ZADD", kIndex, absl::StrCat(KeyScore(key)), key}).status();
}

absl::Status RedisDb::Delete(const std::string& key) {
  auto r = Command(c_, {"DEL", key});
  if (!r.ok()) return r.status();
  if ((*r)->integer == 0) return absl::NotFoundError(absl::StrCat("record ", key));
  return Command(c_, {"ZREM", kIndex, key}).status();
}

}  // namespace unloadkv::ycsb
