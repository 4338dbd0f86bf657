#include "transport/base/object_pool.h"

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace unloadkv {
namespace {

struct State {
  std::string text;
  int n = 0;
};

TEST(ObjectPoolTest, GivenObjectsComeBackReset) {
  using Pool = ObjectPool<State, 2>;
  State* a = Pool::Take();
  a->text = "hello";
  a->n = 3;
  Pool::Give(a);
  EXPECT_EQ(Pool::spares(), 1u);
  State* b = Pool::Take();
  EXPECT_EQ(b, a);  // the spare, not a new one
  EXPECT_TRUE(b->text.empty());
  EXPECT_EQ(b->n, 0);
  Pool::Give(b);
}

TEST(ObjectPoolTest, ACustomResetKeepsCapacity) {
  using Pool = ObjectPool<State, 2>;
  State* a = Pool::Take();
  a->text.assign(1000, 'x');
  const size_t cap = a->text.capacity();
  Pool::Give(a, [](State& s) {
    s.text.clear();
    s.n = 0;
  });
  State* b = Pool::Take();
  EXPECT_TRUE(b->text.empty());
  EXPECT_EQ(b->text.capacity(), cap);
  Pool::Give(b);
}

TEST(ObjectPoolTest, SparesAreCappedAndPerThread) {
  using Pool = ObjectPool<State, 2>;
  State* s[4];
  for (State*& p : s) p = Pool::Take();
  for (State* p : s) Pool::Give(p);  // two kept, two deleted
  EXPECT_EQ(Pool::spares(), 2u);
  size_t other = 99;
  std::thread([&] { other = Pool::spares(); }).join();
  EXPECT_EQ(other, 0u);
}

TEST(ObjectPoolTest, AGiveAfterTheThreadsSparesAreGoneDeletes) {
  using Pool = ObjectPool<State, 2>;
  std::thread([] {
    // Made before the spares, so destroyed after them: its Give finds the pool gone and
    // deletes (LeakSanitizer would report a State kept nowhere).
    struct GivesLate {
      State* s = nullptr;
      ~GivesLate() { Pool::Give(s); }
    };
    thread_local GivesLate late;
    late.s = new State();
    Pool::Give(Pool::Take());  // the spares come into being now
    EXPECT_EQ(Pool::spares(), 1u);
  }).join();
}

}  // namespace
}  // namespace unloadkv
