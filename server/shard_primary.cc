// ShardReplica: as primary, the write log: sequence numbers, sending each write to every link,
// committing in order once every voting link acknowledged it (the commit rule).
#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/replication_records.h"
#include "server/shard_replica.h"
#include "transport/base/logging.h"

namespace unloadkv::server {
ReplicaLink::Item ShardReplica::ItemFor(const Entry& e) {
  ReplicaLink::Item item;
  const KvStore::Mutation& m = e.mutation;
  if (!e.barrier && m.op == KvStore::Mutation::Op::kPut && m.size > 0) {
    item.writes.push_back(
        {rnic::ScatterGatherEntry{mr_->address() + m.slot.offset, m.size, mr_->lkey()},
         m.slot.offset});
  }
  item.request.set_shard(id_);
  item.request.set_epoch(epoch_);
  if (e.split_shard != 0) {
    proto::ReplicationRecord* r = item.request.add_records();
    r->set_op(proto::ReplicationRecord::SPLIT);
    r->set_seq(e.seq);
    r->set_key(e.split_at);
    r->set_split_shard(e.split_shard);
    r->set_split_end(e.split_end);
  } else if (e.barrier) {
    proto::ReplicationRecord* r = item.request.add_records();
    r->set_op(proto::ReplicationRecord::NOOP);
    r->set_seq(e.seq);
  } else {
    *item.request.add_records() = ToRecord(m, e.seq);
  }
  return item;
}

void ShardReplica::Submit(KvStore::Mutation m, Done done) {
  Entry e;
  e.mutation = std::move(m);
  e.done = std::move(done);
  Append(std::move(e));
}

void ShardReplica::Barrier(std::function<void(absl::Status)> done) {
  Entry e;
  e.barrier = true;
  e.on_barrier = std::move(done);
  Append(std::move(e));
}

void ShardReplica::Append(Entry entry) {
  Callbacks out;
  std::vector<std::shared_ptr<ReplicaLink>> flush;
  {
    MutexLock l(&mu_);
    absl::Status refused;
    if (role_ != Role::kPrimary) {
      refused = absl::AbortedError("not the primary of this shard");
    } else if (!handing_over_.empty() && !entry.barrier) {
      refused = absl::AbortedError(
          absl::StrCat("the primary's role is being handed over to ", handing_over_, "; retry"));
    } else if (!held_.empty() && !entry.barrier) {
      refused = absl::AbortedError(absl::StrCat(held_, "; retry"));
    } else if (!entry.barrier && SplitRefusesLocked(entry.mutation.key)) {
      refused = absl::AbortedError(absl::StrCat("shard ", id_, " is being split at \"",
                                                absl::CHexEscape(split_at_), "\"; retry"));
    } else if (entry.split_shard != 0 && split_open_) {
      refused = absl::FailedPreconditionError(absl::StrCat("shard ", id_, " is being split"));
    } else if (log_ != nullptr && !entry.barrier) {
      // A stopped log refuses the write before any backup sees it (a full disk: reads go on).
      if (absl::Status st = log_->failure(); !st.ok()) {
        refused = absl::Status(st.code(), absl::StrCat("the shard's log: ", st.message()));
      }
    }
    if (!refused.ok()) {
      if (entry.split_shard != 0) {
        out.push_back([f = std::move(entry.on_split), refused] { f(refused); });
      } else if (entry.barrier) {
        out.push_back([f = std::move(entry.on_barrier), refused] { f(refused); });
      } else {
        store_->Abandon(entry.mutation);
        out.Write(std::move(entry.done), refused);
      }
    } else {
      if (!entry.barrier) born_seq_ = 0;  // its state is no longer the one it was born with
      if (entry.split_shard != 0) {
        split_open_ = true;
        split_at_ = entry.split_at;
        entry.split_end = end_;
      }
      Entry& e = pending_.emplace_back(std::move(entry));
      e.seq = next_seq_++;
      if (log_ != nullptr && !e.barrier) {
        // Under mu_, so that records reach the log in seq order; its callback never runs here.
        std::weak_ptr<ShardReplica> self = weak_from_this();
        log_->Submit(LogEntryFor(e), [self, seq = e.seq](absl::Status st) {
          if (auto s = self.lock()) s->OnLogged(seq, st);
        });
      }
      std::weak_ptr<ShardReplica> self = weak_from_this();
      for (auto& [node, ls] : links_) {
        if (ls.failed) continue;
        ReplicaLink::Item item = ItemFor(e);
        item.done = [self, node = node, seq = e.seq](auto r) {
          if (auto s = self.lock()) s->OnAck(node, seq, false, r);
        };
        PushLiveLocked(&ls, std::move(item));  // queued only: sent by Flush, outside the lock
        flush.push_back(ls.link);
      }
      CommitReady(&out);
    }
  }
  for (auto& link : flush) link->Flush();
  out.Run();
}

void ShardReplica::CommitReady(Callbacks* out) {
  while (!pending_.empty()) {
    Entry& e = pending_.front();
    if (log_ != nullptr && !e.barrier && logged_ < e.seq) return;  // the log has not got it
    for (const auto& [node, ls] : links_) {
      if (e.seq >= ls.votes_from && ls.acked < e.seq) return;  // still waits on this link
    }
    if (e.split_shard != 0) {
      out->push_back([f = std::move(e.on_split), seq = e.seq] { f(seq); });
    } else if (e.barrier) {
      out->push_back([f = std::move(e.on_barrier)] { f(absl::OkStatus()); });
    } else {
      if (store_->Commit(e.mutation)) {
        out->Write(std::move(e.done), e.mutation.version);
      } else {  // a DELETE that found the key already deleted by a write committed before it
        out->Write(std::move(e.done), absl::NotFoundError("no such key"));
      }
    }
    pending_.pop_front();
  }
}

proto::LogEntry ShardReplica::LogEntryFor(const Entry& e) {
  return EntryOf(e.mutation, e.seq, proto::LogEntry::LIVE);
}

void ShardReplica::OnLogged(uint64_t seq, const absl::Status& st) {
  Callbacks out;
  {
    MutexLock l(&mu_);
    if (st.ok()) {
      logged_ = std::max(logged_, seq);
      CommitReady(&out);
    } else {
      // Not logged: the write fails with the log's error (RESOURCE_EXHAUSTED for a full disk)
      // and changes nothing. Reads go on. If a backup was sent the record, it may hold what
      // this replica will not: the write's outcome is unknown, and every link fails, so that
      // the backups are attached again from this replica's state.
      const bool sent = !links_.empty();
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->seq != seq) continue;
        // Abandoned here too: the backups are attached again from this replica's state.
        store_->Abandon(it->mutation);
        out.push_back([f = std::move(it->done), st, sent] {
          f(absl::Status(sent ? absl::StatusCode::kUnavailable : st.code(),
                         absl::StrCat(sent ? "write outcome unknown: " : "",
                                      "the shard's log: ", st.message())));
        });
        pending_.erase(it);
        break;
      }
      for (auto& [node, ls] : links_) {
        if (!ls.failed) {
          Log(LogLevel::kWarning,
              absl::StrCat("shard ", id_, ": backup ", node, " was sent record ", seq,
                           ", which this replica's log refused; it "
                           "must be attached again"));
        }
        ls.failed = true;
      }
      CommitReady(&out);  // what waited behind it
    }
  }
  out.Run();
}

