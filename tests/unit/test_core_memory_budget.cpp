// Unit tests for core::MemoryBudget: claims that fit run at once, one that does not waits for a
// release, one larger than the whole budget runs alone, and claims are granted in order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/memory_budget.h"

namespace fid::core {
namespace {

// Polls (bounded) until `waits` claims are waiting.
bool waiting(const MemoryBudget& b, uint64_t waits) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b.waits() < waits) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(MemoryBudget, ClaimsThatFitRunAtOnceAndTheirBytesAreCounted) {
  MemoryBudget b(100);
  {
    MemoryBudget::Claim one = b.claim(60);
    MemoryBudget::Claim two = b.claim(40);
    EXPECT_EQ(b.used(), 100u);
    MemoryBudget::Claim moved = std::move(two);
    EXPECT_EQ(b.used(), 100u);
  }
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.peak(), 100u);
  EXPECT_EQ(b.waits(), 0u);
}

TEST(MemoryBudget, AClaimThatDoesNotFitWaitsForARelease) {
  MemoryBudget b(100);
  std::optional<MemoryBudget::Claim> held(b.claim(70));
  std::atomic<bool> granted{false};
  std::thread t([&] {
    MemoryBudget::Claim c = b.claim(50);
    granted = true;
    EXPECT_LE(b.used(), 100u);
  });
  ASSERT_TRUE(waiting(b, 1));
  EXPECT_FALSE(granted);
  held.reset();
  t.join();
  EXPECT_TRUE(granted);
  EXPECT_EQ(b.peak(), 70u);
}

TEST(MemoryBudget, AClaimOverTheWholeBudgetRunsAloneNeverFails) {
  MemoryBudget b(100);
  std::optional<MemoryBudget::Claim> small(b.claim(10));
  std::atomic<bool> granted{false};
  std::thread t([&] {
    MemoryBudget::Claim huge = b.claim(500);
    granted = true;
    EXPECT_EQ(b.used(), 500u);  // alone
  });
  ASSERT_TRUE(waiting(b, 1));
  EXPECT_FALSE(granted);
  small.reset();
  t.join();
  EXPECT_TRUE(granted);
  EXPECT_EQ(b.peak(), 500u);
}

// A large claim at the head of the line is not passed by a small one made after it, though the
// small one would fit beside what is held.
TEST(MemoryBudget, ClaimsAreGrantedInTheOrderTheyAreMade) {
  MemoryBudget b(100);
  std::optional<MemoryBudget::Claim> held(b.claim(60));
  std::vector<int> order;
  std::mutex mu;
  auto record = [&](int who) {
    std::lock_guard lock(mu);
    order.push_back(who);
  };
  std::thread large([&] {
    MemoryBudget::Claim c = b.claim(90);
    record(1);
  });
  ASSERT_TRUE(waiting(b, 1));
  std::thread small([&] {
    MemoryBudget::Claim c = b.claim(20);  // fits beside the 60 held, not beside the large one's 90
    record(2);
  });
  ASSERT_TRUE(waiting(b, 2));
  EXPECT_TRUE(order.empty());
  held.reset();
  large.join();
  small.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace fid::core
