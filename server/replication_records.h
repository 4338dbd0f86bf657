// A shard's writes as replication records (proto/replication.proto) and back: what a primary
// sends its backups and what they apply.
#ifndef UNLOADKV_SERVER_REPLICATION_RECORDS_H_
#define UNLOADKV_SERVER_REPLICATION_RECORDS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/replication.pb.h"
#include "server/kv_store.h"

namespace unloadkv::server {

// `m` as the record of sequence number `seq` (0: a snapshot record).
proto::ReplicationRecord ToRecord(const KvStore::Mutation& m, uint64_t seq);
// The mutation a PUT or DELETE record names; InvalidArgument for any other op.
absl::StatusOr<KvStore::Mutation> FromRecord(const proto::ReplicationRecord& r);

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_REPLICATION_RECORDS_H_
