#include "compress/faulty_backend.h"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace eraid {

FaultyBackend::FaultyBackend(Backend& inner, const Clock& clock)
    : inner_(inner), completions_(clock) {}

void FaultyBackend::Complete(IoCallback done, Status s) {
  uint64_t ready = 0;
  {
    std::lock_guard lock(mu_);
    if (latency_ns_ > 0) ready = completions_.clock().NowNanos() + latency_ns_;
  }
  completions_.Push(std::move(done), std::move(s), ready);
}

Status FaultyBackend::CheckFaultLocked(bool is_read, bool is_write, Lba lba, uint64_t count) {
  if (crash_countdown_ > 0 && --crash_countdown_ == 0) CrashLocked(crash_seed_);
  if (domain_ != nullptr && !crashed_ && domain_->Tick()) CrashLocked(domain_->seed());
  if (crashed_) return Status::Aborted(name() + ": device is powered off (crashed)");
  if (failed_) {
    ++stats_.injected_errors;
    return Status::IoError(name() + ": device failed");
  }
  if (fail_countdown_ > 0 && --fail_countdown_ == 0) {
    ++stats_.injected_errors;
    return Status::IoError(name() + ": injected error on this operation");
  }
  for (const auto& f : range_faults_) {
    bool kind = (is_read && (f.ops & kReads)) || (is_write && (f.ops & kWrites));
    if (kind && lba.value < f.lba + f.count && f.lba < lba.value + count) {
      ++stats_.injected_errors;
      return Status::IoError(name() + ": injected error in lba range");
    }
  }
  return Status::Ok();
}

void FaultyBackend::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  Status s = CheckExtent(lba, buf.size());
  if (s.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.reads;
    s = CheckFaultLocked(true, false, lba, BytesToBlocks(buf.size()));
    if (s.ok()) s = inner_.Read(lba, buf);
    if (s.ok()) {
      for (uint64_t i = 0; i < BytesToBlocks(buf.size()); ++i) {
        auto it = cache_.find(lba.value + i);
        if (it == cache_.end()) continue;
        std::byte* dst = buf.data() + BlocksToBytes(i);
        if (it->second)
          std::memcpy(dst, it->second->data(), kBlockSize);
        else
          std::memset(dst, 0, kBlockSize);
      }
    }
  }
  Complete(std::move(done), std::move(s));
}

void FaultyBackend::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  {
    std::lock_guard lock(mu_);
    if (reorder_) {
      held_.push_back({lba, std::vector<std::byte>(buf.begin(), buf.end()), std::move(done),
                       completions_.clock().NowNanos()});
      return;
    }
  }
  DoWrite(lba, buf, std::move(done));
}

void FaultyBackend::ReorderWrites(bool on, uint64_t hold_ns) {
  {
    std::lock_guard lock(mu_);
    reorder_ = on;
    hold_ns_ = hold_ns;
  }
  if (!on) LandHeldWrites(/*wait=*/false);
}

void FaultyBackend::LandHeldWrites(bool wait) {
  std::vector<HeldWrite> held;
  {
    std::unique_lock lock(mu_);
    if (held_.empty()) return;
    if (wait && reorder_) {
      // The oldest takes hold_ns to complete; whatever was submitted meanwhile is in
      // flight beside it and lands first.
      const uint64_t ready = held_.front().submitted_ns + hold_ns_;
      const uint64_t now = completions_.clock().NowNanos();
      if (now < ready) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::nanoseconds(ready - now));
        lock.lock();
      }
    }
    held.swap(held_);
  }
  for (auto it = held.rbegin(); it != held.rend(); ++it)
    DoWrite(it->lba, it->data, std::move(it->done));
}

size_t FaultyBackend::Poll(bool wait) {
  // A poll that does not wait finds them still in flight (a real device's may be).
  if (wait) LandHeldWrites(/*wait=*/true);
  return completions_.Poll(wait);
}

size_t FaultyBackend::in_flight() const {
  std::lock_guard lock(mu_);
  return completions_.size() + held_.size();
}

void FaultyBackend::DoWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  Status s = CheckExtent(lba, buf.size());
  if (s.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.writes;
    uint64_t count = BytesToBlocks(buf.size());
    uint64_t persist_blocks = 0;
    s = CheckFaultLocked(false, true, lba, count);
    if (s.ok()) {
      persist_blocks = count;
      if (tear_armed_ && count > 1) {
        tear_armed_ = false;
        ++stats_.torn_writes;
        persist_blocks = std::min<uint64_t>(count, tear_keep_blocks_);
        s = Status::IoError(name() + ": torn write");
      }
    }
    for (uint64_t i = 0; i < persist_blocks; ++i) {
      const std::byte* src = buf.data() + BlocksToBytes(i);
      cache_[lba.value + i] = std::vector<std::byte>(src, src + kBlockSize);
    }
  }
  Complete(std::move(done), std::move(s));
}

void FaultyBackend::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  Status s = CheckRange(lba, count_blocks);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    ++stats_.trims;
    s = CheckFaultLocked(false, true, lba, count_blocks);
    if (s.ok()) {
      for (uint64_t i = 0; i < count_blocks; ++i) cache_[lba.value + i] = std::nullopt;
    }
  }
  Complete(std::move(done), std::move(s));
}

