#include "scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/thread_priority.h"

namespace eraid {

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kElastic:
      return "elastic";
    case Policy::kRaid5:
      return "raid5";
    case Policy::kRaid10:
      return "raid10";
    case Policy::kManual:
      return "manual";
  }
  return "?";
}

Result<Policy> ParsePolicy(const std::string& name) {
  if (name == "elastic") return Policy::kElastic;
  if (name == "raid5") return Policy::kRaid5;
  if (name == "raid10") return Policy::kRaid10;
  if (name == "manual") return Policy::kManual;
  return Status::InvalidArgument("policy must be elastic, raid5, raid10 or manual, not '" + name +
                                 "'");
}

PhysicalUse DrivesPhysicalUse(const std::vector<std::unique_ptr<CompressedDrive>>& drives) {
  PhysicalUse u;
  for (const auto& d : drives) {
    if (!d) continue;                 // a drive that was never reached (tools/array_dir.cc)
    u.used_bytes += d->live_bytes();  // lock-free: asked in the volume's write path
    u.flash_bytes += d->usable_bytes();
  }
  return u;
}

namespace {
// Idle segments (a decayed score under one read) fill at most this share of the budget:
// the rest is kept for hot ones.
constexpr double kColdShare = 0.9;
constexpr double kIdleScore = 1.0;
// A RAID5 segment displaces a RAID10 one only if it is this many times as dense.
constexpr double kSwapRatio = 2.0;
// ... and if the difference is beyond counting noise: the scores are sums of (decayed)
// Poisson counts, so a difference under kSwapSigmas standard deviations may be chance.
// At full speed scores run to thousands and only the ratio matters; at a few reads per
// segment a second this keeps cold segments from trading places on luck.
constexpr double kSwapSigmas = 3.0;

// Whether a RAID5 segment of density `hot` (accesses per block, `blocks` written) should
// displace a RAID10 one of density `cold`. Both scores are taken at the RAID5 one's size.
bool WorthASwap(double hot, double cold, double blocks) {
  const double a = hot * blocks, b = cold * blocks;
  return hot >= kSwapRatio * cold && a - b >= kSwapSigmas * std::sqrt(a + b);
}

// Promotions must fit within this share of the budget, demotions start above all of it:
// a band of 1% in which physical use may wander (writes, drive GC) without a segment
// being mirrored and demoted back in turn.
constexpr double kFitShare = 0.99;

// The traffic window births are decided by: at least this long, and holding at least
// kWindowSegments segments' worth of blocks (or kWindowMaxNs long, whatever it holds).
constexpr uint64_t kWindowNs = 2'000'000'000, kWindowMaxNs = 10'000'000'000;
constexpr uint64_t kWindowSegments = 4;
// The write-churn allowance saves up at most this many segments' worth of conversions:
// with 16, a 70/30 mixed load spent what its fill had saved, 14 MiB moved in 20 s for 18
// MiB written.
constexpr double kAllowanceCapSegments = 2;
}  // namespace

Scheduler::Scheduler(ElasticArray& array, LogVolume& volume, std::function<PhysicalUse()> physical,
                     const SchedulerOptions& options, const Clock& clock)
    : array_(array),
      volume_(volume),
      physical_(std::move(physical)),
      options_(options),
      clock_(clock),
      hot_(array.geometry().segments, options.hotness, clock.NowNanos()),
      busy_(array.geometry().segments, false),
      free_mirror_(array.geometry().segments, false),
      last_refill_ns_(clock.NowNanos()) {
  stats_.throttle_bytes_per_sec = options_.rate_bytes_per_sec;
  volume_.SetListener(this);
}

Scheduler::~Scheduler() {
  Stop();
  volume_.SetListener(nullptr);
}

