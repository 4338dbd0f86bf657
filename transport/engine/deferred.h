// Deferred: callbacks collected under a connection's lock, queued before it is released
// (QueueCallbacks) and run after it, in order (RunCallbacks; engine_internal.h). Internal to
// the engine.
//
// Queueing a write's, a message's or a window operation's completion, or the delivery of received
// messages, allocates nothing once warm (issue 39: no allocation per request): the entries are
// typed (a std::function is moved, never wrapped in another), and each Deferred borrows its storage
// from a pool of the thread that made it and gives it back, grown, when it is destroyed.
// Anything else goes as a std::function, which may allocate.
//
// Thread-safety: a Deferred is used by one thread at a time (under the connection's lock, or
// by the thread running a batch). Destroy it without the connection's lock: the callbacks it
// still holds may own the connection.
#ifndef UNLOADKV_TRANSPORT_ENGINE_DEFERRED_H_
#define UNLOADKV_TRANSPORT_ENGINE_DEFERRED_H_

#include <functional>
#include <memory>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "transport/engine/engine.h"
#include "transport/engine/target_state.h"

namespace unloadkv::engine {

class Deferred {
 public:
  using Held = TargetState::Held;
  // Hands received messages to a handler (the engine's delivery: handler calls, then buffer
  // release and credits).
  using DeliverFn =
      absl::FunctionRef<void(const MessageHandler& handler, absl::Span<const Held> messages)>;

  Deferred();
  ~Deferred();
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;

  void Write(WriteCallback done, const WriteResult& result);
  void Send(SendCallback done, rnic::WcStatus status);
  void Window(WindowCallback done, const absl::Status& status);
  // Delivers `message` to `handler` (null: the message is dropped but released). Consecutive
  // messages to one handler are delivered by one DeliverFn call.
  void Deliver(const std::shared_ptr<const MessageHandler>& handler, const Held& message);
  void Call(std::function<void()> f);

  bool empty() const;
  size_t size() const;  // entries (a delivery of several messages is one)
  // Moves every entry of `from` to the end of this one, in order; `from` ends empty.
  void Append(Deferred& from);
  // Runs the entries in order (a delivery through `deliver`), then clears them. Entries added
  // meanwhile (by a callback) are not run.
  void Run(DeliverFn deliver);
  void swap(Deferred& other) { storage_.swap(other.storage_); }

 private:
  struct WriteDone {
    WriteCallback done;
    WriteResult result;
  };
  struct SendDone {
    SendCallback done;
    rnic::WcStatus status;
  };
  struct WindowDone {
    WindowCallback done;
    absl::Status status;
  };
  struct Delivery {
    std::shared_ptr<const MessageHandler> handler;
    size_t first = 0, count = 0;  // in Storage::held
  };
  using Entry = std::variant<WriteDone, SendDone, WindowDone, Delivery, std::function<void()>>;
  struct Storage {
    std::vector<Entry> entries;
    std::vector<Held> held;  // the Delivery entries' messages
  };
  std::unique_ptr<Storage> storage_;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_DEFERRED_H_
