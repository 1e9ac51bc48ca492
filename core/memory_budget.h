// Bytes that work in flight may hold at once (the sequential re-encodings' memory). A claim waits
// until it fits beside the claims held, or until none is held, so that one larger than the whole
// budget runs alone and never fails. Claims are granted in the order they are made: a large one
// at the head is not passed by smaller ones forever.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

namespace fid::core {

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t budget) : budget_(budget) {}

  // Bytes held until the claim is destroyed.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), bytes_(o.bytes_) {}
    Claim& operator=(Claim&& o) noexcept {
      if (this != &o) {
        release();
        owner_ = std::exchange(o.owner_, nullptr);
        bytes_ = o.bytes_;
      }
      return *this;
    }
    ~Claim() { release(); }

   private:
    friend class MemoryBudget;
    Claim(MemoryBudget* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    void release() {
      if (owner_) std::exchange(owner_, nullptr)->release(bytes_);
    }
    MemoryBudget* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Waits for its turn and for room, then holds `bytes`.
  Claim claim(uint64_t bytes) {
    std::unique_lock lock(mu_);
    const uint64_t ticket = next_ticket_++;
    if (ticket != serving_ || !fits(bytes)) {
      ++waits_;
      cv_.wait(lock, [&] { return ticket == serving_ && fits(bytes); });
    }
    ++serving_;
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    cv_.notify_all();  // the next in line may fit too
    return Claim(this, bytes);
  }

  uint64_t budget() const { return budget_; }
  uint64_t used() const { return locked(used_); }
  uint64_t peak() const { return locked(peak_); }
  uint64_t waits() const { return locked(waits_); }

 private:
  bool fits(uint64_t bytes) const { return used_ == 0 || used_ + bytes <= budget_; }
  void release(uint64_t bytes) {
    std::lock_guard lock(mu_);
    used_ -= bytes;
    cv_.notify_all();
  }
  uint64_t locked(const uint64_t& v) const {
    std::lock_guard lock(mu_);
    return v;
  }

  const uint64_t budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 0, serving_ = 0;
  uint64_t used_ = 0, peak_ = 0, waits_ = 0;
};

}  // namespace fid::core