SegmentScheme Scheduler::SchemeForNewSegment() {
  SegmentScheme s = SegmentScheme::kRaid5;
  if (options_.policy == Policy::kRaid10 || options_.policy == Policy::kElastic) {
    // Born RAID10 only with room for the worst case (incompressible, mirrored) to spare.
    const PhysicalUse use = physical_();
    const double budget = options_.beta * double(use.flash_bytes);
    const double used = double(use.used_bytes);
    over_budget_ = used > budget;
    const double worst = 2.0 * double(BlocksToBytes(array_.geometry().segment_positions()));
    if (options_.policy == Policy::kRaid10) {
      if (used + worst <= budget) s = SegmentScheme::kRaid10;
    } else if (ReadsKnownToDominate() || degraded_.load(std::memory_order_relaxed)) {
      // Elastic: only while reads are known to dominate (a mirror writes every block
      // twice, a RAID5 row 1 + 1/n times: under writes RAID5 is the faster level; before
      // the first window is measured, a birth is a write) or a device has failed (then a
      // RAID5 block of the lost device costs n reads, the user's and GC's alike, and
      // nothing is converted until the rebuild: docs/benchmarks.md's degraded cell has
      // fixed RAID10 ahead of RAID5 in random writes too, 813 against 747 IOPS), and only
      // if the budget will still hold it after another half-life of the last window's
      // growth — not born mirrored to be demoted minutes later.
      const double horizon_s = double(options_.hotness.half_life_ms) / 1000;
      const double projected = used + growth_bytes_per_sec_.load() * horizon_s;
      if (projected + worst <= kColdShare * budget) s = SegmentScheme::kRaid10;
    }
  }
  ++(s == SegmentScheme::kRaid10 ? born_raid10_ : born_raid5_);
  return s;
}

bool Scheduler::SpacePressure() {
  // Near or over the budget the drives' counters are read after every write (~1 us);
  // with more than 5% of the flash to spare, every 64th write is enough. Once exceeded,
  // the log collects until use is 2% of the flash below the budget, so it does not collect
  // again after every single write.
  if (!over_budget_ && far_from_budget_ && ++pressure_calls_ % 64 != 0) return false;
  // Rows the log filled are written after its lock (docs/raid.md): the drives count them
  // only then, and GC inside a write would stop short of the budget by what is queued.
  // (Far from the budget, a few rows do not matter, and the check runs under the volume
  // lock.)
  if (!far_from_budget_ || over_budget_) volume_.WriteRowsNow();
  const PhysicalUse use = physical_();
  const double budget = options_.beta * double(use.flash_bytes);
  const double used = double(use.used_bytes);
  over_budget_ = over_budget_ ? used > budget - 0.02 * double(use.flash_bytes) : used > budget;
  far_from_budget_ = used < budget - 0.05 * double(use.flash_bytes);
  if (!over_budget_) return false;
  // Over the budget with mirrored segments to demote: a worker demotes them, least dense
  // first, and the log is not made to collect — it would move live blocks of segments
  // with little garbage to make room for mirrors. Only as use nears the flash (half way
  // from β to all of it) does the log collect as well.
  if (options_.policy != Policy::kManual && demotable_bytes_.load(std::memory_order_relaxed) > 0) {
    const double flash = double(use.flash_bytes);
    if (used < budget + 0.5 * std::max(0.0, flash - budget)) {
      gc_spared_.fetch_add(1, std::memory_order_relaxed);
      if (!demote_wanted_.exchange(true)) wake_cv_.notify_one();
      return false;
    }
  }
  return true;
}

