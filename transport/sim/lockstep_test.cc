#include "transport/sim/lockstep.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace unloadkv::sim {
namespace {

// A toy world: a clock that a step moves by one tick.
struct Ticks {
  int now = 0;
  int limit = 1000;
  bool Step() { return ++now <= limit; }
};

TEST(LockstepTest, ParticipantsRunOneAtATimeInSpawnOrderAndWakeWhenTheirConditionHolds) {
  Ticks t;
  Lockstep ls([&] { return t.Step(); });
  std::vector<std::string> log;  // written by whichever thread runs: never two at once
  for (int p = 0; p < 3; ++p) {
    ls.Spawn([&, p] {
      for (int i = 1; i <= 3; ++i) {
        const int until = t.now + (p + 1) * i;
        ls.Wait([&, until] { return t.now >= until; });
        log.push_back(std::to_string(p) + "@" + std::to_string(t.now));
      }
    });
  }
  ASSERT_TRUE(ls.Run().ok());
  // Each participant waits 1, 2, 3 times (p + 1) ticks from when it last ran.
  EXPECT_EQ(log, (std::vector<std::string>{"0@1", "1@2", "0@3", "2@3", "0@6", "1@6", "2@9", "1@12",
                                           "2@18"}));
}

TEST(LockstepTest, SameScheduleEveryRun) {
  auto run = [] {
    Ticks t;
    Lockstep ls([&] { return t.Step(); });
    std::string trace;
    for (int p = 0; p < 8; ++p) {
      ls.Spawn([&, p] {
        for (int i = 0; i < 50; ++i) {
          const int until = t.now + 1 + (p * 7 + i * 3) % 5;
          ls.Wait([&, until] { return t.now >= until; });
          trace += static_cast<char>('a' + p);
        }
      });
    }
    EXPECT_TRUE(ls.Run().ok());
    return trace;
  };
  const std::string first = run();
  EXPECT_EQ(first.size(), 400u);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(run(), first);
}

// A participant that spawns another (a client starting its background thread) gets it run in
// the same Run, after itself, and Run returns once both finished.
TEST(LockstepTest, AParticipantMaySpawnAnother) {
  Ticks t;
  Lockstep ls([&] { return t.Step(); });
  std::vector<std::string> log;
  bool child_done = false;
  ls.Spawn([&] {
    log.push_back("parent@" + std::to_string(t.now));
    ls.Spawn([&] {
      log.push_back("child@" + std::to_string(t.now));
      ls.Wait([&] { return t.now >= 5; });
      child_done = true;
    });
    ls.Wait([&] { return child_done; });
    log.push_back("parent@" + std::to_string(t.now));
  });
  ASSERT_TRUE(ls.Run().ok());
  EXPECT_EQ(log, (std::vector<std::string>{"parent@0", "child@0", "parent@5"}));
}

TEST(LockstepTest, WaitOutsideRunStepsTheWorldItself) {
  Ticks t;
  Lockstep ls([&] { return t.Step(); });
  ls.Wait([&] { return t.now >= 5; });
  EXPECT_EQ(t.now, 5);
}

TEST(LockstepTest, AStalledWorldFailsRunInsteadOfHanging) {
  Ticks t;
  t.limit = 10;
  Lockstep ls([&] { return t.Step(); });
  ls.Spawn([&] { ls.Wait([] { return false; }); });
  absl::Status st = ls.Run();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_GE(t.now, 10);
}

// A participant that never yields (every Wait holds at once, forever) would hang the process
// with the world never stepping: it aborts, saying so.
TEST(LockstepDeathTest, AParticipantThatNeverYieldsAbortsInsteadOfHanging) {
  EXPECT_DEATH(
      {
        Ticks t;
        Lockstep ls([&] { return t.Step(); });
        ls.Spawn([&] {
          for (;;) ls.Wait([] { return true; });
        });
        (void)ls.Run();
      },
      "without the world stepping \\(a livelock\\)");
}

// A participant whose condition holds at once now and then, the world stepping in between, is
// not a livelock.
TEST(LockstepTest, WaitsThatHoldAtOnceAreFineWhileTheWorldSteps) {
  Ticks t;
  t.limit = 100'000;
  Lockstep ls([&] { return t.Step(); });
  int rounds = 0;
  ls.Spawn([&] {
    for (int i = 0; i < 50'000; ++i) {
      ls.Wait([] { return true; });                     // at once
      ls.Wait([&, at = t.now] { return t.now > at; });  // one step later
      ++rounds;
    }
  });
  EXPECT_TRUE(ls.Run().ok());
  EXPECT_EQ(rounds, 50'000);
}

}  // namespace
}  // namespace unloadkv::sim
