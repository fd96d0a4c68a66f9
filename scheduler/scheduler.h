// The conversion scheduler: the elastic in elastic RAID. It moves sealed segments between
// RAID5 and RAID10 by compressibility and hotness, under a physical-capacity budget, in the
// background and throttled (docs/scheduler.md).
//
//   - Hotness: decayed access counts per segment, ranked by density (hotness.h); the volume
//     tells it of reads and invalidations (it is the volume's VolumeListener).
//   - Compressibility: α_usr and α_pty of each segment, from the drives. The autonomous
//     rule: a RAID5 segment with α_usr >= n·α_pty costs no more as RAID10: convert it.
//   - Budget: physical use stays under β of the drives' flash. Under it, RAID5 segments
//     become RAID10 densest in reads first while they fit; one that does not fit displaces
//     the least dense RAID10 segment only if it is at least twice as dense, and only after
//     that one's second chance (it must still be the victim an epoch later). Over it,
//     RAID10 segments go back to RAID5, least dense first — and while there are such
//     segments to demote, the log is not made to collect for space (SpacePressure) unless
//     use nears the flash. A converted segment is not converted back by hotness within a
//     cooldown. Segments whose garbage proportion says GC will reclaim them soon are left
//     alone: GC's rewrite is their demotion.
//   - Never the worse choice (docs/scheduler.md, "Under write churn"): a new segment is
//     born RAID10 only while reads dominate the array's traffic and the budget will still
//     hold it once the physical growth of the last window has gone on for a half-life;
//     a segment is promoted only if it is read at least as often as it is overwritten (a
//     mirror must serve more reads than the rewrites that empty it); and while writes are
//     a real share of the traffic, conversions spend an allowance earned as a share of the
//     bytes written (conversion_share, 10%).
//   - Degraded or rebuilding arrays: no conversions at all (reading a segment to convert
//     it would go through reconstruction, and its new layout would be written without
//     redundancy); hotness keeps counting, and the scheduler resumes when every device is
//     healthy again. `eraid convert` still converts on the user's word.
//   - Throttle: a token bucket of bytes per second over the user bytes converted.
//   - Policies for comparisons: elastic (all of the above), raid5 (everything RAID5),
//     raid10 (RAID10 wherever the budget allows, hot or not), manual (the scheduler converts
//     nothing and new segments are RAID5; only `eraid convert` converts — for experiments
//     that drive conversion themselves).
//
// Step() is the unit of work and takes the clock it was given, so tests drive time by
// hand; Start() runs `workers` threads that call it.
//
// Thread-safety: the VolumeListener methods and stats() from any thread; Step() from any
// thread (steps serialise on the scheduler's decision lock).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "compress/compressed_drive.h"
#include "log/log_volume.h"
#include "raid/array.h"
#include "scheduler/hotness.h"