void Scheduler::MeasureTrafficLocked(const PhysicalUse& use) {
  const uint64_t now = clock_.NowNanos();
  // Blocks written, the user's and GC's (counted per block: counted per birth, a segment's
  // worth at a time, a 70/30 mixed load looked read-only in every window without a birth).
  const EngineStats engine = volume_.stats().engine;
  const uint64_t written_all = engine.user_blocks + engine.gc_blocks;
  const uint64_t segment_blocks = array_.geometry().segment_positions();
  const double segment_bytes = double(BlocksToBytes(segment_blocks));
  if (engine.user_blocks > allowance_user_blocks_) {  // earned by the user's writes
    allowance_ += options_.conversion_share *
                  double(BlocksToBytes(engine.user_blocks - allowance_user_blocks_));
    allowance_ = std::min(allowance_, kAllowanceCapSegments * segment_bytes);
  }
  allowance_user_blocks_ = engine.user_blocks;
  const uint64_t reads = reads_.load(std::memory_order_relaxed);
  if (window_start_ns_ == 0 || now < window_start_ns_) {
    window_start_ns_ = now;
    window_reads_ = reads;
    window_written_ = written_all;
    window_used_ = use.used_bytes;
    return;
  }
  const uint64_t elapsed = now - window_start_ns_;
  const uint64_t read = reads - window_reads_;
  const uint64_t written = written_all - window_written_;
  if (elapsed < kWindowNs ||
      (elapsed < kWindowMaxNs && read + written < kWindowSegments * segment_blocks))
    return;
  // No traffic at all: an idle array, not one under write churn.
  write_share_ = read + written == 0 ? 0.0 : double(written) / double(read + written);
  const double growth =
      std::max(0.0, (double(use.used_bytes) - double(window_used_)) / (double(elapsed) / 1e9));
  growth_bytes_per_sec_ = 0.5 * growth_bytes_per_sec_.load() + 0.5 * growth;
  window_start_ns_ = now;
  window_reads_ = reads;
  window_written_ = written_all;
  window_used_ = use.used_bytes;
}

bool Scheduler::AffordableLocked(uint64_t bytes) const {
  return options_.conversion_share <= 0 || !WriteChurn() || allowance_ >= double(bytes);
}

void Scheduler::Refill() {
  const uint64_t now = clock_.NowNanos();
  const uint64_t rate = stats_.throttle_bytes_per_sec;
  if (rate == 0) {
    tokens_ = 0;
  } else {
    tokens_ += double(now - last_refill_ns_) * double(rate) / 1e9;
    // Bursts are bounded by a tenth of a second's worth (or one segment, if larger).
    const double cap =
        std::max(double(rate) / 10, double(BlocksToBytes(array_.geometry().segment_positions())));
    tokens_ = std::min(tokens_, cap);
  }
  last_refill_ns_ = now;
}

SegmentInfo Scheduler::InfoLocked(SegmentId s, uint64_t devices) {
  if (info_cache_.size() <= s.value) info_cache_.resize(array_.geometry().segments);
  CachedInfo& c = info_cache_[s.value];
  const SegmentInfo now = array_.segment_info(s, /*usage=*/false);
  if (!now.sealed || now.generation != c.generation || now.scheme != c.scheme ||
      devices != c.devices || !c.info.sealed) {
    c = CachedInfo{now.generation, now.scheme, devices, array_.segment_info(s)};
  }
  return c.info;
}

std::optional<Scheduler::Candidate> Scheduler::PickLocked(const PhysicalUse& use) {
  const double budget = options_.beta * double(use.flash_bytes);
  const double used = double(use.used_bytes);
  stats_.budget_use = budget > 0 ? used / budget : 0;
  over_budget_ = used > budget;
  std::vector<Seen> raid5, raid10;
  if (auto free = SurveyLocked(&raid5, &raid10)) return free;
  switch (options_.policy) {
    case Policy::kManual:
      return std::nullopt;
    case Policy::kRaid5:
      if (!raid10.empty())
        return Candidate{raid10.front().s, SegmentScheme::kRaid5, raid10.front().bytes, false};
      return std::nullopt;
    case Policy::kRaid10:
      for (const Seen& c : raid5) {
        if (used + c.delta <= budget) return Candidate{c.s, SegmentScheme::kRaid10, c.bytes, false};
      }
      return std::nullopt;
    case Policy::kElastic:
      break;
  }
  return ElasticPickLocked(raid5, raid10, used, budget);
}

