// The YCSB pieces that decide what a run measures: distributions (checked statistically
// against their definitions), the operation mix, the property-file parser and its errors, the
// histogram's precision, and the summary's exact format.
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "client/ycsb/generators.h"
#include "client/ycsb/histogram.h"
#include "client/ycsb/measurements.h"
#include "client/ycsb/memcached_db.h"
#include "client/ycsb/properties.h"
#include "client/ycsb/workload.h"
#include "gtest/gtest.h"

namespace unloadkv::ycsb {
namespace {

constexpr int kDraws = 200000;

TEST(GeneratorsTest, ZipfianMatchesItsDefinition) {
  const uint64_t n = 1000;
  Zipfian z(0, n - 1);
  Rng rng(1);
  std::vector<int> counts(n, 0);
  for (int i = 0; i < kDraws; ++i) {
    uint64_t v = z.Next(rng);
    ASSERT_LT(v, n);
    ++counts[v];
  }
  const double zeta = Zipfian::Zeta(0, n, kZipfianConstant, 0);
  // P(rank k) = 1 / (k^theta * zeta(n)); ranks 1 and 2 are drawn exactly by the algorithm.
  for (int k = 1; k <= 2; ++k) {
    const double expected = 1.0 / (std::pow(k, kZipfianConstant) * zeta);
    EXPECT_NEAR(counts[k - 1] / double(kDraws), expected, expected * 0.03) << "rank " << k;
  }
  int top100 = 0;
  for (int k = 0; k < 100; ++k) top100 += counts[k];
  const double expected_top100 = Zipfian::Zeta(0, 100, kZipfianConstant, 0) / zeta;
  EXPECT_NEAR(top100 / double(kDraws), expected_top100, 0.02);
}

TEST(GeneratorsTest, ScrambledZipfianSpreadsPopularityOverTheRange) {
  ScrambledZipfian z(0, 9999);
  Rng rng(2);
  std::map<uint64_t, int> counts;
  for (int i = 0; i < kDraws; ++i) {
    uint64_t v = z.Next(rng);
    ASSERT_LT(v, 10000u);
    ++counts[v];
  }
  int top = 0;
  uint64_t top_key = 0;
  for (auto& [k, c] : counts) {
    if (c > top) top = c, top_key = k;
  }
  // The most popular rank has probability 1/zeta(10^10) = 1/26.469; hashing moves it away
  // from key 0.
  EXPECT_NEAR(top / double(kDraws), 1 / 26.469, 0.004);
  EXPECT_NE(top_key, 0u);
  EXPECT_EQ(top_key, FnvHash64(0) % 10000);
}

TEST(GeneratorsTest, LatestFavorsTheNewestAcknowledgedInsert) {
  AcknowledgedCounter counter(1000);
  SkewedLatest latest(&counter);
  Rng rng(3);
  std::map<uint64_t, int> counts;
  for (int i = 0; i < kDraws; ++i) ++counts[latest.Next(rng)];
  EXPECT_EQ(counts.rbegin()->first, 999u);
  const double p_newest = 1.0 / Zipfian::Zeta(0, 1000, kZipfianConstant, 0);
  EXPECT_NEAR(counts[999] / double(kDraws), p_newest, p_newest * 0.03);
  // An insert that completed out of order does not count until the earlier one completes.
  uint64_t a = counter.Next(), b = counter.Next();
  counter.Acknowledge(b);
  EXPECT_EQ(counter.Limit(), 1000u);
  counter.Acknowledge(a);
  EXPECT_EQ(counter.Limit(), 1002u);
  counts.clear();
  for (int i = 0; i < kDraws; ++i) ++counts[latest.Next(rng)];
  EXPECT_EQ(counts.rbegin()->first, 1001u);
  EXPECT_GT(counts[1001], counts[999]);
}

TEST(GeneratorsTest, HotspotSendsTheHotFractionToTheHotSet) {
  Hotspot h(0, 9999, 0.2, 0.8);
  Rng rng(4);
  int hot = 0;
  for (int i = 0; i < kDraws; ++i) hot += h.Next(rng) < 2000;
  EXPECT_NEAR(hot / double(kDraws), 0.8, 0.01);
}

TEST(WorkloadTest, OperationMixFollowsTheProportions) {
  Properties p;
  ASSERT_TRUE(p.ParseText("readproportion=0.5\nupdateproportion=0.3\nscanproportion=0.15\n"
                          "insertproportion=0.05\n",
                          "mix")
                  .ok());
  auto c = ReadWorkloadConfig(p);
  ASSERT_TRUE(c.ok()) << c.status();
  Workload w(*c);
  Workload::Thread t(&w, 5);
  std::map<Op, int> n;
  for (int i = 0; i < kDraws; ++i) ++n[t.NextOp()];
  EXPECT_NEAR(n[Op::kRead] / double(kDraws), 0.5, 0.01);
  EXPECT_NEAR(n[Op::kUpdate] / double(kDraws), 0.3, 0.01);
  EXPECT_NEAR(n[Op::kScan] / double(kDraws), 0.15, 0.01);
  EXPECT_NEAR(n[Op::kInsert] / double(kDraws), 0.05, 0.005);
  EXPECT_EQ(n[Op::kReadModifyWrite], 0);
  EXPECT_EQ(w.KeyName(0), "user" + std::to_string(FnvHash64(0)));
  Record r = t.BuildRecord();
  ASSERT_EQ(r.size(), 10u);
  EXPECT_EQ(r[3].first, "field3");
  EXPECT_EQ(r[3].second.size(), 100u);
  EXPECT_EQ(t.BuildUpdate().size(), 1u);  // writeallfields=false
  for (int i = 0; i < 1000; ++i) {
    int len = t.NextScanLength();
    ASSERT_TRUE(len >= 1 && len <= 1000);
  }
}

TEST(PropertiesTest, ParsesJavaPropertiesSyntax) {
  Properties p;
  ASSERT_TRUE(p.ParseText("# comment\n! also a comment\n\n  recordcount = 42\n"
                          "operationcount: 7\nrequestdistribution=zip\\\n   fian\n",
                          "w")
                  .ok());
  EXPECT_EQ(*p.GetInt("recordcount", 0, 0, 100), 42);
  EXPECT_EQ(*p.GetInt("operationcount", 0, 0, 100), 7);
  EXPECT_EQ(p.GetString("requestdistribution", ""), "zipfian");
  ASSERT_TRUE(p.SetFromArg("recordcount=43").ok());
  EXPECT_EQ(*p.GetInt("recordcount", 0, 0, 100), 43);
}

TEST(PropertiesTest, BadFilesGiveErrorsNamingFileLineAndKey) {
  Properties p;
  absl::Status st = p.ParseText("recordcount=1\nthis line has no separator\n", "wl");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "wl:2")) << st;
  EXPECT_FALSE(p.SetFromArg("novalue").ok());
  EXPECT_EQ(p.LoadFile("/no/such/workload").code(), absl::StatusCode::kNotFound);

  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"recordcount=abc", "wl:1: recordcount=abc: not an integer"},
      {"recordcount=-5", "recordcount=-5: must be in"},
      {"readproportion=1.5", "readproportion=1.5: must be in"},
      {"readallfields=yes", "readallfields=yes: must be true or false"},
      {"requestdistribution=gaussian", "choose uniform, zipfian, latest, hotspot"},
      {"readproportion=0\nupdateproportion=0", "proportions are all zero"},
      {"fieldlengthdistribution=histogram", "only constant"},
      {"workload=site.ycsb.workloads.TimeSeriesWorkload", "only the core workload"},
      {"insertorder=random", "choose hashed or ordered"},
  };
  for (const Case& c : cases) {
    Properties q;
    ASSERT_TRUE(q.ParseText(c.text, "wl").ok());
    absl::Status bad = ReadWorkloadConfig(q).status();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(absl::StrContains(bad.message(), c.expect)) << c.text << " -> " << bad;
  }
}

