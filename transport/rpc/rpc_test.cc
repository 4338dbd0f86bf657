// RPC over engine connections on the soft RNIC: calls, errors, deadlines, cancellation and
// flow control, plus the frame decoder.
#include "transport/rpc/rpc.h"

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/logging.h"
#include "transport/rpc/rpc_frame.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::rpc {
namespace {

constexpr uint16_t kEcho = 1, kNever = 2, kFail = 3;

// Offloads, and counts the requests the connection reports to it.
class RequestCountingPolicy : public engine::OffloadPolicy {
 public:
  void ObserveRequest(absl::Duration latency) override {
    ++requests;
    if (latency <= absl::ZeroDuration()) ++not_positive;
  }
  std::atomic<int> requests{0}, not_positive{0};
};

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(getenv("RPCDBG") ? LogLevel::kInfo : LogLevel::kError);
    da_ = std::move(*soft::SoftDevice::Create({}));
    db_ = std::move(*soft::SoftDevice::Create({}));
    ea_ = std::move(*engine::Engine::Create(da_.get(), {}));
    eb_ = std::move(*engine::Engine::Create(db_.get(), {}));
    auto policy = std::make_unique<RequestCountingPolicy>();
    policy_ = policy.get();
    ca_ = std::move(*ea_->CreateConnection(std::move(policy)));
    cb_ = std::move(*eb_->CreateConnection(std::make_unique<engine::OffloadPolicy>()));
    ASSERT_TRUE(ca_->Connect(cb_->local_info()).ok());
    ASSERT_TRUE(cb_->Connect(ca_->local_info()).ok());
    server_ = std::make_unique<RpcServer>(RealClock::Get());
    server_->Register(kEcho, [](absl::string_view req, Responder r) {
      r.Reply(absl::OkStatus(), std::string(req));
    });
    server_->Register(kNever, [this](absl::string_view, Responder r) {
      std::lock_guard<std::mutex> l(held_mu_);
      held_.push_back(std::move(r));  // answered later (or never)
    });
    server_->Register(
        kFail, [](absl::string_view, Responder r) { r.Reply(absl::NotFoundError("no such key")); });
    server_->Serve(cb_.get(), Peer{});
    client_ = std::make_unique<RpcClient>(ca_.get(), RealClock::Get(), /*max_in_flight=*/8);
    ea_->Start();
    eb_->Start();
  }
  void TearDown() override {
    ea_->Stop();
    eb_->Stop();
    client_.reset();
    held_.clear();
    ca_.reset();
    cb_.reset();
  }

  // Polls `cond` every millisecond for at most `limit`; whether it became true.
  static bool WaitUntil(const std::function<bool()>& cond,
                        absl::Duration limit = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + limit;
    while (!cond()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }
  size_t held() {
    std::lock_guard<std::mutex> l(held_mu_);
    return held_.size();
  }

  std::unique_ptr<soft::SoftDevice> da_, db_;
  std::unique_ptr<engine::Engine> ea_, eb_;
  std::unique_ptr<engine::Connection> ca_, cb_;
  RequestCountingPolicy* policy_ = nullptr;  // ca_'s
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<RpcClient> client_;
  std::mutex held_mu_;
  std::vector<Responder> held_;
};

TEST_F(RpcTest, CallsReturnTheServersAnswerOrItsError) {
  absl::StatusOr<std::string> r = client_->CallAndWait(kEcho, "hello", absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "hello");
  r = client_->CallAndWait(kFail, "", absl::Seconds(5));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no such key");
  r = client_->CallAndWait(99, "", absl::Seconds(5));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client_->in_flight(), 0);
  // Each answered call, an error too, told the path policy its round trip.
  EXPECT_EQ(policy_->requests.load(), 3);
  EXPECT_EQ(policy_->not_positive.load(), 0);
}

TEST_F(RpcTest, ManyConcurrentCallsAllComplete) {
  std::atomic<int> ok{0}, done{0};
  int issued = 0;
  while (issued < 500) {
    absl::StatusOr<uint64_t> id =
        client_->Call(kEcho, std::to_string(issued), absl::Seconds(10),
                      [&, want = std::to_string(issued)](absl::StatusOr<std::string> r) {
                        ok += r.ok() && *r == want;
                        ++done;
                      });
    if (id.ok()) {
      ++issued;
    } else {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
      absl::SleepFor(absl::Microseconds(50));  // pushed back: wait for answers
    }
  }
  ASSERT_TRUE(WaitUntil([&] { return done.load() == 500; })) << done.load() << " of 500 done";
  EXPECT_EQ(ok.load(), 500);
}