std::optional<Scheduler::Candidate> Scheduler::SurveyLocked(std::vector<Seen>* raid5,
                                                            std::vector<Seen>* raid10) {
  const double n = array_.geometry().data_devices();
  double demotable = 0;  // physical bytes demoting every RAID10 candidate would free
  const auto sealed = volume_.SealedSegments();
  uint64_t devices = 0;  // a fingerprint of the device states
  for (const DeviceStats& d : array_.stats().devices) devices = devices * 7 + uint64_t(d.state) + 1;
  std::vector<bool> is_sealed(free_mirror_.size(), false);
  for (const auto& [s, gp] : sealed) is_sealed[s.value] = true;
  for (size_t i = 0; i < free_mirror_.size(); ++i) {
    if (!is_sealed[i]) free_mirror_[i] = false;  // freed (and maybe reborn) since
  }
  for (const auto& [s, gp] : sealed) {
    if (busy_[s.value]) continue;
    if (gp >= options_.gc_skip_gp) {
      ++stats_.skipped_for_gc;
      continue;
    }
    const SegmentInfo info = InfoLocked(s, devices);
    if (!info.sealed || info.frontier == 0) continue;
    const uint64_t bytes = BlocksToBytes(info.frontier);
    const double a_usr = info.alpha_usr > 0 ? info.alpha_usr : 1.0;
    // A RAID10 segment has no parity to measure: parity of data compresses about as the
    // data does, or worse — so this is the saving's lower bound's friendly estimate.
    const double a_pty = info.alpha_pty > 0 ? info.alpha_pty : a_usr;
    const double data_phys = double(bytes) / a_usr;
    const double delta = data_phys - double(bytes) / (n * a_pty);
    const double score = hot_.read_score(s.value);
    Seen seen{
        s,         info,  score, score / double(info.frontier), hot_.invalidation_score(s.value),
        data_phys, delta, bytes};
    if (info.scheme == SegmentScheme::kRaid5) {
      // The autonomous rule: mirroring is free, so it is done first and always (but raid5),
      // as far as the write-churn allowance goes.
      if (options_.policy != Policy::kRaid5 && options_.policy != Policy::kManual &&
          info.alpha_usr > 0 && info.alpha_pty > 0 && info.alpha_usr >= n * info.alpha_pty) {
        if (AffordableLocked(bytes)) return Candidate{s, SegmentScheme::kRaid10, bytes, true};
        ++stats_.over_allowance;
      }
      raid5->push_back(seen);
    } else if (info.scheme == SegmentScheme::kRaid10 && !free_mirror_[s.value]) {
      raid10->push_back(seen);
      demotable += std::max(0.0, seen.delta);
    }
  }
  demotable_bytes_.store(static_cast<uint64_t>(demotable), std::memory_order_relaxed);
  return std::nullopt;
}

