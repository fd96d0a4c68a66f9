#include "log/log_volume.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "common/thread_priority.h"
#include "raid/metadata.h"

namespace eraid {

namespace {
// The array's tag words per block: the user LBA, and (class << 56 | last user-write time).
constexpr uint32_t kClassShift = 56;
constexpr uint64_t kTimeMask = (1ull << kClassShift) - 1;
}  // namespace

class LogVolume::ArrayStore final : public SegmentStore {
 public:
  ArrayStore(ElasticArray& array, SegmentScheme scheme) : array_(array), scheme_(scheme) {}
  Result<uint64_t> Open(uint32_t cls) override {
    ERAID_ASSIGN_OR_RETURN(
        SegmentId s,
        array_.AllocateSegment(listener_ ? listener_->SchemeForNewSegment() : scheme_));
    if (classes_.size() <= s.value) classes_.resize(s.value + 1);
    classes_[s.value] = cls;
    return uint64_t{s.value};
  }
  Result<uint32_t> Append(uint64_t handle, uint64_t lba, uint64_t user_time,
                          std::span<const std::byte> data) override {
    return array_.Append(SegmentId(static_cast<uint32_t>(handle)), data, lba,
                         uint64_t{classes_[handle]} << kClassShift | (user_time & kTimeMask),
                         rows_);
  }
  bool Full(uint64_t handle, uint32_t) const override {
    return array_.Remaining(SegmentId(static_cast<uint32_t>(handle))) == 0;
  }
  Status Seal(uint64_t handle) override {
    return array_.Seal(SegmentId(static_cast<uint32_t>(handle)), rows_);
  }
  Status Free(uint64_t handle) override {
    return array_.Free(SegmentId(static_cast<uint32_t>(handle)));
  }
  Status Read(uint64_t handle, uint32_t position, std::span<std::byte> out) override {
    if (listener_) listener_->OnSegmentRead(SegmentId(static_cast<uint32_t>(handle)));
    return array_.Read(SegmentId(static_cast<uint32_t>(handle)), position, out);
  }
  Status ReadForGc(uint64_t handle, uint32_t position, std::span<std::byte> out) override {
    return array_.Read(SegmentId(static_cast<uint32_t>(handle)), position, out);
  }
  void ReadMany(uint64_t handle, std::span<const uint32_t> positions, std::span<std::byte> out,
                std::span<Status> results) override {
    // GC's reads: not a user's, so no hotness (a victim read to be moved is not hot, and
    // under write churn its reads made a randwrite look 40% reads to the scheduler).
    array_.ReadMany(SegmentId(static_cast<uint32_t>(handle)), positions, out, results);
  }
  void OnInvalidate(uint64_t handle) override {
    if (listener_) listener_->OnBlockInvalidated(SegmentId(static_cast<uint32_t>(handle)));
  }
  void set_listener(VolumeListener* l) { listener_ = l; }
  // While one lives (under the volume lock), the rows the engine's appends and seals fill
  // go to `rows`, which the caller writes after letting the lock go.
  class Lend {
   public:
    Lend(ArrayStore& store, RowBatch& rows) : store_(store) { store_.rows_ = &rows; }
    ~Lend() { store_.rows_ = nullptr; }
    Lend(const Lend&) = delete;
    Lend& operator=(const Lend&) = delete;

   private:
    ArrayStore& store_;
  };
  bool SpacePressure() { return listener_ && listener_->SpacePressure(); }
  Status Flush() override { return array_.Flush(); }
  bool has_data() const override { return true; }
  bool keeps_tags() const override { return true; }
  Status ReadTags(uint64_t handle, std::vector<StoredTag>* out) override {
    out->clear();
    return array_.ReadTags(SegmentId(static_cast<uint32_t>(handle)),
                           [&](uint32_t pos, uint64_t lba, uint64_t tag) {
                             out->push_back({lba, tag & kTimeMask, pos});
                           });
  }

