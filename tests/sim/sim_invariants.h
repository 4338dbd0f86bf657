// SimInvariants: the engine invariants checked on every connection of a simulated world, where
// every node's and client's memory is in this process (engine::InvariantChecks; the world
// gives it to every engine it creates).
//
//   1. completion = visible: a write reported successful holds its bytes at its destination;
//   2. order: when a message reaches its handler, every write its sender issued before it is
//      visible (those already finished are covered by 1; a write a later write of the same
//      connection overlaps is skipped, since the later one may already have landed);
//   3. refusals: a write reported refused (kRemoteAccessError, on either path) went where the
//      NIC refuses too.
// Skipped, having nothing to show: destinations no longer registered (their node crashed,
// their replica was dropped), and destinations another connection wrote to after the write
// was issued (a slot freed and granted again may be rewritten before the first writer learns
// its write completed: its ack can trail the answer that let the slot go). Each check is
// counted, and so is each violation (the engine logs the connection).
//
// Thread-safety: none; a simulation runs one thread at a time (Lockstep).
#ifndef UNLOADKV_TESTS_SIM_SIM_INVARIANTS_H_
#define UNLOADKV_TESTS_SIM_SIM_INVARIANTS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "transport/engine/invariant_checks.h"
#include "transport/sim/fabric.h"

namespace unloadkv::world {

class SimInvariants : public engine::InvariantChecks {
 public:
  // `fabric` (every device's regions) must outlive this.
  explicit SimInvariants(const sim::Fabric* fabric) : fabric_(fabric) {}

  struct Counts {
    uint64_t writes_verified = 0, write_violations = 0;        // invariant 1
    uint64_t messages_checked = 0, writes_before_checked = 0;  // invariant 2
    uint64_t order_violations = 0;
    uint64_t refusals_checked = 0, refusal_violations = 0;  // invariant 3
    uint64_t overwritten = 0;  // checks of 1 and 2 skipped: another connection wrote there
    uint64_t violations() const { return write_violations + order_violations + refusal_violations; }
  };
  const Counts& counts() const { return counts_; }

  bool WriteCompleted(const std::string& connection, uint64_t op, const void* local, size_t length,
                      uint64_t remote_addr, uint32_t rkey) override;
  bool WriteRefused(size_t length, uint64_t remote_addr, uint32_t rkey,
                    uint32_t target_qp) override;
  void WriteIssued(const std::string& connection, uint64_t op, const void* local, size_t length,
                   uint64_t remote_addr, uint32_t rkey) override;
  void WriteFinished(const std::string& connection, uint64_t op) override;
  void MessageIssued(const std::string& connection, uint64_t message, uint64_t op) override;
  bool MessageDelivered(const std::string& connection, uint64_t message) override;

 private:
  struct Write {
    uint64_t op;
    uint64_t seq;  // issue order among every connection's writes
    uint64_t addr;
    uint32_t rkey;
    std::string bytes;  // what it carries, copied when issued
  };
  struct Sender {
    uint32_t id = 0;                        // dense, for `issued_`
    std::deque<Write> writes;               // issued, not finished, by op
    std::map<uint64_t, uint64_t> messages;  // issued, not delivered: number -> op
  };
  struct Issued {
    uint64_t end;
    uint64_t seq;
    uint32_t sender;
  };

  Sender& SenderOf(const std::string& connection);
  // Whether a connection other than `sender` issued a write overlapping [addr, addr + length)
  // after issue number `seq`.
  bool OverwrittenSince(uint32_t sender, uint64_t seq, uint64_t addr, uint64_t length) const;
  // Whether write `w` of `sender` is in place; kNothingToShow when its destination is gone or
  // another connection wrote there since it was issued (counted in `overwritten`).
  enum class Verdict { kHeld, kMissing, kNothingToShow };
  Verdict Examine(uint32_t sender, const Write& w);

  const sim::Fabric* fabric_;
  std::map<std::string, Sender> senders_;   // kept for the world's life: ids stay unique
  std::multimap<uint64_t, Issued> issued_;  // every write issued, by start address
  uint64_t longest_ = 0;                    // longest write issued
  uint64_t next_seq_ = 0;
  Counts counts_;
};

}  // namespace unloadkv::world

#endif  // UNLOADKV_TESTS_SIM_SIM_INVARIANTS_H_