void ShardReplica::FailPendingLocked(const std::string& why, Callbacks* out) {
  for (Entry& e : pending_) {
    if (e.split_shard != 0) {
      out->push_back([f = std::move(e.on_split), why] {
        f(absl::AbortedError(absl::StrCat("not the primary: ", why)));
      });
    } else if (e.barrier) {
      out->push_back([f = std::move(e.on_barrier), why] {
        f(absl::AbortedError(absl::StrCat("not the primary: ", why)));
      });
    } else {
      // Not abandoned: a backup may have applied it, so its slot stays as the data may be.
      out->push_back([f = std::move(e.done), why] {
        f(absl::UnavailableError(absl::StrCat("write outcome unknown: ", why)));
      });
    }
  }
  pending_.clear();
}

// A joiner starts voting once at most this many writes it has not acknowledged are ahead of
// it (one replication request's worth).
constexpr uint64_t kVoteBacklog = 256;

void ShardReplica::StartVotingLocked(LinkState* ls) {
  if (ls->voting() || ls->failed || ls->snapshot_open || ls->snapshot_pending > 0 ||
      ls->acked < ls->transfer_end) {
    return;
  }
  // Not while a backlog of the writes made during the transfer is still on its way to it:
  // every new write would wait behind all of it (after a paced 256 MiB transfer under load,
  // clients stopped for up to 2 s).
  if (next_seq_ - 1 > ls->acked + kVoteBacklog) return;
  // The writes before next_seq_ were sent to it, in order, behind the transfer; those that
  // committed meanwhile did so without it, so it is caught up only once it acknowledged them.
  ls->votes_from = next_seq_;
  ls->caught_at = next_seq_ - 1;
}

void ShardReplica::OnAck(const std::string& node, uint64_t seq, bool snapshot,
                         const absl::StatusOr<proto::ReplicateResponse>& r, uint64_t bytes) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  bool deposed = false;
  std::function<void()> progress;  // the control thread has something to do
  {
    MutexLock l(&mu_);
    auto it = links_.find(node);
    if (it == links_.end() || role_ != Role::kPrimary) return;
    LinkState& ls = it->second;
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kAborted) {
        // The backup follows a newer epoch: this replica is no longer the primary.
        Log(LogLevel::kWarning,
            absl::StrCat("shard ", id_, ": backup ", node, " refused epoch ", epoch_, " (",
                         r.status().message(), "); stepping down"));
        role_ = Role::kDeposed;
        deposed = true;
        FailPendingLocked(absl::StrCat("deposed at epoch ", epoch_), &out);
        closed.swap(links_);
      } else if (!ls.failed) {
        Log(LogLevel::kWarning, absl::StrCat("shard ", id_, ": link to backup ", node,
                                             " failed: ", r.status().ToString()));
        ls.failed = true;
      }
    } else {
      ls.transfer_sent += bytes;
      if (snapshot) {
        --ls.snapshot_pending;
        PushSnapshotLocked(&ls);  // the link sends it once this callback returns
        // The whole snapshot in place: the backup holds every write it covers.
        if (ls.snapshot_pending == 0 && !ls.snapshot_open) {
          ls.acked = std::max(ls.acked, ls.snapshot_through);
        }
      } else {
        ls.acked = std::max(ls.acked, std::max(seq, r->applied_seq()));
      }
      StartVotingLocked(&ls);
      if (!snapshot) CommitReady(&out);
      const bool caught_up = ls.caught_up() && !ls.caught_up_told;
      if (caught_up) ls.caught_up_told = true;
      const bool drained =
          !handing_over_.empty() &&
          std::all_of(pending_.begin(), pending_.end(), [](const Entry& e) { return e.barrier; });
      if (caught_up || drained) progress = progress_hook_;
    }
  }
  Retire(&closed);
  out.Run();
  Demoted(deposed);
  if (progress) progress();
}

}  // namespace unloadkv::server