TEST(HistogramTest, PercentilesHaveThreeSignificantDigits) {
  Histogram h;
  for (int v = 1; v <= 100000; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_EQ(h.min(), 1);
  EXPECT_EQ(h.max(), 100000);
  EXPECT_DOUBLE_EQ(h.mean(), 50000.5);
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    const double exact = p * 1000;
    EXPECT_NEAR(h.Percentile(p), exact, exact * 0.001) << p;
  }
  Histogram small;
  for (int v : {3, 1, 2}) small.Record(v);
  EXPECT_EQ(small.Percentile(50), 2);  // exact below 2048
  Histogram merged;
  merged.Add(small);
  merged.Add(h);
  EXPECT_EQ(merged.count(), 100003u);
  EXPECT_EQ(merged.min(), 1);
}

// memcached holds a record as one value: it decodes to what was encoded, and a value cut short
// anywhere (or with a length running past its end) is refused, not read past.
TEST(MemcachedDbTest, RecordEncodingRoundTripsAndRefusesTruncation) {
  const Record r = {{"field0", std::string(100, 'a')}, {"field1", ""}, {"", std::string("\0x", 2)}};
  const std::string bytes = MemcachedDb::Encode(r);
  absl::StatusOr<Record> back = MemcachedDb::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_TRUE(MemcachedDb::Decode("").ok());
  for (size_t n = 1; n < bytes.size(); ++n) {
    absl::StatusOr<Record> cut = MemcachedDb::Decode(bytes.substr(0, n));
    // Cuts at a field boundary decode to the fields before it; any other cut is refused.
    if (cut.ok()) {
      EXPECT_LT(cut->size(), r.size()) << n;
    } else {
      EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << n;
    }
  }
  std::string overlong = bytes;
  overlong[0] = '\xff';  // the first name's length now runs past the end
  EXPECT_FALSE(MemcachedDb::Decode(overlong).ok());
}

