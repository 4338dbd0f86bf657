// The SDK against an in-process kvserver over the soft transport: every operation, the
// documented limits, many requests in flight, and value writes on both engine paths.
#include "client/client.h"

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/field_record.h"
#include "server/kv_server.h"
#include "transport/base/logging.h"

namespace unloadkv {
namespace {

// Parameter: ClientOptions::caller_progress.
class ClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kError);
    server::KvServerOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_address = "";
    o.arena_bytes = 64 << 20;
    auto s = server::KvServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    loop_ = std::thread([this] { server_->Run(stop_); });
  }
  void TearDown() override {
    stop_ = true;
    loop_.join();
  }
  std::unique_ptr<Client> Connect(const std::string& policy = "adaptive") {
    ClientOptions o;
    o.server = server_->address();
    o.policy = policy;
    o.caller_progress = GetParam();
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<server::KvServer> server_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

TEST_P(ClientTest, PutGetDeleteScanStats) {
  auto c = Connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Put("b", "beta").ok());
  ASSERT_TRUE(c->Put("a", "alpha").ok());
  ASSERT_TRUE(c->Put("c", "").ok());  // empty values are values
  ASSERT_TRUE(c->Put("a", std::string(proto::kMaxValueBytes, 'z')).ok());
  EXPECT_EQ(c->Get("b").value(), "beta");
  EXPECT_EQ(c->Get("c").value(), "");
  EXPECT_EQ(c->Get("a").value(), std::string(proto::kMaxValueBytes, 'z'));
  EXPECT_EQ(c->Get("nope").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<ScanPage> page = c->Scan("a", "", 2);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->items.size(), 1u);  // a's 64 KiB value fills the page's byte budget
  EXPECT_TRUE(page->more);
  page = c->Scan("b", "", 10);
  ASSERT_EQ(page->items.size(), 2u);
  EXPECT_EQ(page->items[0], std::make_pair(std::string("b"), std::string("beta")));
  EXPECT_FALSE(page->more);
  ASSERT_TRUE(c->Delete("b").ok());
  EXPECT_EQ(c->Delete("b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->Get("b").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<ServerStats> st = c->Stats();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->keys, 2u);
  EXPECT_EQ(st->connections, 1u);
  EXPECT_EQ(st->transport, "soft");
  EXPECT_GT(st->arena_used_bytes, 0u);
}

TEST_P(ClientTest, MergeFieldsUpdatesARecordInOneStepAndRefusesNonRecords) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto record = [](std::vector<std::pair<std::string, std::string>> fields) {
    std::string out;
    for (const auto& [n, v] : fields) proto::AppendField(n, v, &out);
    return out;
  };
  ASSERT_TRUE(c->Put("r", record({{"f0", "a"}, {"f1", "b"}, {"f2", "c"}})).ok());
  ASSERT_TRUE(c->MergeFields("r", record({{"f1", "B"}})).ok());
  ASSERT_TRUE(c->MergeFields("new", record({{"x", "1"}})).ok());  // none stored: the record
  EXPECT_EQ(c->Get("r").value(), record({{"f0", "a"}, {"f1", "B"}, {"f2", "c"}}));
  EXPECT_EQ(c->Get("new").value(), record({{"x", "1"}}));
  // Async, many at once on one record: every field ends with its update.
  std::atomic<int> left{8};
  for (int i = 0; i < 8; ++i) {
    c->MergeFieldsAsync("r", record({{"g" + std::to_string(i), std::to_string(i)}}),
                        [&](absl::StatusOr<uint64_t> v) {
                          EXPECT_TRUE(v.ok()) << v.status();
                          left.fetch_sub(1);
                        });
  }
  c->Wait([&] { return left.load() == 0; });
  absl::StatusOr<proto::FieldViews> f = proto::DecodeFieldRecord(c->Get("r").value());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 11u);
  // Not a record, on either side: clear errors, nothing changed.
  ASSERT_TRUE(c->Put("plain", "just bytes").ok());
  EXPECT_EQ(c->MergeFields("plain", record({{"a", "1"}})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->MergeFields("r", "\x07").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Get("plain").value(), "just bytes");
  EXPECT_EQ(proto::DecodeFieldRecord(c->Get("r").value())->size(), 11u);
}

TEST_P(ClientTest, LimitsAreClearErrorsAndChangeNothing) {
  auto c = Connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->Put("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put(std::string(257, 'k'), "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put("k", std::string(proto::kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Get(std::string(300, 'k')).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Scan("", "", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Scan("", "", 1001).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Stats()->keys, 0u);
}

TEST_P(ClientTest, ManyAsyncRequestsInFlightAllComplete) {
  auto c = Connect();
  ASSERT_TRUE(c);
  constexpr int kOps = 2000;
  std::atomic<int> done{0}, failed{0}, outstanding{0};
  for (int i = 0; i < kOps; ++i) {
    c->Wait([&] { return outstanding.load() < 48; });  // drives the connection if asked to
    ++outstanding;
    c->PutAsync(absl::StrCat("key", i % 300), absl::StrCat("value", i),
                [&](absl::StatusOr<uint64_t> v) {
                  if (!v.ok()) ++failed;
                  ++done;
                  --outstanding;
                });
  }
  c->Wait([&] { return done.load() == kOps; });
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(c->Stats()->keys, 300u);
  // Per key, the last Put issued wins: Puts of one key are applied in issue order.
  for (int k = 0; k < 300; k += 37) {
    int last = k + (kOps - 1 - k) / 300 * 300;
    EXPECT_EQ(c->Get(absl::StrCat("key", k)).value(), absl::StrCat("value", last));
  }
}

TEST_P(ClientTest, ValueWritesTakeThePathThePolicyPicks) {
  for (const char* policy : {"offload", "unload"}) {
    auto c = Connect(policy);
    ASSERT_TRUE(c);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Put(absl::StrCat(policy, i), "payload").ok());
    // A write's completion may trail the PUT's answer (the server can reply before its ack
    // for an unloaded write arrives): wait for all 50.
    // (Wait also drives the connection when the caller does the driving.)
    WriteStats w;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    c->Wait([&] {
      w = c->write_stats();
      return w.offload + w.unload >= 50 || absl::Now() > deadline;
    });
    if (std::string(policy) == "offload") {
      EXPECT_EQ(w.offload, 50u);
      EXPECT_EQ(w.unload, 0u);
    } else {
      EXPECT_EQ(w.unload, 50u);
      EXPECT_EQ(w.offload, 0u);
    }
    EXPECT_EQ(c->Get(absl::StrCat(policy, 49)).value(), "payload");
  }
  absl::StatusOr<ServerStats> st = Connect()->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->offload_writes, 50u);
  EXPECT_EQ(st->unload_writes, 50u);
}

// More inline PutAsync in one batch than max_in_flight (64) all succeed (those beyond the window
// wait for room, as a granted PUT waits for its grant; they failed with RESOURCE_EXHAUSTED
// before), in issue order, and each reads back. (Granted PUTs beyond the window may still fail
// with RESOURCE_EXHAUSTED, as client.h says of any call over max_in_flight.)
TEST_P(ClientTest, InlinePutsBeyondTheWindowWaitForRoom) {
  for (const char* policy : {"adaptive", "offload,inline:4096"}) {
    SCOPED_TRACE(policy);
    auto c = Connect(policy);
    ASSERT_TRUE(c);
    constexpr int kPuts = 300;
    std::atomic<int> done{0}, failed{0};
    {
      Client::Batch batch = c->BeginBatch();
      for (int i = 0; i < kPuts; ++i) {
        // Each of 50 keys written 6 times: the last one issued must be what reads back.
        c->PutAsync(absl::StrCat(policy, "/", i % 50), absl::StrCat("v", i),
                    [&](absl::StatusOr<uint64_t> v) {
                      if (!v.ok()) {
                        ADD_FAILURE() << v.status();
                        failed.fetch_add(1);
                      }
                      done.fetch_add(1);
                    });
      }
    }
    c->Wait([&] { return done.load() == kPuts; });
    EXPECT_EQ(failed.load(), 0);
    for (int k = 0; k < 50; ++k) {
      EXPECT_EQ(c->Get(absl::StrCat(policy, "/", k)).value(), absl::StrCat("v", kPuts - 50 + k));
    }
  }
}

// With ",inline:N" a value (or a merge's update) of at most N bytes travels in the PUT: no
// value write at all (the engine and the server count none), while larger ones still go
// through the engine; every value reads back, and inline PUTs of one key apply in issue order.
TEST_P(ClientTest, SmallValuesTravelInlineWhenThePolicySaysSo) {
  auto c = Connect("offload,inline:64");
  ASSERT_TRUE(c);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->Put(absl::StrCat("s", i), "payload").ok());
  ASSERT_TRUE(c->Put("edge", std::string(64, 'e')).ok());
  EXPECT_EQ(c->write_stats().offload + c->write_stats().unload, 0u);
  absl::StatusOr<ServerStats> st = c->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->offload_writes + st->unload_writes, 0u);
  std::string small, large;
  proto::AppendField("f", "1", &small);                   // 10 bytes: inline
  proto::AppendField("g", std::string(60, 'g'), &large);  // 69 bytes: a grant
  ASSERT_TRUE(c->MergeFields("rec", small).ok());
  EXPECT_EQ(c->write_stats().offload + c->write_stats().unload, 0u);
  ASSERT_TRUE(c->Put("large", std::string(65, 'l')).ok());
  ASSERT_TRUE(c->MergeFields("rec", large).ok());
  WriteStats w;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  c->Wait([&] {
    w = c->write_stats();
    return w.offload >= 2 || absl::Now() > deadline;
  });
  EXPECT_EQ(w.offload, 2u);
  EXPECT_EQ(c->Get("s49").value(), "payload");
  EXPECT_EQ(c->Get("edge").value(), std::string(64, 'e'));
  EXPECT_EQ(c->Get("large").value(), std::string(65, 'l'));
  EXPECT_EQ(c->Get("rec").value(), small + large);
  std::atomic<int> left{200};
  for (int i = 0; i < 200; ++i) {
    c->Wait([&] { return 200 - left.load() > i - 48; });  // at most 48 in flight
    c->PutAsync("ordered", absl::StrCat("v", i), [&](absl::StatusOr<uint64_t> v) {
      EXPECT_TRUE(v.ok()) << v.status();
      left.fetch_sub(1);
    });
  }
  c->Wait([&] { return left.load() == 0; });
  EXPECT_EQ(c->Get("ordered").value(), "v199");
  ClientOptions o;
  o.server = server_->address();
  o.policy = "adaptive,inline:4097";
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ClientTest, ConnectingToNothingIsAClearError) {
  ClientOptions o;
  o.server = "127.0.0.1:1";
  o.timeout = absl::Seconds(1);
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("127.0.0.1:1"), std::string::npos) << c.status();
  o.policy = "fastest";
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ClientTest, ThreadsSharingOneClientAllGetAnswers) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string key = absl::StrCat("t", t, "-", i % 20);
        if (!c->Put(key, absl::StrCat(i)).ok()) ++failures;
        absl::StatusOr<std::string> v = c->Get(key);
        if (!v.ok() || *v != absl::StrCat(i)) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Progress, ClientTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "CallerDriven" : "EngineThread";
                         });

}  // namespace
}  // namespace unloadkv