std::optional<Scheduler::Candidate> Scheduler::ElasticPickLocked(std::vector<Seen>& raid5,
                                                                 std::vector<Seen>& raid10,
                                                                 double used, double budget) {
  // Densest in reads first among RAID5 segments, least dense first among RAID10 ones —
  // of those, the least rewritten first (GC comes for the others: its rewrite demotes
  // them for free); equal densities (idle segments) by index, so the order is stable from
  // pass to pass.
  std::sort(raid5.begin(), raid5.end(), [](const Seen& a, const Seen& b) {
    return a.density != b.density ? a.density > b.density : a.s.value < b.s.value;
  });
  std::sort(raid10.begin(), raid10.end(), [](const Seen& a, const Seen& b) {
    if (a.density != b.density) return a.density < b.density;
    return a.rewrites != b.rewrites ? a.rewrites < b.rewrites : a.s.value < b.s.value;
  });
  // Over budget: RAID10 segments go back to RAID5, least dense first (space comes before
  // cooldowns, second chances and the allowance).
  if (used > budget) {
    if (!raid10.empty()) {
      Candidate c{raid10.front().s, SegmentScheme::kRaid5, raid10.front().bytes, false};
      c.for_space = true;
      return c;
    }
    return std::nullopt;
  }
  // Under budget: RAID5 segments that were accessed at all become RAID10, densest first,
  // while they fit. Past that, the densest ones displace the least dense RAID10 ones,
  // pair by pair, but only where the RAID5 one is kSwapRatio times as dense (hysteresis:
  // near-equal segments do not trade places on noise), and only once the RAID10 one has
  // had its second chance: every victim of this pass is marked now, and demoted if it is
  // still a victim in a later epoch.
  size_t victim = 0;
  bool waiting = false;
  for (const Seen& c : raid5) {
    if (c.score < kIdleScore) break;  // the rest are idle
    if (hot_.InCooldown(c.s.value)) continue;
    // A mirror pays for itself in the reads it serves before rewrites empty the segment
    // (and GC moves what is left): read less often than overwritten, it would not.
    if (c.score < c.rewrites) continue;
    if (!AffordableLocked(c.bytes)) {
      ++stats_.over_allowance;
      break;
    }
    // Under write churn, promotions stop short of the budget by the idle segments' margin:
    // the writes' growth would push a mirror filled to the last percent out again (a
    // promotion, then a demotion for space, in turn).
    if (used + c.delta <= (WriteChurn() ? kColdShare : kFitShare) * budget)
      return Candidate{c.s, SegmentScheme::kRaid10, c.bytes, false};
    while (victim < raid10.size() && hot_.InCooldown(raid10[victim].s.value)) ++victim;
    if (victim == raid10.size() ||
        !WorthASwap(c.density, raid10[victim].density, double(c.info.frontier)) ||
        !AffordableLocked(c.bytes + raid10[victim].bytes))
      break;
    const Seen& v = raid10[victim++];
    switch (hot_.OfferDemotion(v.s.value)) {
      case SegmentHotness::Offer::kDemote:
        return Candidate{v.s, SegmentScheme::kRaid5, v.bytes, false, true};
      case SegmentHotness::Offer::kMarked:
        ++stats_.second_chances;
        [[fallthrough]];
      case SegmentHotness::Offer::kWaiting:
        waiting = true;
    }
  }
  if (waiting) return std::nullopt;  // the room is promised to the swaps
  // Idle RAID5 segments too, within a share of the budget that leaves room for hot ones —
  // but only once the traffic is known not to be write churn: there they would serve no
  // reads for what they cost (and at a fill's start, before its first window, a birth
  // is a write).
  if (!ReadsKnownToDominate()) return std::nullopt;
  for (auto it = raid5.rbegin(); it != raid5.rend(); ++it) {
    const Seen& c = *it;
    if (c.score >= kIdleScore) break;
    if (!hot_.InCooldown(c.s.value) && used + c.delta <= kColdShare * budget) {
      return Candidate{c.s, SegmentScheme::kRaid10, c.bytes, false};
    }
  }
  return std::nullopt;
}

void Scheduler::MaybeCloseEpochLocked() {
  const bool closed = hot_.MaybeCloseEpoch(clock_.NowNanos(), [this](uint32_t s) {
    const SegmentInfo i = array_.segment_info(SegmentId(s), /*usage=*/false);
    return SegmentHotness::SegmentNow{i.scheme == SegmentScheme::kRaid10, i.generation};
  });
  if (!closed) return;
  stats_.epochs = hot_.epoch();
  stats_.hot_read_coverage = hot_.read_coverage();
  stats_.last_epoch_reads = hot_.last_epoch_reads();
}

Scheduler::SegmentHeat Scheduler::Heat(SegmentId s) const {
  std::lock_guard lock(decide_mu_);
  const float score = hot_.score(s.value);
  const uint32_t frontier = array_.segment_info(s, /*usage=*/false).frontier;
  return SegmentHeat{score, frontier ? double(score) / double(frontier) : 0.0};
}