 private:
  ElasticArray& array_;
  SegmentScheme scheme_;
  VolumeListener* listener_ = nullptr;
  RowBatch* rows_ = nullptr;  // Lend's; null: the array writes a full row itself
  std::vector<uint32_t> classes_;
};

LogVolume::LogVolume(ElasticArray& array, const VolumeOptions& options,
                     std::unique_ptr<Placement> placement)
    : array_(array),
      options_(options),
      placement_(std::move(placement)),
      store_(std::make_unique<ArrayStore>(array, options.scheme)),
      clock_(options.clock ? *options.clock : SystemClock::Default()),
      start_us_(clock_.NowMicros()) {
  const ArrayGeometry& g = array.geometry();
  // Summaries take up to one position in every kSummaryCapacity + 1 (raid/metadata.h),
  // and one per row when rows are short.
  constexpr double kSummarized =
      double(raid_format::kSummaryCapacity) / double(raid_format::kSummaryCapacity + 1);
  const double per_segment =
      double(g.segment_positions()) *
      std::min(kSummarized, double(g.row_blocks() - 1) / double(g.row_blocks()));
  const double segments = double(g.segments) - 2.0 * placement_->classes();
  capacity_blocks_ =
      segments > 0 ? static_cast<uint64_t>(options.utilization * segments * per_segment) : 0;
  address_blocks_ = capacity_blocks_;
  if (options.extent_shift > 0) {
    const uint64_t extent = uint64_t{1} << options.extent_shift;
    // Room for the provisioned blocks, and a part-used last extent of each of up to
    // `max_volumes` volumes.
    address_blocks_ = ((capacity_blocks_ * std::max(1u, options.overcommit) + extent - 1) / extent +
                       options.max_volumes) *
                      extent;
  }
}

LogVolume::~LogVolume() {
  {
    std::lock_guard fl(flush_mu_);
    gc_flusher_stop_ = true;
  }
  gc_flush_cv_.notify_all();
  if (gc_flusher_.joinable()) gc_flusher_.join();
  WriteRowsNow();
}

void LogVolume::WriteRowsNow() { RowBatch(array_).WriteAndWait(); }

void LogVolume::GcFlusher() {
  NameThisThread("eraid-gcflush");
  std::unique_lock fl(flush_mu_);
  for (;;) {
    if (gc_flusher_stop_) return;
    // Freed victims' trims: any round that completed since the one that freed them
    // trimmed them (they were queued before it began); else one is run at the deadline.
    if (trim_flush_due_ && flush_rounds_ != trim_flush_round_) trim_flush_due_ = false;
    const bool trims_now = trim_flush_due_ && std::chrono::steady_clock::now() >= trim_flush_at_;
    if (!gc_flush_wanted_ && !trims_now) {
      if (trim_flush_due_) {
        gc_flush_cv_.wait_until(fl, trim_flush_at_);
      } else {
        gc_flush_cv_.wait(fl);
      }
      continue;
    }
    gc_flush_wanted_ = false;
    fl.unlock();
    (void)Flush();  // its outcome is the next flush's to report (flush_status_)
    fl.lock();
  }
}

EngineOptions LogVolume::EngineOptionsFor(const ElasticArray& array) const {
  EngineOptions eo;
  eo.segment_blocks = static_cast<uint32_t>(array.geometry().segment_positions());
  eo.gp_threshold = options_.gp_threshold;
  eo.selection = options_.selection;
  eo.keep_victim_gps = false;
  eo.extent_shift = options_.extent_shift;
  eo.lba_space = address_blocks_;
  if (options_.gc_when == GcTrigger::kFreeSpace) {
    eo.total_segments = array.geometry().segments;
    // Free segments GC keeps in reserve beyond one open segment per class; victims are
    // freed in batches of half of it, so the flush that makes their copies durable is
    // paid once per batch rather than once per victim.
    const uint32_t reserve = std::max<uint32_t>(2, eo.total_segments / 32);
    eo.gc_free_segments = placement_->classes() + reserve;
    eo.frees_per_flush = options_.gc_frees_per_flush ? options_.gc_frees_per_flush
                                                     : std::max<uint32_t>(1, reserve / 2);
    eo.gc_step_blocks = options_.gc_step_blocks;
    eo.defer_frees = true;  // Flush() frees them, with the device flush outside the lock
    eo.gc_urgent_free_segments = placement_->classes() + std::max<uint32_t>(1, reserve / 2);
    ArrayStore* store = store_.get();
    eo.space_pressure = [store] { return store->SpacePressure(); };
  }
  return eo;
}

static Result<std::unique_ptr<Placement>> MakeLivePlacement(const VolumeOptions& options) {
  if (options.placement == "fk" || options.placement == "oracle") {
    return Status::InvalidArgument(options.placement +
                                   " needs the future: trace replay only (eraid-sim)");
  }
  if (!(options.utilization > 0 && options.utilization <= 0.9)) {
    return Status::InvalidArgument("utilization must be in (0, 0.9]");
  }
  return MakePlacement(options.placement, nullptr, /*paged=*/true);
}

Result<std::unique_ptr<LogVolume>> LogVolume::Make(ElasticArray& array,
                                                   const VolumeOptions& options) {
  ERAID_ASSIGN_OR_RETURN(auto placement, MakeLivePlacement(options));
  auto v = std::unique_ptr<LogVolume>(new LogVolume(array, options, std::move(placement)));
  if (v->capacity_blocks_ == 0)
    return Status::InvalidArgument("the array has too few segments for a volume");
  ERAID_RETURN_IF_ERROR(
      LogEngine::CheckAddressable(array.geometry().segment_positions(), array.geometry().segments));
  return v;
}

Result<std::unique_ptr<LogVolume>> LogVolume::Create(ElasticArray& array,
                                                     const VolumeOptions& options) {
  ERAID_ASSIGN_OR_RETURN(auto v, Make(array, options));
  if (array.stats().free_segments != array.geometry().segments) {
    return Status::InvalidArgument("the array already holds data; open the volume instead");
  }
  const EngineOptions eo = v->EngineOptionsFor(array);
  v->engine_ = std::make_unique<LogEngine>(eo, *v->placement_, *v->store_);
  return v;
}

Result<std::unique_ptr<LogVolume>> LogVolume::Open(ElasticArray& array,
                                                   const VolumeOptions& options) {
  ERAID_ASSIGN_OR_RETURN(auto v, Make(array, options));
  // Every segment the array recovered is sealed; collect its blocks per segment.
  std::map<uint32_t, std::vector<LogEngine::RecoveredBlock>> found;
  std::map<uint32_t, uint32_t> classes;
  std::vector<uint32_t> frontiers(array.geometry().segments);
  for (uint32_t i = 0; i < frontiers.size(); ++i)
    frontiers[i] = array.segment_info(SegmentId(i), /*usage=*/false).frontier;
  // A segment's blocks come one after another: its list is looked up once, not per block.
  uint32_t current = UINT32_MAX;
  std::vector<LogEngine::RecoveredBlock>* blocks = nullptr;
  uint32_t* cls = nullptr;
  array.TakeRecoveredBlocks([&](SegmentId s, uint32_t pos, uint64_t lba, uint64_t tag) {
    if (s.value != current) {
      current = s.value;
      blocks = &found[s.value];
      cls = &classes[s.value];
      if (blocks->empty()) blocks->reserve(frontiers[s.value]);  // at most; not twice by doubling
    }
    blocks->push_back({lba, tag & kTimeMask, pos});
    *cls = static_cast<uint32_t>(tag >> kClassShift);
  });
  const EngineOptions eo = v->EngineOptionsFor(array);
  // Blocks that recovery could not account for would surface as older versions of their
  // LBAs: never silently (a CRC mismatch is never returned, DESIGN.md invariant 4; nor
  // is a stale version whose successor a damaged summary hid).
  for (uint32_t i = 0; i < array.geometry().segments && !options.salvage; ++i) {
    const SegmentInfo info = array.segment_info(SegmentId(i), /*usage=*/false);
    if (info.summaries_lost) {
      return Status::DataLoss(
          "segment " + std::to_string(i) +
          ": a summary block is damaged beyond repair at position " +
          std::to_string(info.frontier) +
          "; the blocks written after it are unknown, and serving would return older versions "
          "of them (open with salvage to serve what is known)");
    }
  }
  // Segments with no data blocks (opened, never written) are simply freed.
  for (uint32_t i = 0; i < array.geometry().segments; ++i) {
    if (array.segment_info(SegmentId(i), /*usage=*/false).scheme != SegmentScheme::kFree &&
        !found.count(i)) {
      ERAID_RETURN_IF_ERROR(array.Free(SegmentId(i)));
    }
  }
  v->engine_ = std::make_unique<LogEngine>(eo, *v->placement_, *v->store_);
  for (auto& [seg, blocks] : found) v->engine_->AdoptSegment(seg, classes[seg], std::move(blocks));
  ERAID_RETURN_IF_ERROR(v->engine_->FinishRecovery().WithContext("volume recovery"));
  return v;
}

Status LogVolume::CheckRange(uint64_t lba, uint64_t blocks) const {
  if (blocks == 0 || lba >= address_blocks_ || blocks > address_blocks_ - lba) {
    return Status::InvalidArgument("blocks [" + std::to_string(lba) + ", +" +
                                   std::to_string(blocks) + ") outside the volume of " +
                                   std::to_string(address_blocks_) + " blocks");
  }
  return Status::Ok();
}

Status LogVolume::Write(uint64_t lba, std::span<const std::byte> data) {
  if (data.empty() || !IsBlockAligned(data.size()))
    return Status::InvalidArgument("write size must be a multiple of 4 KiB");
  const uint64_t blocks = BytesToBlocks(data.size());
  ERAID_RETURN_IF_ERROR(CheckRange(lba, blocks));
  bool free_due = false, freed_here = false;
  RowBatch rows(array_);
  Status st = [&]() -> Status {
    std::lock_guard lock(mu_);
    ArrayStore::Lend lend(*store_, rows);
    const uint64_t freed_before = engine_->victims_freed();
    if (address_blocks_ > capacity_blocks_) {
      // Thin volumes: the blocks this write maps anew must fit in the capacity.
      uint64_t fresh = 0;
      engine_->ForEachMapped(lba, blocks, [&](uint64_t, uint64_t) { ++fresh; });
      fresh = blocks - fresh;
      if (fresh > 0 && engine_->stats().valid_blocks + fresh > capacity_blocks_) {
        return Status::NoSpace(
            "the array is full: " + std::to_string(engine_->stats().valid_blocks) + " of " +
            std::to_string(capacity_blocks_) + " blocks hold data (trim or delete to make room)");
      }
    }
    const uint64_t ts = clock_.NowMicros() - start_us_;
    // One engine request per at most 256 blocks keeps GC checks frequent on big writes.
    for (uint64_t done = 0; done < blocks;) {
      const auto n = static_cast<uint32_t>(std::min<uint64_t>(256, blocks - done));
      ERAID_RETURN_IF_ERROR(
          engine_->Write(lba + done, n, ts, data.subspan(BlocksToBytes(done), BlocksToBytes(n))));
      done += n;
    }
    free_due = engine_->free_due();
    freed_here = engine_->victims_freed() != freed_before;
    return Status::Ok();
  }();
  // Rows this write (or GC in it) completed go to the devices now, without the lock
  // (docs/raid.md, "Rows written outside the locks"): other writers append meanwhile.
  rows.Write();
  ERAID_RETURN_IF_ERROR(st);
  // GC's victims wait for a flush that makes their copies durable: the volume's flusher
  // thread runs one, outside the lock, so no writer waits for it.
  if (free_due || freed_here) {
    std::lock_guard fl(flush_mu_);
    if (free_due) WakeFlusherLocked();
    // Victims this write freed itself (short of space: FreeCollected) wait for a flush to
    // give their space back; in a read-only phase after it none would come (CI saw one
    // segment stay untrimmed, against the scheduler's budget).
    if (freed_here) ScheduleTrimFlushLocked();
  }
  return Status::Ok();
}

Status LogVolume::Read(uint64_t lba, std::span<std::byte> out) {
  if (out.empty() || !IsBlockAligned(out.size()))
    return Status::InvalidArgument("read size must be a multiple of 4 KiB");
  const uint64_t blocks = BytesToBlocks(out.size());
  ERAID_RETURN_IF_ERROR(CheckRange(lba, blocks));
  std::shared_lock lock(mu_);  // reads run side by side; the array serialises what it must
  for (uint64_t i = 0; i < blocks; ++i) {
    ERAID_RETURN_IF_ERROR(engine_->Read(lba + i, out.subspan(BlocksToBytes(i), kBlockSize)));
  }
  return Status::Ok();
}

Status LogVolume::Trim(uint64_t lba, uint64_t blocks) {
  ERAID_RETURN_IF_ERROR(CheckRange(lba, blocks));
  // An unmap: one trim record per range of up to 64 Ki blocks (docs/log.md, "Trim"). The
  // lock is let go between pieces, so a device-sized discard does not stall writers.
  constexpr uint64_t kPiece = LogEngine::kMaxTrimRecordBlocks;
  for (uint64_t done = 0; done < blocks;) {
    const uint64_t n = std::min(kPiece, blocks - done);
    Status st;
    bool freed_here = false;
    RowBatch rows(array_);
    {
      std::lock_guard lock(mu_);
      ArrayStore::Lend lend(*store_, rows);
      const uint64_t freed_before = engine_->victims_freed();
      st = engine_->Trim(lba + done, n);
      freed_here = engine_->victims_freed() != freed_before;
    }
    rows.Write();
    if (freed_here) {  // as in Write: victims freed here wait for a flush
      std::lock_guard fl(flush_mu_);
      ScheduleTrimFlushLocked();
    }
    ERAID_RETURN_IF_ERROR(st);
    done += n;
  }
  return Status::Ok();
}

Status LogVolume::Flush() {
  std::unique_lock fl(flush_mu_);
  const uint64_t mine = ++flush_requested_;
  for (;;) {
    if (flush_covered_ >= mine) return flush_status_;
    if (flush_running_) {
      flush_cv_.wait(fl);
      continue;
    }
    // Lead a round: it covers every request made so far, all of whose writes are in the
    // log already (a write returns only once it is).
    flush_running_ = true;
    const uint64_t covers = flush_requested_;
    fl.unlock();
    // The victims GC collected so far (a mark): their copies are in the array, so the
    // array flush below makes them durable, and the victims can go after it. The flush
    // itself runs without the volume's lock (and the array's: ElasticArray::Flush), so
    // writers and readers go on beside it.
    uint64_t victims = 0;
    {
      std::lock_guard lock(mu_);
      victims = engine_->UnfreedMark();
    }
    Status s = array_.Flush();
    if (s.ok()) {
      std::lock_guard lock(mu_);
      s = engine_->FreeUpTo(victims);
    }
    fl.lock();
    flush_running_ = false;
    flush_covered_ = covers;
    ++flush_rounds_;
    flush_status_ = s;
    flush_cv_.notify_all();
    // The victims freed above give their space back (trims) only after the flush that
    // makes their frees durable. Under load the next round comes soon anyway; if none
    // has within kTrimFlushDelay, the flusher runs one — else, in a read-only phase, the
    // drives would keep holding blocks nobody owns, against the scheduler's budget.
    // (That round frees no victims unless GC collected more, so it does not repeat.)
    if (s.ok() && victims != 0) ScheduleTrimFlushLocked();
  }
}

void LogVolume::ScheduleTrimFlushLocked() {
  trim_flush_due_ = true;
  // A round under way now may have taken its snapshot before the frees: only one that
  // completes after it covers them.
  trim_flush_round_ = flush_rounds_ + (flush_running_ ? 1 : 0);
  trim_flush_at_ = std::chrono::steady_clock::now() + kTrimFlushDelay;
  StartFlusherLocked();
  gc_flush_cv_.notify_one();
}

void LogVolume::StartFlusherLocked() {
  if (!gc_flusher_.joinable()) gc_flusher_ = std::thread([this] { GcFlusher(); });
}

void LogVolume::WakeFlusherLocked() {
  gc_flush_wanted_ = true;
  StartFlusherLocked();
  gc_flush_cv_.notify_one();
}

void LogVolume::SetListener(VolumeListener* listener) {
  std::lock_guard lock(mu_);
  store_->set_listener(listener);
}

std::vector<std::pair<SegmentId, double>> LogVolume::SealedSegments() const {
  std::shared_lock lock(mu_);
  std::vector<std::pair<SegmentId, double>> out;
  engine_->ForEachSealed(
      [&](uint64_t handle, double gp) { out.emplace_back(SegmentId(uint32_t(handle)), gp); });
  return out;
}

std::optional<SegmentId> LogVolume::Locate(uint64_t lba) const {
  std::shared_lock lock(mu_);
  auto handle = engine_->Locate(lba);
  if (!handle) return std::nullopt;
  return SegmentId(static_cast<uint32_t>(*handle));
}

ExtentCounters LogVolume::Extent(uint64_t extent) const {
  std::shared_lock lock(mu_);
  return engine_->Extent(extent);
}

void LogVolume::ResetExtent(uint64_t extent) {
  std::lock_guard lock(mu_);
  engine_->ResetExtent(extent);
}

std::vector<LogVolume::Run> LogVolume::Allocation(uint64_t lba, uint64_t blocks) const {
  std::vector<Run> runs;
  uint64_t at = lba;  // first LBA not yet in a run
  auto add = [&](uint64_t n, bool written) {
    if (n == 0) return;
    if (!runs.empty() && runs.back().written == written) {
      runs.back().blocks += n;
    } else {
      runs.push_back({n, written});
    }
  };
  {
    std::shared_lock lock(mu_);
    engine_->ForEachMapped(lba, blocks, [&](uint64_t, uint64_t l) {
      add(l - at, false);
      add(1, true);
      at = l + 1;
    });
  }
  add(lba + blocks - at, false);
  return runs;
}

std::vector<LogVolume::SegmentLbas> LogVolume::LbaSummary(uint32_t segments, uint32_t bins) const {
  std::vector<SegmentLbas> out(segments);
  bins = std::max(1u, bins);
  constexpr uint64_t kPiece = 1 << 16;
  for (uint64_t first = 0; first < address_blocks_; first += kPiece) {
    std::shared_lock lock(mu_);
    engine_->ForEachMapped(first, kPiece, [&](uint64_t handle, uint64_t lba) {
      if (handle >= out.size()) return;
      SegmentLbas& s = out[handle];
      if (s.valid_blocks == 0) {
        s.lba_min = lba;
        s.histogram.assign(bins, 0);
      }
      ++s.valid_blocks;
      s.lba_max = lba;  // in LBA order
      if (lba < capacity_blocks_)
        ++s.histogram[lba * bins / capacity_blocks_];  // the default volume's
    });
  }
  return out;
}

VolumeStats LogVolume::stats() const {
  VolumeStats st;
  {
    std::lock_guard fl(flush_mu_);
    st.flush_requests = flush_requested_;
    st.flush_rounds = flush_rounds_;
  }
  std::shared_lock lock(mu_);
  st.capacity_blocks = capacity_blocks_;
  st.engine = engine_->stats();
  st.placement = placement_->stats();
  st.memory_bytes = engine_->memory_bytes() + st.placement.lba_state_bytes;
  return st;
}

}  // namespace eraid
