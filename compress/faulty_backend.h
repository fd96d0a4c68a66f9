// FaultyBackend: wraps any Backend and injects the failures a storage stack must
// survive. Every test of a layer above can run on it.
//
// Model. The wrapper behaves like a drive with a volatile write cache: writes and trims
// land in the cache and reach the wrapped backend only when a flush completes. Crash()
// is a power cut: the cache is dropped (or, with a seed, a random subset of its blocks
// reaches the media first, which also tears multi-block writes), and the wrapper then
// refuses I/O until Restart(). What was flushed is always on the wrapped backend, so a
// layer reopened on it after a crash sees exactly what a real drive would guarantee.
//
// Faults (all may be combined; each one injected is counted in stats()):
//   - FailStop(): the device is gone; every later operation fails with IoError.
//   - FailNthOp(n): the n-th operation from now (1 = the next) fails with IoError.
//   - FailRange(lba, count, ops): reads and/or writes touching the range fail with IoError.
//   - FlipBit(lba, bit): flips one bit of the stored block (cache or media), silently.
//   - TearNextWrite(keep): the next multi-block write stores only its first `keep` blocks
//     and fails with IoError.
//   - SetLatency(ns): each operation completes no sooner than ns after submission.
//   - CrashAfterOps(n): a power cut as the n-th operation from now starts.
//   - ReorderWrites(true, hold_ns): each write is in flight for hold_ns; a Poll(true)
//     then lands every write held, newest first — as io_uring's workers or an NBD server
//     may, since neither orders writes in flight together. (A poll that does not wait
//     lands none.)
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "compress/backend.h"
#include "compress/completion_queue.h"

namespace eraid {

struct FaultStats {
  uint64_t reads = 0, writes = 0, trims = 0, flushes = 0;
  uint64_t injected_errors = 0;  // operations failed on purpose
  uint64_t bit_flips = 0;
  uint64_t torn_writes = 0;
  uint64_t crashes = 0;
  uint64_t dropped_blocks = 0;  // cached blocks lost to crashes
};

// Several FaultyBackends that lose power together: a crash armed on the domain happens as
// its n-th operation (counted across all members) starts, and every member is then off.
class PowerDomain {
 public:
  void CrashAfterOps(uint64_t n, std::optional<uint64_t> seed = std::nullopt) {
    seed_ = seed;
    countdown_.store(n);
    cut_.store(false);
  }
  bool cut() const { return cut_.load(); }
  std::optional<uint64_t> seed() const { return seed_; }
  // Counts one operation; true once the power is cut.
  bool Tick() {
    uint64_t c = countdown_.load();
    while (c > 0 && !countdown_.compare_exchange_weak(c, c - 1)) {
    }
    if (c == 1) cut_.store(true);
    return cut_.load();
  }
  void Disarm() {
    countdown_.store(0);
    cut_.store(false);
  }

 private:
  std::atomic<uint64_t> countdown_{0};
  std::atomic<bool> cut_{false};
  std::optional<uint64_t> seed_;
};

class FaultyBackend final : public Backend {
 public:
  enum OpMask : uint8_t { kReads = 1, kWrites = 2, kReadsAndWrites = 3 };

  // Does not own `inner`, which must outlive the wrapper.
  explicit FaultyBackend(Backend& inner, const Clock& clock = SystemClock::Default());

  uint64_t capacity_blocks() const override { return inner_.capacity_blocks(); }
  uint32_t queue_depth() const override { return inner_.queue_depth(); }
  std::string name() const override { return "faulty(" + inner_.name() + ")"; }

  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  size_t Poll(bool wait) override;
  size_t in_flight() const override;
  Status FlashAlloc(Lba lba, uint64_t count_blocks) override;
  void Prefetch(std::span<const Lba> blocks) override { inner_.Prefetch(blocks); }
  std::optional<RangeUsage> Usage(Lba lba, uint64_t count_blocks) const override {
    return inner_.Usage(lba, count_blocks);
  }

  void FailStop();
  void FailNthOp(uint64_t n);
  void FailRange(Lba lba, uint64_t count_blocks, OpMask ops);
  void ClearFaults();  // undoes FailStop/FailNthOp/FailRange/TearNextWrite/latency
  Status FlipBit(Lba lba, uint32_t bit_index);
  void TearNextWrite(uint32_t keep_blocks);
  void SetLatency(uint64_t latency_ns);
  void ReorderWrites(bool on, uint64_t hold_ns = 200'000);

  // Power cut. With no seed every cached block is lost; with a seed each cached block
  // independently survives with probability 1/2 (printed seeds make this replayable).
  void Crash(std::optional<uint64_t> seed = std::nullopt);
  // Power cut in which exactly the cached blocks `survives` picks reach the media: one
  // chosen ordering of the cache's writes, the worst case for an invariant (say, the
  // erase marks kept and the writes they relied on lost).
  // `data` is the cached block, or empty for a trimmed one.
  using Survives = std::function<bool(Lba lba, std::span<const std::byte> data)>;
  void CrashKeeping(const Survives& survives);
  // Arms a crash that happens as the n-th operation from now (1 = the next) starts: that
  // operation and every later one fail with Aborted until Restart().
  void CrashAfterOps(uint64_t n, std::optional<uint64_t> seed = std::nullopt);
  // Power back on: the device serves again, with only what reached the media.
  void Restart();
  bool crashed() const;
  // Joins a power domain (not owned; must outlive the wrapper).
  void JoinPowerDomain(PowerDomain* domain);

  uint64_t cached_blocks() const;
  FaultStats stats() const;

 private:
  // A cached block: data, or nullopt for a trimmed block.
  using CachedBlock = std::optional<std::vector<std::byte>>;

  // Returns an injected error for this operation, if any. REQUIRES: mu_ held.
  Status CheckFaultLocked(bool is_read, bool is_write, Lba lba, uint64_t count_blocks);
  void Complete(IoCallback done, Status s);
  void DoWrite(Lba lba, std::span<const std::byte> buf, IoCallback done);
  // Lands the writes held by ReorderWrites, newest first.
  void LandHeldWrites(bool wait);
  // Writes cached blocks to the wrapped backend. REQUIRES: mu_ held.
  Status DestageLocked(const std::map<uint64_t, CachedBlock>& blocks);
  void CrashLocked(std::optional<uint64_t> seed);
  void CrashKeepingLocked(const Survives& survives);

  Backend& inner_;
  CompletionQueue completions_;
  mutable std::mutex mu_;
  std::map<uint64_t, CachedBlock> cache_;
  bool failed_ = false;
  bool crashed_ = false;
  uint64_t fail_countdown_ = 0;   // 0: off
  uint64_t crash_countdown_ = 0;  // 0: off
  std::optional<uint64_t> crash_seed_;
  PowerDomain* domain_ = nullptr;
  struct RangeFault {
    uint64_t lba, count;
    OpMask ops;
  };
  std::vector<RangeFault> range_faults_;
  uint32_t tear_keep_blocks_ = 0;
  bool tear_armed_ = false;
  uint64_t latency_ns_ = 0;
  bool reorder_ = false;
  struct HeldWrite {
    Lba lba;
    std::vector<std::byte> data;
    IoCallback done;
    uint64_t submitted_ns;
  };
  std::vector<HeldWrite> held_;  // oldest first
  uint64_t hold_ns_ = 0;
  FaultStats stats_;
};

}  // namespace eraid