namespace eraid {

enum class Policy { kElastic, kRaid5, kRaid10, kManual };
const char* PolicyName(Policy p);
Result<Policy> ParsePolicy(const std::string& name);

struct SchedulerOptions {
  Policy policy = Policy::kElastic;
  double beta = 0.9;                // physical use target, as a fraction of the drives' flash
  uint64_t rate_bytes_per_sec = 0;  // user bytes converted per second; 0 = unthrottled
  uint32_t workers = 1;             // background threads (Start)
  double gc_skip_gp = 0.5;          // segments with at least this garbage proportion are GC's
  HotnessOptions hotness;           // the window and epochs of the hotness measure
  uint32_t max_conversions_per_step = 8;
  // Under write churn, conversion bytes as a share of the bytes written (0: no limit).
  double conversion_share = 0.10;
  uint64_t idle_sleep_ms = 50;  // background: pause when a step found nothing to do
};

// Physical bytes in use and available on the drives (the budget's base).
struct PhysicalUse {
  uint64_t used_bytes = 0;
  uint64_t flash_bytes = 0;
};

// The sum over the drives of an array: what the budget is measured against.
PhysicalUse DrivesPhysicalUse(const std::vector<std::unique_ptr<CompressedDrive>>& drives);

struct SchedulerStats {
  uint64_t steps = 0;
  uint64_t to_raid10 = 0, to_raid5 = 0;  // conversions this scheduler made
  uint64_t autonomous = 0;               // of to_raid10: free by the autonomous rule
  uint64_t bytes_moved = 0;              // user bytes of the converted segments
  uint64_t skipped_for_gc = 0;           // candidates left to GC
  uint64_t born_raid10 = 0, born_raid5 = 0;
  uint64_t swaps = 0;                // of to_raid5: demoted to make room for a denser one
  uint64_t second_chances = 0;       // demotions deferred by a segment's second chance
  uint64_t degraded_steps = 0;       // steps that converted nothing: a device was not healthy
  uint64_t over_allowance = 0;       // conversions left undone: the write-churn allowance was spent
  uint64_t demotions_for_space = 0;  // of to_raid5: made while over the budget
  uint64_t gc_spared = 0;      // times space pressure demoted rather than made the log collect
  double write_share = -1;     // of the last window's traffic (blocks written / all; -1: none yet)
  double allowance_bytes = 0;  // conversion bytes the write churn allows now
  uint32_t epochs = 0;         // hotness epochs closed
  double hot_read_coverage = -1;  // share of the last epoch's reads on RAID10 (-1: none yet)
  uint64_t last_epoch_reads = 0;
  double budget_use = 0;  // physical use / (β · flash), last seen
  uint64_t throttle_bytes_per_sec = 0;
};

class Scheduler final : public VolumeListener {
 public:
  // Listens to `volume` (SetListener) from construction until destruction.
  Scheduler(ElasticArray& array, LogVolume& volume, std::function<PhysicalUse()> physical,
            const SchedulerOptions& options, const Clock& clock = SystemClock::Default());
  ~Scheduler() override;

  void OnSegmentRead(SegmentId s) override {
    hot_.OnRead(s.value);
    reads_.fetch_add(1, std::memory_order_relaxed);
  }
  void OnBlockInvalidated(SegmentId s) override { hot_.OnInvalidate(s.value); }
  SegmentScheme SchemeForNewSegment() override;
  // True when physical use is over β, and then until it is 2% of the flash below it.
  // Called by the volume after every write.
  bool SpacePressure() override;

  // One scheduling step: advances the hand, then converts what the policy asks for, as
  // far as the throttle's tokens allow. Returns how many segments it converted.
  Result<uint32_t> Step();
  // Background workers; Stop() waits for them (a conversion in progress completes).
  void Start();
  void Stop();
  void set_rate(uint64_t bytes_per_sec);

  SchedulerStats stats() const;
  // A segment's hotness as of the last closed epoch: its decayed accesses, and those per
  // written block (its density, what the budget ranks by).
  struct SegmentHeat {
    float score = 0;
    double density = 0;
  };
  SegmentHeat Heat(SegmentId s) const;

