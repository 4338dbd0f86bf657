#include "client/ycsb/checked_db.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace unloadkv::ycsb {
namespace {

// An in-memory store that can be told to lie.
class FakeDb : public Db {
 public:
  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override {
    auto it = records_.find(key);
    if (it == records_.end() || drop_record) return absl::NotFoundError(key);
    out->clear();
    for (const auto& [f, v] : it->second) {
      if (fields.empty() || f == fields[0]) out->emplace_back(f, corrupt ? v + "!" : v);
    }
    if (drop_field && !out->empty()) out->pop_back();
    return absl::OkStatus();
  }
  absl::Status Scan(const std::string& start, int count, const std::vector<std::string>&,
                    std::vector<Record>* out) override {
    out->clear();
    for (auto it = records_.lower_bound(start); it != records_.end() && count-- > 0; ++it) {
      Record r;
      for (const auto& [f, v] : it->second) r.emplace_back(f, corrupt ? v + "!" : v);
      out->push_back(r);
    }
    return absl::OkStatus();
  }
  absl::Status Update(const std::string& key, const Record& values) override {
    for (const auto& [f, v] : values) records_[key][f] = v;
    return absl::OkStatus();
  }
  absl::Status Insert(const std::string& key, const Record& values) override {
    return Update(key, values);
  }
  absl::Status Delete(const std::string& key) override {
    records_.erase(key);
    return absl::OkStatus();
  }
  bool corrupt = false, drop_field = false, drop_record = false;

 private:
  std::map<std::string, std::map<std::string, std::string>> records_;
};

TEST(CheckedDbTest, AcceptsWhatWasWrittenAndCatchesEveryKindOfWrongRead) {
  ValueLog log(2);
  auto fake = std::make_unique<FakeDb>();
  FakeDb* store = fake.get();
  CheckedDb db(std::move(fake), &log);
  ASSERT_TRUE(db.Insert("user1", {{"field0", "a"}, {"field1", "b"}}).ok());
  ASSERT_TRUE(db.Insert("user2", {{"field0", "c"}, {"field1", "d"}}).ok());
  ASSERT_TRUE(db.Update("user1", {{"field1", "e"}}).ok());
  Record r;
  ASSERT_TRUE(db.Read("user1", {}, &r).ok());
  ASSERT_TRUE(db.Read("user2", {"field1"}, &r).ok());
  std::vector<Record> scanned;
  ASSERT_TRUE(db.Scan("user1", 2, {}, &scanned).ok());
  EXPECT_EQ(log.counts().reads, 2u);
  EXPECT_EQ(log.counts().bad_reads, 0u);
  EXPECT_EQ(log.counts().scanned_values, 4u);
  EXPECT_EQ(log.counts().bad_scanned_values, 0u);

  store->corrupt = true;  // bytes that were never written
  ASSERT_TRUE(db.Read("user1", {}, &r).ok());
  ASSERT_TRUE(db.Scan("user1", 1, {}, &scanned).ok());
  EXPECT_EQ(log.counts().bad_reads, 1u);
  EXPECT_EQ(log.counts().bad_scanned_values, 2u);
  EXPECT_NE(log.counts().first_problem.find("never written"), std::string::npos);
  store->corrupt = false;

  store->drop_field = true;  // a field missing
  ASSERT_TRUE(db.Read("user2", {}, &r).ok());
  EXPECT_EQ(log.counts().bad_reads, 2u);
  store->drop_field = false;

  store->drop_record = true;  // a record written but not found
  EXPECT_FALSE(db.Read("user2", {}, &r).ok());
  EXPECT_EQ(log.counts().bad_reads, 3u);
}

TEST(CheckedDbTest, AValueWrittenToAnotherFieldOrRecordIsWrong) {
  ValueLog log(1);
  ASSERT_TRUE(log.CheckRead("k", {}, {}) == false);  // no field at all
  log.Written("k1", {{"field0", "x"}});
  log.Written("k2", {{"field0", "y"}});
  EXPECT_TRUE(log.CheckRead("k1", {}, {{"field0", "x"}}));
  EXPECT_FALSE(log.CheckRead("k1", {}, {{"field0", "y"}}));  // k2's value
  EXPECT_FALSE(log.CheckRead("k1", {}, {{"field1", "x"}}));  // another field
  EXPECT_EQ(log.counts().bad_reads, 3u);
}

}  // namespace
}  // namespace unloadkv::ycsb
