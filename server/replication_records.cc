#include "server/replication_records.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

proto::ReplicationRecord ToRecord(const KvStore::Mutation& m, uint64_t seq) {
  proto::ReplicationRecord r;
  r.set_op(m.op == KvStore::Mutation::Op::kPut ? proto::ReplicationRecord::PUT
                                               : proto::ReplicationRecord::DELETE);
  r.set_seq(seq);
  r.set_key(m.key);
  r.set_offset(m.slot.offset);
  r.set_capacity(m.slot.capacity);
  r.set_size(m.size);
  r.set_version(m.version);
  return r;
}

absl::StatusOr<KvStore::Mutation> FromRecord(const proto::ReplicationRecord& r) {
  KvStore::Mutation m;
  switch (r.op()) {
    case proto::ReplicationRecord::PUT:
      m.op = KvStore::Mutation::Op::kPut;
      break;
    case proto::ReplicationRecord::DELETE:
      m.op = KvStore::Mutation::Op::kDelete;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("record op ", r.op(), " is not a mutation"));
  }
  m.key = r.key();
  m.slot = Slot{r.offset(), r.capacity()};
  m.size = r.size();
  m.version = r.version();
  return m;
}

}  // namespace unloadkv::server
