#include "transport/rpc/rpc.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/rpc/rpc_frame.h"

namespace unloadkv::rpc {

namespace {
// A peer can send bad frames at will: their log lines are throttled, process-wide.
ThrottledLog& BadFrameLog() {
  static ThrottledLog* log = new ThrottledLog(absl::Seconds(1));
  return *log;
}
// The result handed to the waiting caller, an error with a message of its own: a Status shares
// its message between copies by a reference count in Abseil's (uninstrumented) library, and
// the engine thread that completed the call may free its copy while the caller reads this
// one, which ThreadSanitizer cannot see ordered.
absl::StatusOr<std::string> OwnResult(absl::StatusOr<std::string>* r) {
  if (r->ok()) return std::move(*r);
  return absl::Status(r->status().code(), std::string(r->status().message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<engine::Engine>> CreateRpcEngine(rnic::Device* device,
                                                                engine::EngineOptions options,
                                                                uint32_t max_message_bytes,
                                                                bool simulated,
                                                                engine::InvariantChecks* checks) {
  options.max_message_bytes = max_message_bytes;
  options.modeled_huge_pages = simulated;
  options.checks = checks;
  return engine::Engine::Create(device, options);
}

namespace {

// This thread's buffer for the frame being sent: Connection::Send copies it before returning,
// so one per thread serves every call and reply (no allocation per request once grown). A
// frame is encoded and sent with nothing in between that could send another on this thread.
std::string& FrameBuffer() {
  thread_local std::string buffer;
  return buffer;
}

// After a send: a buffer grown past this by a large frame is let go, not kept for good.
void TrimFrameBuffer(std::string& buffer) {
  if (buffer.capacity() > 64 * 1024) std::string().swap(buffer);
}

}  // namespace

void Responder::Reply(const absl::Status& status, absl::string_view payload) {
  if (conn_ == nullptr) return;
  std::shared_ptr<engine::Connection> conn = std::move(conn_);
  RpcFrame f;
  f.kind = FrameKind::kResponse;
  f.method = method_;
  f.status = static_cast<uint32_t>(status.code());
  f.request_id = request_id_;
  f.payload = status.ok() ? payload : status.message();
  std::string& wire = FrameBuffer();
  EncodeRpcFrame(f, &wire);
  absl::Status st = conn->Send(wire, nullptr);
  TrimFrameBuffer(wire);
  if (!st.ok()) Log(LogLevel::kWarning, absl::StrCat("rpc: reply not sent: ", st.message()));
}

void RpcServer::Register(uint16_t method, Handler handler) {
  handlers_[method] = std::move(handler);
}

void RpcServer::Serve(engine::Connection* conn, Peer peer) {
  // Not owning: the caller keeps `conn` alive.
  Serve(std::shared_ptr<engine::Connection>(std::shared_ptr<void>(), conn), std::move(peer));
}

void RpcServer::Serve(std::shared_ptr<engine::Connection> conn, Peer peer_value) {
  engine::Connection* raw = conn.get();
  peer_value.connection = conn;
  auto peer = std::make_shared<const Peer>(std::move(peer_value));
  raw->SetMessageHandler([this, shared_conn = std::move(conn), peer](absl::Span<const char> bytes) {
    const absl::Time arrived = clock_->Now();
    absl::StatusOr<RpcFrame> f = DecodeRpcFrame(absl::string_view(bytes.data(), bytes.size()));
    if (!f.ok() || f->kind != FrameKind::kRequest) {
      ++malformed_;
      BadFrameLog().Log(LogLevel::kWarning,
                        absl::StrCat("rpc: dropped a bad request frame: ",
                                     f.ok() ? "not a request" : f.status().message()));
      return;
    }
    Responder r;
    r.conn_ = shared_conn;
    r.request_id_ = f->request_id;
    r.method_ = f->method;
    r.peer_ = peer;
    if (f->timeout_us != 0) r.deadline_ = arrived + absl::Microseconds(f->timeout_us);
    auto it = handlers_.find(f->method);
    if (it == handlers_.end()) {
      r.Reply(absl::UnimplementedError(absl::StrCat("rpc: unknown method ", f->method)));
      return;
    }
    it->second(f->payload, std::move(r));
  });
}

RpcClient::RpcClient(engine::Connection* conn, const Clock* clock, int max_in_flight,
                     std::function<void()> after_callback)
    : conn_(conn),
      clock_(clock),
      max_in_flight_(max_in_flight),
      after_callback_(std::move(after_callback)) {
  conn_->SetMessageHandler([this](absl::Span<const char> bytes) { OnMessage(bytes); });
}

std::vector<RpcClient::Callback> RpcClient::TakeInOrder(
    const std::function<bool(const Pending&)>& take) {
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) {
    if (take(p)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<Callback> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) {
    auto it = pending_.find(id);
    out.push_back(std::move(it->second.done));
    pending_.erase(it);
  }
  return out;
}

RpcClient::~RpcClient() {
  conn_->SetMessageHandler(nullptr);
  std::vector<Callback> orphans;
  {
    MutexLock l(&mu_);
    orphans = TakeInOrder([](const Pending&) { return true; });
  }
  for (Callback& cb : orphans) {
    Finish(cb, absl::CancelledError("rpc client destroyed"), after_callback_);
  }
}

void RpcClient::Finish(Callback& done, absl::StatusOr<std::string> result,
                       const std::function<void()>& after) {
  done(std::move(result));
  if (after) after();
}
absl::StatusOr<uint64_t> RpcClient::Call(uint16_t method, absl::string_view request,
                                         absl::Duration timeout, Callback done,
                                         const engine::SendOptions& send) {
  uint64_t id;
  {
    MutexLock l(&mu_);
    if (static_cast<int>(pending_.size()) >= max_in_flight_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rpc: ", max_in_flight_, " calls already in flight; retry later"));
    }
    id = next_id_++;
    const absl::Time now = clock_->Now();
    pending_[id] =
        Pending{timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : now + timeout, now,
                std::move(done)};
  }
  RpcFrame f;
  f.kind = FrameKind::kRequest;
  f.method = method;
  f.request_id = id;
  f.timeout_us = timeout == absl::InfiniteDuration()
                     ? 0
                     : static_cast<uint32_t>(
                           std::min<int64_t>(absl::ToInt64Microseconds(timeout), UINT32_MAX));
  f.payload = request;
  std::string& wire = FrameBuffer();
  EncodeRpcFrame(f, &wire);
  absl::Status st = conn_->Send(wire, nullptr, send);
  TrimFrameBuffer(wire);
  if (!st.ok()) {
    MutexLock l(&mu_);
    pending_.erase(id);
    return st;
  }
  return id;
}

void RpcClient::OnMessage(absl::Span<const char> bytes) {
  absl::StatusOr<RpcFrame> f = DecodeRpcFrame(absl::string_view(bytes.data(), bytes.size()));
  if (!f.ok() || f->kind != FrameKind::kResponse) {
    BadFrameLog().Log(LogLevel::kWarning, "rpc: dropped a bad response frame");
    return;
  }
  Callback done;
  absl::Time sent;
  {
    MutexLock l(&mu_);
    auto it = pending_.find(f->request_id);
    if (it == pending_.end()) return;  // cancelled or expired: the answer is late
    done = std::move(it->second.done);
    sent = it->second.sent;
    pending_.erase(it);
  }
  // What the application waits for: the path policy may judge by it (engine/policy.h).
  conn_->ObserveRequest(clock_->Now() - sent);
  // `done` may destroy this client (a link dropped by its own callback): the hook is copied
  // first (a small functor: no allocation), and nothing of this client is touched after.
  const std::function<void()> after = after_callback_;
  if (f->status == 0) {
    Finish(done, std::string(f->payload), after);
  } else {
    Finish(done, absl::Status(static_cast<absl::StatusCode>(f->status), f->payload), after);
  }
}

void RpcClient::Cancel(uint64_t call_id) {
  Callback done;
  {
    MutexLock l(&mu_);
    auto it = pending_.find(call_id);
    if (it == pending_.end()) return;
    done = std::move(it->second.done);
    pending_.erase(it);
  }
  const std::function<void()> after = after_callback_;  // `done` may destroy this client
  Finish(done, absl::CancelledError(absl::StrCat("rpc: call ", call_id, " cancelled")), after);
}

int RpcClient::CheckDeadlines() {
  std::vector<Callback> expired;
  const absl::Time now = clock_->Now();
  const bool lost = conn_->failed();  // no answer can arrive any more
  {
    MutexLock l(&mu_);
    // Most checks find nothing due: they look without allocating.
    bool any = lost;
    for (const auto& [id, p] : pending_) any |= p.deadline <= now;
    if (any) {
      expired = TakeInOrder([&](const Pending& p) { return lost || p.deadline <= now; });
    }
  }
  const std::function<void()> after = after_callback_;  // a callback may destroy this client
  for (Callback& cb : expired) {
    Finish(cb,
           lost ? absl::UnavailableError("rpc: connection lost before the answer arrived")
                : absl::DeadlineExceededError("rpc: deadline exceeded"),
           after);
  }
  return static_cast<int>(expired.size());
}

int RpcClient::in_flight() const {
  MutexLock l(&mu_);
  return static_cast<int>(pending_.size());
}

absl::StatusOr<std::string> RpcClient::CallAndWait(uint16_t method, std::string request,
                                                   absl::Duration timeout,
                                                   const engine::SendOptions& send) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::StatusOr<std::string> result = absl::UnknownError("no answer");
  };
  auto w = std::make_shared<Wait>();
  absl::StatusOr<uint64_t> id = Call(
      method, std::move(request), timeout,
      [w](absl::StatusOr<std::string> r) {
        std::lock_guard<std::mutex> l(w->mu);
        w->result = std::move(r);
        w->done = true;
        w->cv.notify_all();
      },
      send);
  if (!id.ok()) return id.status();
  std::unique_lock<std::mutex> l(w->mu);
  while (!w->done) {
    w->cv.wait_for(l, std::chrono::milliseconds(1));
    if (!w->done) {
      l.unlock();
      CheckDeadlines();
      l.lock();
    }
  }
  return OwnResult(&w->result);
}

absl::StatusOr<std::string> RpcClient::CallAndWait(uint16_t method, std::string request,
                                                   absl::Duration timeout, const Waiter& wait) {
  auto result = std::make_shared<std::optional<absl::StatusOr<std::string>>>();
  absl::StatusOr<uint64_t> id = Call(method, std::move(request), timeout,
                                     [result](absl::StatusOr<std::string> r) { *result = r; });
  if (!id.ok()) return id.status();
  const absl::Time deadline = clock_->Now() + timeout;
  while (!result->has_value()) {
    wait([&] { return result->has_value() || conn_->failed() || clock_->Now() >= deadline; });
    if (!result->has_value()) CheckDeadlines();
  }
  return OwnResult(&**result);
}

}  // namespace unloadkv::rpc