TEST_F(RpcTest, FlowControlPushesBackInsteadOfBuffering) {
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        client_->Call(kNever, "", absl::Seconds(30), [&](absl::StatusOr<std::string>) { ++done; })
            .ok());
  }
  absl::StatusOr<uint64_t> extra = client_->Call(kNever, "", absl::Seconds(30), nullptr);
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kResourceExhausted);
  // Answering frees room again.
  ASSERT_TRUE(WaitUntil([&] { return held() == 8; })) << held() << " of 8 requests arrived";
  held_[0].Reply(absl::OkStatus(), "late but fine");
  held_[0].Reply(absl::OkStatus(), "twice is ignored");
  ASSERT_TRUE(WaitUntil([&] { return done.load() == 1; }));
  std::atomic<bool> echoed{false};
  EXPECT_TRUE(client_
                  ->Call(kEcho, "x", absl::Seconds(5),
                         [&](absl::StatusOr<std::string> r) { echoed = r.ok(); })
                  .ok());
  // Answer everything before `done` and `echoed` go out of scope.
  {
    std::lock_guard<std::mutex> l(held_mu_);
    for (Responder& r : held_) r.Reply(absl::OkStatus());
  }
  ASSERT_TRUE(WaitUntil([&] { return done.load() == 8 && echoed.load(); }))
      << done.load() << " of 8 answered, echoed " << echoed.load();
}

TEST_F(RpcTest, DeadlinesAndCancellationFailCallsAndDropLateAnswers) {
  absl::StatusOr<std::string> r = client_->CallAndWait(kNever, "", absl::Milliseconds(20));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  std::atomic<int> calls{0};
  absl::Status got;
  absl::StatusOr<uint64_t> id =
      client_->Call(kNever, "", absl::Seconds(30), [&](absl::StatusOr<std::string> r) {
        got = r.status();
        ++calls;
      });
  ASSERT_TRUE(id.ok());
  client_->Cancel(*id);
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled);
  // The server answers both late; neither reaches a callback again.
  ASSERT_TRUE(WaitUntil([&] { return held() == 2; })) << held() << " of 2 requests arrived";
  EXPECT_NE(held_[0].deadline(), absl::InfiniteFuture());
  held_[0].Reply(absl::OkStatus(), "late");
  held_[1].Reply(absl::OkStatus(), "late");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(client_->in_flight(), 0);
  EXPECT_EQ(policy_->requests.load(), 0);  // an expired or cancelled call has no round trip
}

TEST_F(RpcTest, MalformedRequestsAreCountedAndDropped) {
  ASSERT_TRUE(ca_->Send("garbage that is not a frame", nullptr).ok());
  absl::StatusOr<std::string> r = client_->CallAndWait(kEcho, "still fine", absl::Seconds(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(server_->malformed_frames(), 1u);
}

TEST(RpcFrameTest, RoundTripsAndRejectsBadFrames) {
  RpcFrame f;
  f.kind = FrameKind::kResponse;
  f.method = 7;
  f.status = 5;
  f.request_id = 123456789;
  f.payload = "payload";
  std::string wire = EncodeRpcFrame(f);
  EXPECT_EQ(wire.size(), kRpcResponseHeaderSize + 7);
  absl::StatusOr<RpcFrame> d = DecodeRpcFrame(wire);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, FrameKind::kResponse);
  EXPECT_EQ(d->method, 7);
  EXPECT_EQ(d->status, 5u);
  EXPECT_EQ(d->request_id, 123456789u);
  EXPECT_EQ(d->timeout_us, 0u);
  EXPECT_EQ(d->payload, "payload");
  // The payload is the rest of the message, whatever its length (the message delimits it).
  const std::string longer = wire + "x";  // the decoded payload points into it
  d = DecodeRpcFrame(longer);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->payload, "payloadx");
  const std::string header_only = wire.substr(0, kRpcResponseHeaderSize);
  d = DecodeRpcFrame(header_only);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->payload, "");

  RpcFrame q;
  q.kind = FrameKind::kRequest;
  q.method = 3;
  q.request_id = 42;
  q.timeout_us = 5000000;
  q.payload = "req";
  const std::string req = EncodeRpcFrame(q);
  EXPECT_EQ(req.size(), kRpcRequestHeaderSize + 3);
  d = DecodeRpcFrame(req);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, FrameKind::kRequest);
  EXPECT_EQ(d->timeout_us, 5000000u);
  EXPECT_EQ(d->status, 0u);
  EXPECT_EQ(d->payload, "req");

  struct Bad {
    std::string bytes;
    const char* mentions;
  } bad[] = {
      {"", "no kind"},
      {wire.substr(0, kRpcResponseHeaderSize - 1), "header needs 13"},
      {req.substr(0, kRpcRequestHeaderSize - 1), "header needs 16"},
      {std::string(1, '\x09') + wire.substr(1), "unknown kind 9"},
      {wire.substr(0, 1) + '\x01' + wire.substr(2), "unsupported version 1"},  // version 1 peer
      {wire.substr(0, 12) + '\x63' + wire.substr(13), "bad status 99"},
  };
  for (const Bad& b : bad) {
    absl::StatusOr<RpcFrame> r = DecodeRpcFrame(b.bytes);
    ASSERT_FALSE(r.ok()) << b.mentions;
    EXPECT_NE(r.status().message().find(b.mentions), absl::string_view::npos) << r.status();
  }
}

}  // namespace
}  // namespace unloadkv::rpc