Status FaultyBackend::DestageLocked(const std::map<uint64_t, CachedBlock>& blocks) {
  // Coalesce runs of consecutive cached writes (and trims) into single operations.
  auto it = blocks.begin();
  while (it != blocks.end()) {
    auto run_end = std::next(it);
    uint64_t n = 1;
    while (run_end != blocks.end() && run_end->first == it->first + n &&
           run_end->second.has_value() == it->second.has_value()) {
      ++run_end;
      ++n;
    }
    if (it->second) {
      std::vector<std::byte> data(BlocksToBytes(n));
      uint64_t i = 0;
      for (auto j = it; j != run_end; ++j, ++i) {
        std::memcpy(data.data() + BlocksToBytes(i), j->second->data(), kBlockSize);
      }
      ERAID_RETURN_IF_ERROR(inner_.Write(Lba(it->first), data));
    } else {
      ERAID_RETURN_IF_ERROR(inner_.Trim(Lba(it->first), n));
    }
    it = run_end;
  }
  return Status::Ok();
}

void FaultyBackend::SubmitFlush(IoCallback done) {
  Status s;
  {
    std::lock_guard lock(mu_);
    ++stats_.flushes;
    s = CheckFaultLocked(false, false, Lba(0), 0);
    if (s.ok()) s = DestageLocked(cache_);
    if (s.ok()) s = inner_.Flush();
    if (s.ok()) cache_.clear();
  }
  Complete(std::move(done), std::move(s));
}

Status FaultyBackend::FlashAlloc(Lba lba, uint64_t count_blocks) {
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(CheckFaultLocked(false, false, lba, 0));
  }
  return inner_.FlashAlloc(lba, count_blocks);
}

void FaultyBackend::FailStop() {
  std::lock_guard lock(mu_);
  failed_ = true;
}

void FaultyBackend::FailNthOp(uint64_t n) {
  std::lock_guard lock(mu_);
  fail_countdown_ = n;
}

void FaultyBackend::FailRange(Lba lba, uint64_t count_blocks, OpMask ops) {
  std::lock_guard lock(mu_);
  range_faults_.push_back({lba.value, count_blocks, ops});
}

void FaultyBackend::ClearFaults() {
  std::lock_guard lock(mu_);
  failed_ = false;
  fail_countdown_ = 0;
  crash_countdown_ = 0;
  range_faults_.clear();
  tear_armed_ = false;
  latency_ns_ = 0;
}

Status FaultyBackend::FlipBit(Lba lba, uint32_t bit_index) {
  if (bit_index >= kBlockSize * 8) return Status::InvalidArgument("bit index beyond the block");
  ERAID_RETURN_IF_ERROR(CheckRange(lba, 1));
  std::lock_guard lock(mu_);
  auto flip = [&](std::byte* block) {
    block[bit_index / 8] ^= static_cast<std::byte>(1u << (bit_index % 8));
  };
  auto it = cache_.find(lba.value);
  if (it != cache_.end()) {
    if (!it->second) it->second = std::vector<std::byte>(kBlockSize);
    flip(it->second->data());
  } else {
    std::vector<std::byte> block(kBlockSize);
    ERAID_RETURN_IF_ERROR(inner_.Read(lba, block));
    flip(block.data());
    ERAID_RETURN_IF_ERROR(inner_.Write(lba, block));
  }
  ++stats_.bit_flips;
  return Status::Ok();
}

void FaultyBackend::TearNextWrite(uint32_t keep_blocks) {
  std::lock_guard lock(mu_);
  tear_armed_ = true;
  tear_keep_blocks_ = keep_blocks;
}

void FaultyBackend::SetLatency(uint64_t latency_ns) {
  std::lock_guard lock(mu_);
  latency_ns_ = latency_ns;
}

void FaultyBackend::Crash(std::optional<uint64_t> seed) {
  std::lock_guard lock(mu_);
  CrashLocked(seed);
}

void FaultyBackend::CrashAfterOps(uint64_t n, std::optional<uint64_t> seed) {
  std::lock_guard lock(mu_);
  crash_countdown_ = n;
  crash_seed_ = seed;
}

void FaultyBackend::CrashKeeping(const Survives& survives) {
  std::lock_guard lock(mu_);
  CrashKeepingLocked(survives);
}

void FaultyBackend::CrashLocked(std::optional<uint64_t> seed) {
  if (!seed) {
    CrashKeepingLocked([](Lba, std::span<const std::byte>) { return false; });
    return;
  }
  std::mt19937_64 rng(*seed);
  CrashKeepingLocked([&](Lba, std::span<const std::byte>) {
    return (rng() & 1) != 0;
  });  // in LBA order, as before
}

void FaultyBackend::CrashKeepingLocked(const Survives& survives) {
  ++stats_.crashes;
  crash_countdown_ = 0;
  std::map<uint64_t, CachedBlock> survivors;
  for (auto& [lba, block] : cache_) {
    const std::span<const std::byte> data =
        block ? std::span<const std::byte>(*block) : std::span<const std::byte>();
    if (survives(Lba(lba), data)) {
      survivors.emplace(lba, std::move(block));
    } else {
      ++stats_.dropped_blocks;
    }
  }
  if (!survivors.empty()) {
    (void)DestageLocked(survivors);  // best effort: the media keeps what reached it
    (void)inner_.Flush();
  }
  cache_.clear();
  crashed_ = true;
}

void FaultyBackend::Restart() {
  std::lock_guard lock(mu_);
  crashed_ = false;
}

void FaultyBackend::JoinPowerDomain(PowerDomain* domain) {
  std::lock_guard lock(mu_);
  domain_ = domain;
}

bool FaultyBackend::crashed() const {
  std::lock_guard lock(mu_);
  return crashed_;
}

uint64_t FaultyBackend::cached_blocks() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

FaultStats FaultyBackend::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace eraid