TEST(MeasurementsTest, SummaryIsYcsbsTextFormat) {
  EXPECT_EQ(JavaDouble(1000), "1000.0");
  EXPECT_EQ(JavaDouble(98.91196834817013), "98.91196834817013");
  EXPECT_EQ(JavaDouble(0.5), "0.5");
  EXPECT_EQ(JavaDouble(12345678.0), "1.2345678E7");
  Measurements m;
  m.Record("READ", 100, "OK");
  m.Record("READ", 300, "OK");
  m.Record("READ", 200, "NOT_FOUND");
  m.Record("UPDATE", 50, "OK");
  EXPECT_EQ(FormatSummary(absl::Milliseconds(2000), 4, m, {95, 99}),
            "[OVERALL], RunTime(ms), 2000\n"
            "[OVERALL], Throughput(ops/sec), 2.0\n"
            "[READ], Operations, 3\n"
            "[READ], AverageLatency(us), 200.0\n"
            "[READ], MinLatency(us), 100\n"
            "[READ], MaxLatency(us), 300\n"
            "[READ], 95thPercentileLatency(us), 300\n"
            "[READ], 99thPercentileLatency(us), 300\n"
            "[READ], Return=NOT_FOUND, 1\n"
            "[READ], Return=OK, 2\n"
            "[UPDATE], Operations, 1\n"
            "[UPDATE], AverageLatency(us), 50.0\n"
            "[UPDATE], MinLatency(us), 50\n"
            "[UPDATE], MaxLatency(us), 50\n"
            "[UPDATE], 95thPercentileLatency(us), 50\n"
            "[UPDATE], 99thPercentileLatency(us), 50\n"
            "[UPDATE], Return=OK, 1\n");
}

}  // namespace
}  // namespace unloadkv::ycsb
