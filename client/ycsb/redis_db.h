// YCSB records on Redis through hiredis, as YCSB's Redis binding stores them: a hash per record
// (HMSET/HGETALL/HMGET) and a sorted set "_indices" scored by the key's hash for scans
// (ZRANGEBYSCORE from the start key's score, then one HGETALL per record).
#ifndef UNLOADKV_CLIENT_YCSB_REDIS_DB_H_
#define UNLOADKV_CLIENT_YCSB_REDIS_DB_H_

#include <memory>
#include <string>

#include "client/ycsb/db.h"

struct redisContext;

namespace unloadkv::ycsb {

class RedisDb : public Db {
 public:
  // `address` is host:port.
  static absl::StatusOr<std::unique_ptr<Db>> Connect(const std::string& address);
  ~RedisDb() override;
  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override;
  absl::Status Scan(const std::string& start_key, int count, const std::vector<std::string>& fields,
                    std::vector<Record>* out) override;
  absl::Status Update(const std::string& key, const Record& values) override;
  absl::Status Insert(const std::string& key, const Record& values) override;
  absl::Status Delete(const std::string& key) override;

 private:
  explicit RedisDb(redisContext* c) : c_(c) {}
  redisContext* c_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_REDIS_DB_H_
