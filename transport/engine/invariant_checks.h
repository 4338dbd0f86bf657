// InvariantChecks: a simulation's window into every engine of the process, to check the
// engine's invariants (engine.h) on every connection, possible where every peer's memory is
// in this process (the whole-cluster simulation, docs/sim-cluster.md). Set through
// EngineOptions::checks; null (the default) costs nothing.
//
// A connection is named by its initiator's main QP, "<address>/<qp_num>" of its QpAttributes:
// the sending end passes its own QP's name, the receiving end its peer's, so both ends of one
// connection use the same name for what one end sends.
//
// Thread-safety: called from the threads that drive the engines and call Write/Send (inside
// a simulation, one). An implementation shared by threaded engines must lock.
#ifndef UNLOADKV_TRANSPORT_ENGINE_INVARIANT_CHECKS_H_
#define UNLOADKV_TRANSPORT_ENGINE_INVARIANT_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace unloadkv::engine {

class InvariantChecks {
 public:
  virtual ~InvariantChecks() = default;

  // Invariant 1 (completion = visible): write `op` of `connection` (reported to WriteIssued)
  // was reported successful and no later write of its connection overlaps it, so its `length`
  // bytes at `local` must now be at [remote_addr, remote_addr + length) of region `rkey`,
  // unless another connection wrote there since. Returns false when they are not (the engine
  // logs an error naming the connection). Called before WriteFinished for the write.
  virtual bool WriteCompleted(const std::string& connection, uint64_t op, const void* local,
                              size_t length, uint64_t remote_addr, uint32_t rkey) = 0;
  // Invariant 3 (same refusals): a write was reported refused with kRemoteAccessError, on
  // either path; the target NIC must refuse that destination too, arriving on the target's
  // main QP `target_qp` of the connection (a memory window works only through the QP it is
  // bound on). Returns false when the destination is writable (the engine logs an error).
  virtual bool WriteRefused(size_t length, uint64_t remote_addr, uint32_t rkey,
                            uint32_t target_qp) = 0;

  // Invariant 2 (a message is handed over after the writes before it are visible), the
  // sending end: write `op` (ops, writes and messages, are numbered in issue order per
  // connection) was issued with these bytes and destination; it finished (successful or not,
  // on either path: its bytes need no more checking at a delivery); message number `message`
  // (0, 1, ... per connection) was issued as op `op`.
  virtual void WriteIssued(const std::string& connection, uint64_t op, const void* local,
                           size_t length, uint64_t remote_addr, uint32_t rkey) = 0;
  virtual void WriteFinished(const std::string& connection, uint64_t op) = 0;
  virtual void MessageIssued(const std::string& connection, uint64_t message, uint64_t op) = 0;
  // The receiving end is about to hand message number `message` of `connection` to its
  // handler: every write issued before it and not yet finished must be visible, except where
  // a later write of the connection overlaps it. Returns false when one is not (the engine
  // logs an error).
  virtual bool MessageDelivered(const std::string& connection, uint64_t message) = 0;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_INVARIANT_CHECKS_H_