Result<uint32_t> Scheduler::Step() {
  const PhysicalUse first_use = physical_();
  std::unique_lock lock(decide_mu_);
  ++stats_.steps;
  MaybeCloseEpochLocked();
  MeasureTrafficLocked(first_use);
  Refill();
  // (stats() scans every segment: under the manual policy, which neither converts nor
  // decides births by it, it is not asked.)
  const bool degraded_now = options_.policy != Policy::kManual && array_.stats().degraded;
  degraded_.store(degraded_now, std::memory_order_relaxed);
  if (degraded_now) {
    ++stats_.degraded_steps;  // frozen until every device is healthy (the header says why)
    // Nothing will be demoted meanwhile: space pressure must make the log collect.
    demotable_bytes_.store(0, std::memory_order_relaxed);
    return 0u;
  }
  uint32_t done = 0;
  std::vector<uint32_t> tried;
  while (done < options_.max_conversions_per_step) {
    if (stats_.throttle_bytes_per_sec > 0 && tokens_ <= 0) break;
    lock.unlock();
    const PhysicalUse use = physical_();
    // A device may have failed since the step began (or during its last conversion): the
    // freeze holds from then on, not from the next step. A demotion for space begun
    // degraded read every block of the failed drive under the array's exclusive lock, and
    // degraded user reads fell to half of what they were with nothing mirrored.
    const bool degraded = options_.policy != Policy::kManual && array_.stats().degraded;
    lock.lock();
    if (degraded) {
      demotable_bytes_.store(0, std::memory_order_relaxed);
      break;
    }
    for (uint32_t s : tried) busy_[s] = true;  // not again in this step
    auto c = PickLocked(use);
    for (uint32_t s : tried) busy_[s] = false;
    if (!c) break;
    tried.push_back(c->s.value);
    busy_[c->s.value] = true;
    lock.unlock();
    Status s = array_.Convert(c->s, c->to);
    lock.lock();
    busy_[c->s.value] = false;
    if (!s.ok()) {
      // Freed by GC meanwhile, or no longer sealed: not an error of the scheduler's.
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kBusy) continue;
      return s;
    }
    if (stats_.throttle_bytes_per_sec > 0) tokens_ -= double(c->bytes);
    // Spent from the write-churn allowance (demotions for space too: they may overdraw it,
    // and promotions wait until writes have earned it back).
    if (WriteChurn()) allowance_ -= double(c->bytes);
    if (c->for_space) ++stats_.demotions_for_space;
    stats_.bytes_moved += c->bytes;
    ++(c->to == SegmentScheme::kRaid10 ? stats_.to_raid10 : stats_.to_raid5);
    if (c->swap) ++stats_.swaps;
    hot_.Converted(c->s.value);
    if (c->autonomous) {
      ++stats_.autonomous;
      free_mirror_[c->s.value] = true;
    }
    ++done;
  }
  return done;
}

void Scheduler::set_rate(uint64_t bytes_per_sec) {
  std::lock_guard lock(decide_mu_);
  Refill();
  stats_.throttle_bytes_per_sec = bytes_per_sec;
  tokens_ = std::min(tokens_, 0.0);
}

void Scheduler::Start() {
  stop_ = false;
  for (uint32_t w = 0; w < std::max(1u, options_.workers); ++w) {
    workers_.emplace_back([this] {
      NameThisThread("eraid-convert");
      LowerThisThreadPriority();  // conversions yield the cores to user I/O
      while (!stop_) {
        auto r = Step();
        double wait_ms = double(options_.idle_sleep_ms);
        if (r.ok() && *r > 0) wait_ms = 0;
        {
          std::lock_guard lock(decide_mu_);
          const uint64_t rate = stats_.throttle_bytes_per_sec;
          if (rate > 0 && tokens_ <= 0) wait_ms = std::max(1.0, -tokens_ / double(rate) * 1e3);
        }
        if (wait_ms > 0) {
          std::unique_lock lock(wake_mu_);
          // Woken early by SpacePressure: over the budget, demotions are due now.
          wake_cv_.wait_for(lock, std::chrono::duration<double, std::milli>(wait_ms),
                            [&] { return stop_.load() || demote_wanted_.exchange(false); });
        }
      }
    });
  }
}

void Scheduler::Stop() {
  {
    std::lock_guard lock(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(decide_mu_);
  SchedulerStats s = stats_;
  s.born_raid10 = born_raid10_;
  s.born_raid5 = born_raid5_;
  s.gc_spared = gc_spared_.load(std::memory_order_relaxed);
  s.write_share = write_share_.load(std::memory_order_relaxed);
  s.allowance_bytes = allowance_;
  return s;
}

}  // namespace eraid