 private:
  struct Candidate {
    SegmentId s;
    SegmentScheme to;
    uint64_t bytes;
    bool autonomous;
    bool swap = false;       // a demotion that makes room for a denser segment
    bool for_space = false;  // a demotion because use is over the budget
  };
  // Under decide_mu_: the next conversion, if any.
  std::optional<Candidate> PickLocked(const PhysicalUse& use);
  // A sealed segment as PickLocked weighs it.
  struct Seen {
    SegmentId s;
    SegmentInfo info;
    double score;      // decayed reads: what a mirror would serve
    double density;    // the same per written block
    double rewrites;   // decayed invalidations: how fast it is being emptied
    double data_phys;  // physical bytes of one copy of the data
    double delta;      // physical bytes RAID10 costs over RAID5 (estimated for RAID10 segments)
    uint64_t bytes;
  };
  // PickLocked's steps. SurveyLocked weighs every sealed segment GC is not about to take
  // into `raid5` and `raid10` (RAID10 segments mirrored for free left out), or returns at
  // once a RAID5 segment whose mirror costs nothing. ElasticPickLocked is the elastic
  // policy's choice among them, given the physical use and the budget (bytes).
  std::optional<Candidate> SurveyLocked(std::vector<Seen>* raid5, std::vector<Seen>* raid10);
  std::optional<Candidate> ElasticPickLocked(std::vector<Seen>& raid5, std::vector<Seen>& raid10,
                                             double used, double budget);
  // Under decide_mu_: closes a hotness epoch if one is due.
  void MaybeCloseEpochLocked();
  // Under decide_mu_: the traffic window (write share, physical growth) and the
  // allowance the bytes written since the last call earned.
  void MeasureTrafficLocked(const PhysicalUse& use);
  // Under decide_mu_: whether a conversion of `bytes` fits the write-churn allowance.
  bool AffordableLocked(uint64_t bytes) const;
  bool WriteChurn() const { return write_share_.load(std::memory_order_relaxed) > kReadDominated; }
  // Not the same as !WriteChurn(): before the first window is measured, neither holds.
  bool ReadsKnownToDominate() const {
    const double w = write_share_.load(std::memory_order_relaxed);
    return w >= 0 && w <= kReadDominated;
  }
  // Reads dominate the traffic when writes are at most this share of the blocks moved.
  static constexpr double kReadDominated = 0.2;
  void Refill();

  ElasticArray& array_;
  LogVolume& volume_;
  std::function<PhysicalUse()> physical_;
  SchedulerOptions options_;
  const Clock& clock_;
  SegmentHotness hot_;

  mutable std::mutex decide_mu_;
  std::vector<bool> busy_;         // segments a worker is converting now
  std::vector<bool> free_mirror_;  // made RAID10 by the autonomous rule: never demoted for space
  // What the drives said of each sealed segment (compression, physical bytes), kept while
  // the segment is the same allocation in the same scheme and no device changed state:
  // a pass then asks the drives only about segments sealed or converted since.
  struct CachedInfo {
    uint64_t generation = 0;
    SegmentScheme scheme = SegmentScheme::kFree;
    uint64_t devices = 0;
    SegmentInfo info;
  };
  std::vector<CachedInfo> info_cache_;
  SegmentInfo InfoLocked(SegmentId s, uint64_t devices);
  double tokens_ = 0;  // bytes the throttle lets through now (may go negative)
  uint64_t last_refill_ns_ = 0;
  SchedulerStats stats_;

  // Counted outside decide_mu_: births happen under the volume's lock, and a step holds
  // decide_mu_ while it asks the volume for its segments (lock order: decide_mu_, volume).
  std::atomic<uint64_t> born_raid10_{0}, born_raid5_{0};
  std::atomic<bool> over_budget_{false};  // last seen physical use > β · flash
  std::atomic<bool> degraded_{false};     // a device failed or rebuilding, at the last step
  // The traffic the births are decided by (MeasureTrafficLocked): reads counted here,
  // blocks written (user and GC) from the volume's counters.
  std::atomic<uint64_t> reads_{0};
  std::atomic<double> write_share_{-1};          // -1: not measured yet
  std::atomic<double> growth_bytes_per_sec_{0};  // physical use's growth, last window
  uint64_t window_start_ns_ = 0, window_reads_ = 0, window_written_ = 0, window_used_ = 0;
  uint64_t allowance_user_blocks_ = 0;  // user blocks written the allowance was credited for
  double allowance_ = 0;                // bytes (may go negative: demotions for space)
  // Physical bytes demoting every demotable RAID10 segment would free (last pass), and a
  // worker's wake-up call from SpacePressure.
  std::atomic<uint64_t> demotable_bytes_{0};
  std::atomic<bool> demote_wanted_{false};
  std::atomic<uint64_t> gc_spared_{0};
  // SpacePressure's own state (it runs under the volume's exclusive lock).
  bool far_from_budget_ = false;
  uint64_t pressure_calls_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::vector<std::thread> workers_;
};

}  // namespace eraid
