#include "raid/array.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/crc32c.h"
#include "common/encoding.h"
#include "common/thread_priority.h"
#include "raid/scheme.h"

namespace eraid {

using namespace raid_format;  // NOLINT: this file implements that format

namespace {
constexpr uint32_t kNoBatch = UINT32_MAX;
uint64_t BitmapSlotLba(uint32_t slot, uint32_t segments) {
  return 2 + uint64_t{slot} * BitmapBlocks(segments);
}
uint64_t JournalLba(uint64_t seq, uint32_t segments) {
  return 2 + 2ull * BitmapBlocks(segments) + seq % kJournalBlocks;
}
// Whether `part` lies within `whole` (a device write's data within a row buffer).
bool Inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return !whole.empty() && part.data() >= whole.data() &&
         part.data() + part.size() <= whole.data() + whole.size();
}
}  // namespace

// A full row on its way to the devices, written outside the array lock (Append).
struct ElasticArray::PendingRow {
  uint32_t segment = 0, row = 0;
  SegmentScheme scheme = SegmentScheme::kFree;
  uint64_t seq = 0;            // rows_detached_ when it was detached
  uint32_t writable_mask = 0;  // devices that were writable then (the others are skipped)
  AlignedBuffer buf;           // the row's blocks, read from here until the writes are done
  // Set by its writer: each write's device and outcome; then `written`, after which
  // reads go to the devices (the row stays listed until ApplyRowResultsLocked).
  std::vector<std::pair<uint32_t, Status>> results;
  std::atomic<bool> written{false};
};

struct ElasticArray::Segment {
  SegmentEntry entry;
  bool open = false;
  uint32_t frontier = 0;
  std::vector<uint32_t> crc;                        // per written position
  std::vector<std::pair<uint64_t, uint64_t>> tags;  // per position: (lba, time)
  std::vector<bool> is_summary;
  uint32_t summaries = 0;  // true entries of is_summary (stats() asks every segment)
  // Open segments only.
  AlignedBuffer row_buf;          // the current row; zero beyond the frontier
  uint32_t row = 0;               // which row row_buf holds
  uint32_t row_synced = 0;        // positions of that row already on disk (via a flush)
  uint32_t batch_pos = kNoBatch;  // summary position of the open batch
  std::vector<SummaryEntry> batch;
  std::vector<uint32_t> rows_to_unmirror;  // RAID5 rows whose slot-2 copies go after a flush
  // Full rows detached by Append whose writes are not known to be done (ApplyRowResultsLocked).
  std::vector<std::shared_ptr<PendingRow>> in_flight;
  // Conversion (Convert drops the lock between rows): one at a time per segment, and a
  // count of allocations and frees so a converter sees that its segment went away.
  bool converting = false;
  uint64_t incarnation = 0;
  // Recovery found the summary chain of this sealed segment broken before its journalled
  // frontier (every copy of a summary damaged): the blocks after the break are unknown.
  bool summaries_lost = false;

  void Reset() {
    frontier = 0;
    summaries_lost = false;
    crc.clear();
    tags.clear();
    is_summary.clear();
    summaries = 0;
    row_buf.clear();
    row = row_synced = 0;
    batch_pos = kNoBatch;
    batch.clear();
    rows_to_unmirror.clear();
  }
};

// Device access for the array: states, counters, and batches of operations submitted to
// several devices at once. An I/O error fails the device (the array then persists it).
class ElasticArray::Io {
 public:
  Io(std::vector<Backend*> devices, ArrayStats* stats, ChangeTracker* changes)
      : devices_(std::move(devices)), stats_(stats), changes_(changes) {
    stats_->devices.resize(devices_.size());
  }
  uint32_t count() const { return static_cast<uint32_t>(devices_.size()); }
  Backend* device(uint32_t d) const { return devices_[d]; }
  // A Flush() reads the device set without the array lock (FlushDevices), so a swap
  // also takes this one.
  void set_device(uint32_t d, Backend* b) {
    std::lock_guard lock(device_set_mu_);
    devices_[d] = b;
  }
  DeviceState state(uint32_t d) const { return stats_->devices[d].state; }
  void set_state(uint32_t d, DeviceState s) { stats_->devices[d].state = s; }
  bool writable(uint32_t d) const { return state(d) != DeviceState::kFailed; }
  bool readable(uint32_t d, uint32_t segment) const {
    return state(d) == DeviceState::kOk ||
           (state(d) == DeviceState::kRebuilding && segment < rebuild_cursor_);
  }
  uint32_t failed_count() const {
    uint32_t n = 0;
    for (uint32_t d = 0; d < count(); ++d) n += state(d) != DeviceState::kOk;
    return n;
  }
  void set_rebuild_cursor(uint32_t c) { rebuild_cursor_ = c; }
  bool take_failures_changed() { return std::exchange(failures_changed_, false); }

  void Fail(uint32_t d) {
    if (state(d) == DeviceState::kFailed) return;
    set_state(d, DeviceState::kFailed);
    failures_changed_ = true;
  }
  void Note(uint32_t d, const Status& s) {
    if (s.code() == StatusCode::kIoError || s.code() == StatusCode::kAborted) {
      ++stats_->devices[d].errors;
      Fail(d);
    }
  }

  bool ReadBlock(uint32_t d, uint32_t segment, uint64_t lba, std::span<std::byte> out) {
    if (!readable(d, segment)) return false;
    ++stats_->devices[d].reads;
    Status s = devices_[d]->Read(Lba(lba), out);
    Note(d, s);
    return s.ok();
  }

  // Writes to devices that are down are skipped: the array goes on degraded.
  // (Completions may run on another thread that polls the same device, a Flush() or a
  // conversion holding the lock shared: the count is atomic.)
  void Write(const std::vector<DeviceWrite>& writes) {
    std::vector<Status> results(writes.size());
    std::atomic<size_t> pending{0};
    for (size_t i = 0; i < writes.size(); ++i) {
      const DeviceWrite& w = writes[i];
      changes_->Mark(w.device, w.lba,
                     BytesToBlocks(w.data.size()));  // also when skipped: a re-add owes it
      if (!writable(w.device)) continue;
      ++stats_->devices[w.device].writes;
      pending.fetch_add(1, std::memory_order_relaxed);
      devices_[w.device]->SubmitWrite(Lba(w.lba), w.data, [&, i](Status s) {
        changes_->Mark(writes[i].device, writes[i].lba, BytesToBlocks(writes[i].data.size()));
        results[i] = std::move(s);
        pending.fetch_sub(1, std::memory_order_release);
      });
    }
    Drain(pending);
    for (size_t i = 0; i < writes.size(); ++i) Note(writes[i].device, results[i]);
  }

  // Writes made outside Write() (a conversion's, under the shared lock), counted after.
  void CountWrites(uint32_t d, uint64_t n) { stats_->devices[d].writes += n; }

  void Trim(const std::vector<DeviceTrim>& trims) {
    for (const DeviceTrim& t : trims) {
      changes_->Mark(t.device, t.lba, t.count_blocks);
      if (!writable(t.device)) continue;
      ++stats_->devices[t.device].trims;
      Note(t.device, devices_[t.device]->Trim(Lba(t.lba), t.count_blocks));
      changes_->Mark(t.device, t.lba, t.count_blocks);
    }
  }

  void FlashAllocAll(uint64_t lba, uint64_t count_blocks) {
    for (uint32_t d = 0; d < count(); ++d) {
      if (writable(d))
        (void)devices_[d]->FlashAlloc(Lba(lba), count_blocks);  // a hint: unsupported is fine
    }
  }

  // All devices at once: drives that flush in the background do it in parallel.
  void FlushAll() {
    std::vector<Status> results(count());
    std::atomic<size_t> pending{0};
    for (uint32_t d = 0; d < count(); ++d) {
      if (!writable(d)) continue;
      pending.fetch_add(1, std::memory_order_relaxed);
      const uint64_t ticket = changes_->FlushBegin(d);
      devices_[d]->SubmitFlush([&, d, ticket](Status s) {
        changes_->FlushDone(d, ticket, s.ok());
        results[d] = std::move(s);
        pending.fetch_sub(1, std::memory_order_release);
      });
    }
    Drain(pending);
    for (uint32_t d = 0; d < count(); ++d) Note(d, results[d]);
  }

  // Flushes the given devices (null: skipped) without the array lock, beside threads
  // that hold it and poll the same devices (and so may run this call's completions);
  // device errors go to *errors. The device set cannot change meanwhile (set_device).
  void FlushDevices(const std::vector<Backend*>& devices,
                    std::vector<std::pair<uint32_t, Status>>* errors) {
    std::shared_lock lock(device_set_mu_);
    auto state = std::make_shared<SharedOps>(devices.size());
    for (uint32_t d = 0; d < devices.size(); ++d) {
      if (devices[d] == nullptr) continue;
      const uint64_t ticket = changes_->FlushBegin(d);
      devices[d]->SubmitFlush([track = state->Track(d), changes = changes_, d, ticket](Status s) {
        changes->FlushDone(d, ticket, s.ok());
        track(std::move(s));
      });
    }
    WaitShared(devices, state->pending);
    for (uint32_t d = 0; d < devices.size(); ++d) {
      if (!state->results[d].ok()) errors->emplace_back(d, state->results[d]);
    }
  }

  // Writes submitted without the array lock (a detached row), beside threads that hold it
  // and poll the same devices; each write's outcome goes to *results. Device counts are
  // left to the caller (ApplyRowResultsLocked).
  // `packed` (or null): the records of the blocks of `base` (a row buffer), block i's at
  // packed's index i, for the writes whose data lies in `base`.
  void WriteUnlocked(const std::vector<DeviceWrite>& writes,
                     std::vector<std::pair<uint32_t, Status>>* results,
                     const std::shared_ptr<const PackedBlocks>& packed = nullptr,
                     std::span<const std::byte> base = {}) {
    std::shared_lock lock(device_set_mu_);
    auto state = std::make_shared<SharedOps>(writes.size());
    std::vector<Backend*> used(count(), nullptr);
    for (size_t i = 0; i < writes.size(); ++i) {
      const DeviceWrite& w = writes[i];
      used[w.device] = devices_[w.device];
      IoCallback done = [track = state->Track(i), changes = changes_, d = w.device, lba = w.lba,
                         n = BytesToBlocks(w.data.size())](Status s) {
        changes->Mark(d, lba, n);
        track(std::move(s));
      };
      if (packed && Inside(w.data, base)) {
        const auto first = static_cast<uint32_t>(
            BytesToBlocks(static_cast<uint64_t>(w.data.data() - base.data())));
        devices_[w.device]->SubmitWritePacked(Lba(w.lba), w.data, packed, first, std::move(done));
      } else {
        devices_[w.device]->SubmitWrite(Lba(w.lba), w.data, std::move(done));
      }
    }
    WaitShared(used, state->pending);
    for (size_t i = 0; i < writes.size(); ++i)
      results->emplace_back(writes[i].device, std::move(state->results[i]));
  }

  // The devices a flush goes to (FlushDevices): every writable one, null for the rest.
  // Under the array lock, shared or not.
  std::vector<Backend*> WritableDevices() const {
    std::vector<Backend*> devices;
    for (uint32_t d = 0; d < count(); ++d) devices.push_back(writable(d) ? devices_[d] : nullptr);
    return devices;
  }

 private:
  // Operations submitted without the array lock, whose completions may run on any thread
  // that polls the same devices (so the state outlives the submitter if need be).
  struct SharedOps : std::enable_shared_from_this<SharedOps> {
    explicit SharedOps(size_t n) : results(n) {}
    std::atomic<size_t> pending{0};
    std::vector<Status> results;
    // Counts operation i in; its completion stores its outcome and counts it out.
    IoCallback Track(size_t i) {
      pending.fetch_add(1, std::memory_order_relaxed);
      return [self = shared_from_this(), i](Status s) {
        self->results[i] = std::move(s);
        self->pending.fetch_sub(1, std::memory_order_release);
      };
    }
  };

  // Polls `devices` (null: skipped) until `pending` is 0; another thread polling the same
  // devices may run some of the completions.
  static void WaitShared(const std::vector<Backend*>& devices, const std::atomic<size_t>& pending) {
    while (pending.load(std::memory_order_acquire) > 0) {
      bool polled = false;
      for (Backend* b : devices) {
        if (b != nullptr && b->in_flight() > 0 && pending.load(std::memory_order_acquire) > 0) {
          b->Poll(true);
          polled = true;
        }
      }
      if (!polled) std::this_thread::yield();  // a completion running on another thread
    }
  }

  void Drain(const std::atomic<size_t>& pending) {
    auto left = [&] { return pending.load(std::memory_order_acquire) > 0; };
    while (left()) {
      for (Backend* b : devices_) {
        if (b->in_flight() > 0) b->Poll(false);
      }
      if (left()) {
        bool polled = false;
        for (Backend* b : devices_) {
          if (b->in_flight() > 0) {
            b->Poll(true);
            polled = true;
            break;
          }
        }
        if (!polled) std::this_thread::yield();  // a completion running on another thread
      }
    }
  }

  std::vector<Backend*> devices_;
  std::shared_mutex device_set_mu_;
  ArrayStats* stats_;
  ChangeTracker* changes_;
  uint32_t rebuild_cursor_ = 0;
  bool failures_changed_ = false;
};

// ---------------------------------------------------------------- lifecycle

ElasticArray::ElasticArray(std::vector<Backend*> devices, const ArrayGeometry& g, uint64_t array_id,
                           const Clock& clock)
    : geometry_(g),
      array_id_(array_id),
      clock_(clock),
      changes_(std::make_unique<ChangeTracker>(g, static_cast<uint32_t>(devices.size()))),
      io_(std::make_unique<Io>(std::move(devices), &stats_, changes_.get())) {
  segments_.resize(g.segments);
  for (auto& s : segments_) s = std::make_unique<Segment>();
}

ElasticArray::~ElasticArray() {
  if (row_writer_.joinable()) {
    {
      std::lock_guard lock(rows_mu_);
      row_writer_stop_ = true;
    }
    rows_work_cv_.notify_all();
    row_writer_.join();
    row_writer_on_.store(false, std::memory_order_relaxed);
  }
  DrainRows();
}

Result<std::unique_ptr<ElasticArray>> ElasticArray::Create(std::vector<Backend*> devices,
                                                           const ArrayOptions& options,
                                                           const Clock& clock) {
  if (devices.size() < kMinDevices || devices.size() > kMaxDevices) {
    return Status::InvalidArgument("an array needs 3..16 devices, got " +
                                   std::to_string(devices.size()));
  }
  uint64_t device_blocks = UINT64_MAX;
  for (Backend* d : devices) device_blocks = std::min(device_blocks, d->capacity_blocks());
  ERAID_ASSIGN_OR_RETURN(ArrayGeometry g,
                         PlanGeometry(static_cast<uint32_t>(devices.size()), options.chunk_blocks,
                                      options.rows_per_slot, device_blocks));
  std::random_device rd;
  uint64_t id = (uint64_t{rd()} << 32) | rd();
  auto array =
      std::unique_ptr<ElasticArray>(new ElasticArray(std::move(devices), g, id | 1, clock));
  std::lock_guard lock(array->mu_);
  // Clear the metadata areas and every segment so nothing of an earlier array remains.
  for (uint32_t d = 0; d < g.devices; ++d) {
    Status s = array->io_->device(d)->Trim(Lba(0), g.device_blocks_needed());
    if (!s.ok()) return s.WithContext("create: trim device " + std::to_string(d));
  }
  ERAID_RETURN_IF_ERROR(array->WriteSuperblocksLocked());
  ERAID_RETURN_IF_ERROR(array->CheckpointBitmapLocked());
  return array;
}

Status ElasticArray::WriteSuperblocksLocked() {
  ++super_generation_;
  std::vector<std::byte> block(kBlockSize);
  Superblock sb;
  sb.array_id = array_id_;
  sb.generation = super_generation_;
  sb.geometry = geometry_;
  sb.device_blocks = geometry_.device_blocks_needed();
  for (uint32_t d = 0; d < io_->count(); ++d) sb.states[d] = io_->state(d);
  uint32_t written = 0;
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (!io_->writable(d)) continue;
    sb.device_index = d;
    EncodeSuperblock(sb, block);
    Status s = io_->device(d)->Write(Lba(super_generation_ % 2), block);
    if (s.ok()) s = io_->device(d)->Flush();
    io_->Note(d, s);
    written += s.ok();
  }
  if (io_->take_failures_changed()) return WriteSuperblocksLocked();  // record the new failure too
  if (written + 1 < io_->count()) stats_.data_at_risk = true;
  return written > 0 ? Status::Ok() : Status::IoError("no device accepted the superblock");
}

uint64_t ElasticArray::WriteCheckpointLocked() {
  // The entries as journalled: a seal still waiting for its flush is recorded as the open
  // entry it was (its blocks may not be durable yet; docs/format/raid.md).
  std::vector<SegmentEntry> entries(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) {
    auto it = seals_awaiting_flush_.find(static_cast<uint32_t>(i));
    entries[i] = it != seals_awaiting_flush_.end() ? it->second : segments_[i]->entry;
  }
  std::vector<std::byte> buf(BlocksToBytes(BitmapBlocks(geometry_.segments)));
  EncodeBitmap(journal_seq_, entries, buf);
  checkpoint_slot_ ^= 1;
  std::vector<DeviceWrite> writes;
  for (uint32_t d = 0; d < io_->count(); ++d) {
    writes.push_back({d, BitmapSlotLba(checkpoint_slot_, geometry_.segments), buf});
  }
  io_->Write(writes);
  return journal_seq_;
}

Status ElasticArray::CheckpointBitmapLocked() {
  // A checkpoint written and not yet durable is in the other slot: make it durable before
  // this one overwrites the slot of the last durable one.
  if (pending_checkpoint_seq_ != 0) FlushDevicesLocked();
  const uint64_t covered = WriteCheckpointLocked();
  FlushDevicesLocked();
  checkpoint_seq_ = std::max(checkpoint_seq_, covered);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

void ElasticArray::AddSegmentTrims(uint32_t segment, std::vector<DeviceTrim>* out) const {
  for (uint32_t d = 0; d < geometry_.devices; ++d) {
    out->push_back(
        {d, geometry_.SegmentStart(SegmentId(segment)), geometry_.segment_span_blocks()});
  }
}

void ElasticArray::FlushDevicesLocked() {
  // What waits for this flush below assumes every row so far is on the devices.
  DrainRows();
  ApplyRowResultsLocked();
  io_->FlushAll();
  journal_unflushed_ = false;
  PromoteCheckpointLocked(pending_checkpoint_seq_);
  std::vector<DeviceTrim> trims;
  for (auto& [segment, t] : unmirror_awaiting_flush_) {
    for (const auto& [epoch, trim] : t) trims.push_back(trim);
  }
  unmirror_awaiting_flush_.clear();
  for (const auto& [s, epoch] : frees_awaiting_flush_) AddSegmentTrims(s, &trims);
  frees_awaiting_flush_.clear();
  if (!trims.empty()) io_->Trim(trims);
  // A seal record written before its blocks were durable could, at a crash, bound the
  // segment's chain past what is on disk: it is written only now. (Journalling may
  // checkpoint, which flushes again: the set is taken first.)
  seal_epochs_.clear();
  for (const auto& [s, before] : std::exchange(seals_awaiting_flush_, {})) {
    if (segments_[s]->entry.sealed) (void)JournalLocked(s, Durable::kAtNextFlush);
  }
}

void ElasticArray::PromoteCheckpointLocked(uint64_t flushed) {
  if (flushed == 0) return;
  checkpoint_seq_ = std::max(checkpoint_seq_, flushed);
  if (pending_checkpoint_seq_ == flushed) pending_checkpoint_seq_ = 0;
}

void ElasticArray::FinishFlushLocked(const FlushSnapshot& snap) {
  PromoteCheckpointLocked(snap.pending_checkpoint);
  if (journal_seq_ == snap.journal_seq) journal_unflushed_ = false;
  std::vector<DeviceTrim> trims;
  for (auto it = unmirror_awaiting_flush_.begin(); it != unmirror_awaiting_flush_.end();) {
    auto& t = it->second;
    for (const auto& [epoch, trim] : t) {
      if (epoch <= snap.epoch) trims.push_back(trim);
    }
    std::erase_if(t, [&](const auto& e) { return e.first <= snap.epoch; });
    it = t.empty() ? unmirror_awaiting_flush_.erase(it) : std::next(it);
  }
  for (auto it = frees_awaiting_flush_.begin(); it != frees_awaiting_flush_.end();) {
    if (it->second > snap.epoch) {
      ++it;
      continue;
    }
    AddSegmentTrims(it->first, &trims);
    it = frees_awaiting_flush_.erase(it);
  }
  if (!trims.empty()) io_->Trim(trims);
  std::vector<uint32_t> seals;
  for (auto it = seal_epochs_.begin(); it != seal_epochs_.end();) {
    if (it->second > snap.epoch) {
      ++it;
      continue;
    }
    seals.push_back(it->first);
    seals_awaiting_flush_.erase(it->first);
    it = seal_epochs_.erase(it);
  }
  for (uint32_t s : seals) {
    if (segments_[s]->entry.sealed) (void)JournalLocked(s, Durable::kAtNextFlush);
  }
}

Status ElasticArray::JournalLocked(uint32_t segment, Durable when) {
  // Keep the ring from overwriting records the newest durable checkpoint does not cover.
  // Half-way round, a checkpoint is written without a flush: whatever flush comes before
  // the ring needs it makes it durable, and only if none has, the ring waits for one.
  if (journal_seq_ + 1 - checkpoint_seq_ >= kJournalBlocks) {
    ++stats_.journal_ring_stalls;
    if (pending_checkpoint_seq_ != 0) FlushDevicesLocked();
    if (journal_seq_ + 1 - checkpoint_seq_ >= kJournalBlocks)
      ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
  } else if (pending_checkpoint_seq_ == 0 && journal_seq_ - checkpoint_seq_ >= kJournalBlocks / 2) {
    pending_checkpoint_seq_ = WriteCheckpointLocked();
  }
  JournalRecord r{++journal_seq_, segment, segments_[segment]->entry};
  std::vector<std::byte> block(kBlockSize);
  EncodeJournal(r, block);
  std::vector<DeviceWrite> writes;
  for (uint32_t d = 0; d < io_->count(); ++d)
    writes.push_back({d, JournalLba(r.seq, geometry_.segments), block});
  io_->Write(writes);
  journal_unflushed_ = true;
  if (when == Durable::kNow)
    FlushDevicesLocked();  // the flip is durable before anything relies on it
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

// ---------------------------------------------------------------- open / recovery

Result<std::unique_ptr<ElasticArray>> ElasticArray::Open(std::vector<Backend*> devices,
                                                         const Clock& clock) {
  if (devices.size() < kMinDevices || devices.size() > kMaxDevices) {
    return Status::InvalidArgument("an array needs 3..16 devices, got " +
                                   std::to_string(devices.size()));
  }
  // The newest valid superblock of each device; the newest of all defines the array.
  std::vector<std::optional<Superblock>> supers(devices.size());
  // Devices that answer neither superblock read (gone: a drive host that is down), or
  // whose copies both read but neither checks out though one at least is an eraid
  // superblock (rotten: bit rot hit both, not a foreign device). One of them the array
  // can do without: it opens degraded, that device failed, to be rebuilt.
  std::vector<bool> gone(devices.size(), false);
  uint32_t gone_count = 0;
  std::vector<std::byte> block(kBlockSize);
  const Superblock* newest = nullptr;
  std::string why;
  for (size_t d = 0; d < devices.size(); ++d) {
    uint32_t read_errors = 0, ours = 0;
    for (uint64_t slot = 0; slot < 2; ++slot) {
      if (!devices[d]->Read(Lba(slot), block).ok()) {
        ++read_errors;
        continue;
      }
      ours += GetLe64(block.data()) == kSuperMagic;
      auto sb = DecodeSuperblock(block);
      if (!sb.ok()) {
        why = sb.status().ToString();
        continue;
      }
      if (!supers[d] || sb->generation > supers[d]->generation) supers[d] = *sb;
    }
    if (read_errors == 2 || (!supers[d] && ours > 0)) {
      gone[d] = true;
      ++gone_count;
    }
    if (supers[d] && (!newest || supers[d]->generation > newest->generation)) newest = &*supers[d];
  }
  if (!newest)
    return Status::Corruption("no device holds a valid array superblock" +
                              (why.empty() ? "" : " (" + why + ")"));
  const Superblock top = *newest;
  if (top.geometry.devices != devices.size()) {
    return Status::InvalidArgument("the array has " + std::to_string(top.geometry.devices) +
                                   " devices, " + std::to_string(devices.size()) + " were given");
  }
  auto array =
      std::unique_ptr<ElasticArray>(new ElasticArray(devices, top.geometry, top.array_id, clock));
  array->super_generation_ = top.generation;
  for (uint32_t d = 0; d < devices.size(); ++d) {
    array->io_->set_state(d, top.states[d]);
    if (top.states[d] == DeviceState::kRebuilding) array->io_->set_state(d, DeviceState::kFailed);
    // What a device failed before this open lacks is not known (the marks are in memory).
    if (top.states[d] != DeviceState::kOk) array->changes_->Invalidate(d);
    if (top.states[d] != DeviceState::kOk) continue;
    if (supers[d]) array->joined_generation_[d] = supers[d]->generation;
    if (gone[d] && gone_count == 1 &&
        std::count(top.states, top.states + devices.size(), DeviceState::kOk) ==
            static_cast<long>(devices.size())) {
      array->io_->Fail(d);  // recorded on the others by the first superblock write
      array->changes_->Invalidate(d);
      continue;
    }
    if (!supers[d]) {
      return Status::Corruption("device " + std::to_string(d) +
                                " has no valid superblock; fail and replace it");
    }
    if (supers[d]->array_id != top.array_id) {
      return Status::InvalidArgument("device " + std::to_string(d) + " belongs to another array");
    }
    if (supers[d]->device_index != d) {
      return Status::InvalidArgument("device given at position " + std::to_string(d) +
                                     " is device " + std::to_string(supers[d]->device_index) +
                                     " of the array");
    }
    if (devices[d]->capacity_blocks() < top.geometry.device_blocks_needed()) {
      return Status::InvalidArgument("device " + std::to_string(d) +
                                     " is smaller than the array needs");
    }
    // Every round of superblock writes reaches every writable device before the next
    // starts, so a crash leaves healthy devices at most one generation apart. A device
    // further behind missed whole rounds: it was failed, and this is its old copy (a
    // rebuild onto a replacement was cut before the replacement took its place). Its
    // blocks are stale: it is failed again, to be rebuilt.
    if (supers[d]->generation + 1 < top.generation) {
      array->io_->Fail(d);
      array->changes_->Invalidate(d);  // it lacks more than anything marked from now on
    }
  }
  std::lock_guard lock(array->mu_);
  ERAID_RETURN_IF_ERROR(array->RecoverLocked());
  return array;
}

Status ElasticArray::RecoverLocked() {
  const uint32_t nseg = geometry_.segments;
  std::vector<SegmentEntry> best(nseg), entries(nseg);
  uint64_t best_seq = 0;
  bool found = false;
  std::map<uint64_t, JournalRecord> records;
  struct RingSlot {
    uint32_t device, slot;
    uint64_t seq;
  };
  std::vector<RingSlot> ring;
  std::vector<std::byte> buf(BlocksToBytes(BitmapBlocks(nseg))), block(kBlockSize);
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (io_->state(d) != DeviceState::kOk) continue;
    for (uint32_t slot = 0; slot < 2; ++slot) {
      if (!io_->device(d)->Read(Lba(BitmapSlotLba(slot, nseg)), buf).ok()) continue;
      auto seq = DecodeBitmap(buf, &entries);
      if (seq.ok() && (!found || *seq > best_seq)) {
        best = entries;
        best_seq = *seq;
        found = true;
        checkpoint_slot_ = slot;
      }
    }
    for (uint32_t j = 0; j < kJournalBlocks; ++j) {
      if (!io_->device(d)->Read(Lba(2 + 2ull * BitmapBlocks(nseg) + j), block).ok()) continue;
      auto r = DecodeJournal(block);
      if (r.ok() && r->segment < nseg) {
        records.emplace(r->seq, *r);
        ring.push_back({d, j, r->seq});
      }
    }
  }
  if (!found) return Status::Corruption("no valid bitmap checkpoint on any healthy device");
  journal_seq_ = checkpoint_seq_ = best_seq;
  for (auto it = records.upper_bound(best_seq);
       it != records.end() && it->first == journal_seq_ + 1; ++it) {
    best[it->second.segment] = it->second.entry;
    journal_seq_ = it->first;
  }
  // Records past a gap (written without a flush, while an earlier one was lost) were
  // never in force; left in the ring, they would be taken for the new records that reuse
  // their sequence numbers. They are zeroed, durably, before any new record is written.
  std::vector<std::byte> zeros(kBlockSize);
  std::vector<DeviceWrite> clear;
  for (const RingSlot& r : ring) {
    if (r.seq > journal_seq_)
      clear.push_back({r.device, 2 + 2ull * BitmapBlocks(nseg) + r.slot, zeros});
  }
  if (!clear.empty()) {
    io_->Write(clear);
    io_->FlushAll();
  }
  for (uint32_t s = 0; s < nseg; ++s) segments_[s]->entry = best[s];
  for (uint32_t s = 0; s < nseg; ++s) ERAID_RETURN_IF_ERROR(RecoverSegmentLocked(s));
  // Fold the replayed journal into a checkpoint, and record any device that failed here.
  ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

Status ElasticArray::RecoverSegmentLocked(uint32_t index) {
  Segment& seg = *segments_[index];
  seg.Reset();
  if (seg.entry.scheme == SegmentScheme::kFree) return Status::Ok();
  const SegmentId s(index);
  // A sealed segment's journalled frontier bounds its chain: bytes beyond it (a torn
  // batch that recovery once cut off) must never be adopted later.
  const auto positions =
      seg.entry.sealed ? seg.entry.frontier : static_cast<uint32_t>(geometry_.segment_positions());
  std::vector<std::byte> block(kBlockSize);
  uint32_t pos = 0;
  while (pos < positions) {
    Summary summary;
    auto is_summary = [&](std::span<const std::byte> b) {
      auto d = DecodeSummary(b);
      if (!d.ok() || d->segment != index || d->generation != seg.entry.generation ||
          d->position != pos)
        return false;
      summary = std::move(d).value();
      return true;
    };
    // The chain ends where no summary of this generation is found: not a loss.
    if (!ReadVerifiedLocked(s, pos, block, is_summary, ReadMode::kProbe).ok()) break;
    const auto k = static_cast<uint32_t>(summary.entries.size());
    if (pos + 1 + k > positions) break;
    bool whole = true;
    if (!seg.entry.sealed) {  // a batch after the last flush may be torn: check its data
      std::vector<std::byte> data(kBlockSize);
      for (uint32_t i = 0; i < k && whole; ++i) {
        uint32_t want = summary.entries[i].crc;
        whole = ReadVerifiedLocked(
                    s, pos + 1 + i, data, [&](auto b) { return Crc32c(b) == want; },
                    ReadMode::kNoRepair)
                    .ok();
      }
    }
    if (!whole) break;
    seg.crc.push_back(Crc32c(block));
    seg.tags.emplace_back(0, 0);
    seg.is_summary.push_back(true);
    ++seg.summaries;
    for (const SummaryEntry& e : summary.entries) {
      seg.crc.push_back(e.crc);
      seg.tags.emplace_back(e.tag_lba, e.tag_time);
      seg.is_summary.push_back(false);
    }
    pos += 1 + k;
  }
  seg.frontier = pos;
  // The chain broke before the frontier the journal knows (a sealed segment's, or the one
  // a clean shutdown recorded for an open segment): what followed is unknown.
  if (pos < seg.entry.frontier) {
    ++stats_.data_loss;
    seg.summaries_lost = true;
  }
  if (!seg.entry.sealed) return FinishRecoveredSegmentLocked(s);
  return Status::Ok();
}

// A segment that was open at the crash: rewrite its rows from the verified blocks (zeros
// beyond the frontier, over whatever unflushed writes left there), with full redundancy,
// then seal it. Only these few segments are read whole at open.
Status ElasticArray::FinishRecoveredSegmentLocked(SegmentId s) {
  Segment& seg = *segments_[s.value];
  const Scheme& scheme = SchemeFor(seg.entry.scheme);
  const uint64_t rb = geometry_.row_blocks();
  const auto rows = static_cast<uint32_t>((seg.frontier + rb - 1) / rb);
  AlignedBuffer row(BlocksToBytes(rb)), scratch;
  for (uint32_t r = 0; r < rows; ++r) {
    ReadRowLocked(s, r, &row,
                  ReadMode::kRepair);  // a lost block is rewritten as zeros (counted as loss)
    std::vector<DeviceWrite> writes;
    scheme.RowWrites(geometry_, s, r, row, true, &scratch, &writes);
    io_->Write(writes);
  }
  // Rows past the frontier may hold what a torn batch left: clear both slots of them.
  if (rows < geometry_.rows_per_slot) {
    std::vector<DeviceTrim> trims;
    const uint64_t unused = uint64_t{geometry_.rows_per_slot - rows} * geometry_.chunk_blocks;
    for (uint32_t d = 0; d < geometry_.devices; ++d) {
      trims.push_back(
          {d, geometry_.SegmentStart(s) + uint64_t{rows} * geometry_.chunk_blocks, unused});
      trims.push_back({d,
                       geometry_.SegmentStart(s) +
                           uint64_t{geometry_.rows_per_slot + rows} * geometry_.chunk_blocks,
                       unused});
    }
    io_->Trim(trims);
  }
  FlushDevicesLocked();
  if (seg.entry.scheme == SegmentScheme::kRaid5) {
    std::vector<DeviceTrim> trims;
    SchemeFor(SegmentScheme::kRaid10)
        .RedundancyTrims(geometry_, s, &trims);  // the partial-row mirrors
    io_->Trim(trims);
  }
  seg.entry.sealed = true;
  // A frontier recorded at a clean shutdown beyond the chain stays: it is the evidence
  // that blocks are missing, for every later open too.
  seg.entry.frontier = std::max(seg.entry.frontier, seg.frontier);
  return JournalLocked(s.value);
}

Status ElasticArray::RecordOpenFrontiers() {
  std::lock_guard lock(mu_);
  ERAID_RETURN_IF_ERROR(FlushLocked());
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (!seg.open || seg.frontier <= seg.entry.frontier) continue;
    seg.entry.frontier = seg.frontier;
    ERAID_RETURN_IF_ERROR(JournalLocked(i, Durable::kAtNextFlush));
  }
  // Seal records wait for one flush and are durable after the next.
  while (journal_unflushed_ || !seals_awaiting_flush_.empty()) FlushDevicesLocked();
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

// ---------------------------------------------------------------- segments

Result<SegmentId> ElasticArray::AllocateSegment(SegmentScheme scheme) {
  if (scheme == SegmentScheme::kFree)
    return Status::InvalidArgument("a segment opens as raid5 or raid10");
  std::lock_guard lock(mu_);
  // A segment whose FREE record is not durable yet is taken only when no other is free,
  // and only after a flush: trimming it first could, at a crash, leave a sealed segment
  // with its blocks gone.
  uint32_t pick = UINT32_MAX;
  for (uint32_t i = 0; i < segments_.size() && pick == UINT32_MAX; ++i) {
    if (segments_[i]->entry.scheme == SegmentScheme::kFree && !frees_awaiting_flush_.count(i))
      pick = i;
  }
  if (pick == UINT32_MAX && !frees_awaiting_flush_.empty()) {
    pick = frees_awaiting_flush_.begin()->first;
    FlushDevicesLocked();
  }
  for (uint32_t i = pick; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (seg.entry.scheme != SegmentScheme::kFree) continue;
    seg.Reset();
    // Start from zeros on every device (and end the old FlashAlloc ranges). Whether
    // these trims and the record below are durable does not matter: nothing is
    // acknowledged in the segment before a flush makes both so, recovery rewrites the
    // rows of a segment it finds open (zeros past its frontier), and a seal writes the
    // last row whole.
    std::vector<DeviceTrim> trims;
    AddSegmentTrims(i, &trims);
    io_->Trim(trims);
    seg.entry = SegmentEntry{scheme, false, 0, journal_seq_ + 1};
    ++seg.incarnation;
    ERAID_RETURN_IF_ERROR(JournalLocked(i, Durable::kAtNextFlush));
    seg.open = true;
    if (seg.row_buf.capacity() == 0 && !spare_row_bufs_.empty()) {
      seg.row_buf = std::move(spare_row_bufs_.back());
      spare_row_bufs_.pop_back();
    }
    seg.row_buf.assign(BlocksToBytes(geometry_.row_blocks()), std::byte{0});
    io_->FlashAllocAll(geometry_.SegmentStart(SegmentId(i)), geometry_.segment_span_blocks());
    return SegmentId(i);
  }
  return Status::NoSpace("no free segment");
}

uint32_t ElasticArray::Remaining(SegmentId s) const {
  std::shared_lock lock(
      mu_);  // asked before every append: it must not queue behind a conversion's reads
  const Segment& seg = *segments_.at(s.value);
  if (!seg.open) return 0;
  // Always keep a slot for a summary: any Flush() (including another segment's Seal)
  // closes the open batch, and the next block then needs a new one.
  uint64_t left = geometry_.segment_positions() - seg.frontier;
  return static_cast<uint32_t>(left > 0 ? left - 1 : 0);
}

Status ElasticArray::CloseBatchLocked(uint32_t index) {
  Segment& seg = *segments_[index];
  if (seg.batch_pos == kNoBatch) return Status::Ok();
  Summary summary{index, seg.entry.generation, seg.batch_pos, seg.batch};
  const uint64_t rel = seg.batch_pos - uint64_t{seg.row} * geometry_.row_blocks();
  std::span<std::byte> out(seg.row_buf.data() + BlocksToBytes(rel), kBlockSize);
  EncodeSummary(summary, out);
  seg.crc[seg.batch_pos] = Crc32c(out);
  seg.batch_pos = kNoBatch;
  seg.batch.clear();
  return Status::Ok();
}

Result<uint32_t> ElasticArray::Append(SegmentId s, std::span<const std::byte> block,
                                      uint64_t tag_lba, uint64_t tag_time) {
  if (block.size() != kBlockSize) return Status::InvalidArgument("append takes one 4 KiB block");
  Result<uint32_t> pos = Status::Ok();
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    const uint64_t before = rows_detached_;
    pos = AppendLocked(s, block, tag_lba, tag_time);
    queued = rows_detached_ != before;
  }
  if (queued && !defer_row_writes_.load(std::memory_order_relaxed)) WriteQueuedRows();
  return pos;
}

Result<uint32_t> ElasticArray::AppendLocked(SegmentId s, std::span<const std::byte> block,
                                            uint64_t tag_lba, uint64_t tag_time) {
  if (s.value >= segments_.size() || !segments_[s.value]->open) {
    return Status::InvalidArgument("segment " + std::to_string(s.value) + " is not open");
  }
  ApplyRowResultsLocked();
  Segment& seg = *segments_[s.value];
  const uint64_t rb = geometry_.row_blocks();
  const uint64_t positions = geometry_.segment_positions();
  auto row_full = [&] { return seg.frontier == (uint64_t{seg.row} + 1) * rb; };
  while (seg.batch_pos == kNoBatch) {
    if (seg.frontier + 2 > positions) return Status::NoSpace("segment full");
    seg.batch_pos = seg.frontier++;
    seg.crc.push_back(0);
    seg.tags.emplace_back(0, 0);
    seg.is_summary.push_back(true);
    ++seg.summaries;
    if (row_full()) DetachRowLocked(s.value);  // the summary took the row's last slot
  }
  const uint32_t pos = seg.frontier++;
  std::memcpy(seg.row_buf.data() + BlocksToBytes(pos - uint64_t{seg.row} * rb), block.data(),
              kBlockSize);
  const uint32_t crc = Crc32c(block);
  seg.crc.push_back(crc);
  seg.tags.emplace_back(tag_lba, tag_time);
  seg.is_summary.push_back(false);
  seg.batch.push_back({tag_lba, tag_time, crc});
  if (seg.batch.size() == kSummaryCapacity) ERAID_RETURN_IF_ERROR(CloseBatchLocked(s.value));
  if (row_full()) DetachRowLocked(s.value);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return pos;
}

// ---------------------------------------------------------------- rows outside the lock

void ElasticArray::DetachRowLocked(uint32_t index, bool last) {
  Segment& seg = *segments_[index];
  (void)CloseBatchLocked(index);  // the summary of the open batch lies in this row
  auto row = std::make_shared<PendingRow>();
  row->segment = index;
  row->row = seg.row;
  row->scheme = seg.entry.scheme;
  row->seq = ++rows_detached_;
  for (uint32_t d = 0; d < io_->count(); ++d) row->writable_mask |= uint32_t{io_->writable(d)} << d;
  row->buf = std::move(seg.row_buf);
  if (last) {  // a seal's: the rest is SealLocked's
    seg.row_buf = AlignedBuffer();
  } else if (!spare_row_bufs_.empty()) {
    // The next row's buffer: a spare as it is. Nothing reads past the frontier, and a
    // seal zeroes the tail of the last row before writing it.
    seg.row_buf = std::move(spare_row_bufs_.back());
    spare_row_bufs_.pop_back();
  } else {
    seg.row_buf = AlignedBuffer(BlocksToBytes(geometry_.row_blocks()));
  }
  if (seg.entry.scheme == SegmentScheme::kRaid5 && seg.row_synced > 0)
    seg.rows_to_unmirror.push_back(seg.row);
  if (!last) {
    ++seg.row;
    seg.row_synced = 0;
  }
  seg.in_flight.push_back(row);
  std::lock_guard lock(rows_mu_);
  rows_unfinished_.insert(row->seq);
  queued_rows_.push_back(std::move(row));
  rows_queued_.fetch_add(1, std::memory_order_release);
}

void ElasticArray::WriteRow(PendingRow& row) {
  AlignedBuffer scratch;
  std::vector<DeviceWrite> writes;
  SchemeFor(row.scheme)
      .RowWrites(geometry_, SegmentId(row.segment), row.row, row.buf, true, &scratch, &writes);
  for (const DeviceWrite& w : writes) changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
  std::erase_if(writes,
                [&](const DeviceWrite& w) { return (row.writable_mask >> w.device & 1) == 0; });
  const std::span<const std::byte> base(row.buf.data(), row.buf.size());
  io_->WriteUnlocked(writes, &row.results,
                     row_codec_ ? PackRow(*row_codec_, base, writes) : nullptr, base);
}

std::shared_ptr<const PackedBlocks> ElasticArray::PackRow(const CodecConfig& codec,
                                                          std::span<const std::byte> base,
                                                          const std::vector<DeviceWrite>& writes) {
  // Every block of the row that some write stores (a RAID10 row's data: twice), once;
  // the parity, computed into a scratch buffer, is left to its drive.
  auto packed = std::make_shared<PackedBlocks>(codec, BytesToBlocks(base.size()));
  std::vector<bool> done(packed->sizes.size(), false);
  for (const DeviceWrite& w : writes) {
    if (!Inside(w.data, base)) continue;
    const uint64_t first = BytesToBlocks(static_cast<uint64_t>(w.data.data() - base.data()));
    for (uint64_t b = first; b < first + BytesToBlocks(w.data.size()); ++b) {
      if (done[b]) continue;
      packed->sizes[b] = CompressBlock(codec, base.data() + BlocksToBytes(b), packed->payload(b));
      done[b] = true;
      packed_blocks_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return packed;
}

void ElasticArray::WriteQueuedRows() {
  // Most writes fill no row: they pass without taking rows_mu_.
  const size_t queued = rows_queued_.load(std::memory_order_acquire);
  if (queued == 0) return;
  if (row_writer_on_.load(std::memory_order_relaxed) && queued <= kRowWriterBacklog) {
    // The row was queued under rows_mu_ and the writer tests the queue under it before
    // it sleeps, so this wake-up cannot be lost.
    rows_work_cv_.notify_one();
    return;
  }
  WriteRowsHere();
}

void ElasticArray::StartRowWriter() {
  std::lock_guard lock(rows_mu_);
  if (row_writer_.joinable()) return;
  row_writer_ = std::thread([this] { RowWriterLoop(); });
  row_writer_on_.store(true, std::memory_order_relaxed);
}

void ElasticArray::RowWriterLoop() {
  NameThisThread("eraid-rows");
  for (;;) {
    {
      std::unique_lock lock(rows_mu_);
      rows_work_cv_.wait(lock, [&] { return row_writer_stop_ || !queued_rows_.empty(); });
      if (row_writer_stop_) return;  // the destructor writes what is left
    }
    row_writer_rows_.fetch_add(WriteRowsHere(), std::memory_order_relaxed);
  }
}

size_t ElasticArray::WriteRowsHere() {
  size_t written = 0;
  while (rows_queued_.load(std::memory_order_acquire) > 0) {
    std::shared_ptr<PendingRow> row;
    {
      std::lock_guard lock(rows_mu_);
      if (queued_rows_.empty()) return written;
      row = std::move(queued_rows_.front());
      queued_rows_.pop_front();
      rows_queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    WriteRow(*row);
    row->written.store(true, std::memory_order_release);
    {
      std::lock_guard lock(rows_mu_);
      rows_unfinished_.erase(row->seq);
      rows_finished_.push_back(std::move(row));
      rows_to_apply_.store(true, std::memory_order_release);
    }
    rows_cv_.notify_all();
    ++written;
  }
  return written;
}

void ElasticArray::DrainRows(uint64_t upto) {
  (void)WriteRowsHere();
  std::unique_lock lock(rows_mu_);
  rows_cv_.wait(lock, [&] { return rows_unfinished_.empty() || *rows_unfinished_.begin() > upto; });
}

void ElasticArray::ApplyRowResultsLocked() {
  if (!rows_to_apply_.load(std::memory_order_acquire)) return;
  std::vector<std::shared_ptr<PendingRow>> done;
  {
    std::lock_guard lock(rows_mu_);
    done.swap(rows_finished_);
    rows_to_apply_.store(false, std::memory_order_relaxed);
  }
  for (auto& row : done) {
    for (auto& [d, st] : row->results) {
      io_->CountWrites(d, 1);
      io_->Note(d, st);
    }
    auto& in_flight = segments_[row->segment]->in_flight;
    std::erase(in_flight, row);
    if (spare_row_bufs_.size() < 16) spare_row_bufs_.push_back(std::move(row->buf));
  }
}

const std::byte* ElasticArray::UnwrittenBlockLocked(const Segment& seg, uint32_t pos) const {
  const uint64_t rb = geometry_.row_blocks();
  const uint64_t row_start = uint64_t{seg.row} * rb;
  if (seg.open && pos >= row_start) return seg.row_buf.data() + BlocksToBytes(pos - row_start);
  for (const auto& row : seg.in_flight) {
    if (pos / rb == row->row && !row->written.load(std::memory_order_acquire)) {
      return row->buf.data() + BlocksToBytes(pos % rb);
    }
  }
  return nullptr;
}

Status ElasticArray::PrepareFlushLocked() {
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (!seg.open) continue;
    ERAID_RETURN_IF_ERROR(CloseBatchLocked(i));
    // The partial row's new blocks go to both slots: durable and redundant, no parity yet.
    const uint64_t row_start = uint64_t{seg.row} * geometry_.row_blocks();
    std::vector<DeviceWrite> writes;
    for (uint64_t pos = row_start + seg.row_synced; pos < seg.frontier; ++pos) {
      std::span<const std::byte> data(seg.row_buf.data() + BlocksToBytes(pos - row_start),
                                      kBlockSize);
      Place p = geometry_.Primary(SegmentId(i), pos), m = geometry_.Mirror(SegmentId(i), pos);
      writes.push_back({p.device, p.lba, data});
      writes.push_back({m.device, m.lba, data});
      if (seg.entry.scheme == SegmentScheme::kRaid5) ++stats_.mirrored_partial_blocks;
    }
    io_->Write(writes);
    seg.row_synced = static_cast<uint32_t>(seg.frontier - row_start);
    // Rows completed since they were flushed part-full: once this flush has made their
    // parity durable, their slot-2 copies can go.
    for (uint32_t row : seg.rows_to_unmirror) {
      for (uint32_t j = 0; j < geometry_.data_devices(); ++j) {
        Place m = geometry_.Mirror(SegmentId(i), geometry_.PositionOf(row, j, 0));
        unmirror_awaiting_flush_[i].push_back(
            {flush_epoch_, {m.device, m.lba, geometry_.chunk_blocks}});
      }
    }
    seg.rows_to_unmirror.clear();
  }
  return Status::Ok();
}

Status ElasticArray::FlushLocked() {
  ERAID_RETURN_IF_ERROR(PrepareFlushLocked());
  FlushDevicesLocked();
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  if (io_->failed_count() >= io_->count()) return Status::IoError("every device has failed");
  return Status::Ok();
}

Status ElasticArray::Flush() {
  // The device flush, which takes milliseconds on drive files, runs without the array
  // lock: appends, reads and conversions go on beside it. What it must cover is in the
  // devices' queues before it starts (PrepareFlushLocked); what waits for a flush (trims
  // of freed segments and of slot-2 copies, seal records, a checkpoint) is completed
  // afterwards only if it was queued before it began (its epoch).
  // Full rows detached before it are written (or waited for) first, outside the lock.
  FlushSnapshot snap;
  std::vector<Backend*> devices;
  uint64_t rows_upto = 0;
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(PrepareFlushLocked());
    snap.epoch = flush_epoch_++;
    snap.pending_checkpoint = pending_checkpoint_seq_;
    snap.journal_seq = journal_seq_;
    rows_upto = rows_detached_;
    devices = io_->WritableDevices();
  }
  DrainRows(rows_upto);
  std::vector<std::pair<uint32_t, Status>> errors;
  io_->FlushDevices(devices, &errors);
  std::lock_guard lock(mu_);
  ApplyRowResultsLocked();
  for (auto& [d, st] : errors) io_->Note(d, st);
  FinishFlushLocked(snap);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  if (io_->failed_count() >= io_->count()) return Status::IoError("every device has failed");
  return Status::Ok();
}

Status ElasticArray::SealLocked(SegmentId s) {
  Segment& seg = *segments_[s.value];
  if (!seg.open) return Status::Ok();
  ERAID_RETURN_IF_ERROR(CloseBatchLocked(s.value));
  const uint64_t row_start = uint64_t{seg.row} * geometry_.row_blocks();
  if (seg.frontier > row_start) {
    // The last row, zeros past the frontier, is written whole like any full row (RAID5
    // with its parity, RAID10 with its copies): over whatever an earlier use of the
    // segment left there, so no redundancy computation ever meets a stale block. Like a
    // full row it is written outside the lock; whatever reads the segment from its
    // devices (a conversion, a scrub, a rebuild) or frees it waits for it first.
    std::fill(seg.row_buf.begin() + BlocksToBytes(seg.frontier - row_start), seg.row_buf.end(),
              std::byte{0});
    DetachRowLocked(s.value, /*last=*/true);
  }
  // Rows flushed part-full kept slot-2 copies; they go once the parity above is durable.
  for (uint32_t row : seg.rows_to_unmirror) {
    for (uint32_t j = 0; j < geometry_.data_devices(); ++j) {
      Place m = geometry_.Mirror(s, geometry_.PositionOf(row, j, 0));
      unmirror_awaiting_flush_[s.value].push_back(
          {flush_epoch_, {m.device, m.lba, geometry_.chunk_blocks}});
    }
  }
  seg.rows_to_unmirror.clear();
  seg.open = false;
  // As many spares as there can be open segments (one per placement class, a few).
  if (seg.row_buf.size() > 0 && spare_row_bufs_.size() < 16)
    spare_row_bufs_.push_back(std::move(seg.row_buf));
  seg.row_buf = AlignedBuffer();
  // No flush here: the seal record is written after the next flush (of whatever cause)
  // has made the blocks durable, and is durable after the one following it. Until it is
  // written, checkpoints record the entry as it was.
  seals_awaiting_flush_[s.value] = seg.entry;
  seal_epochs_[s.value] = flush_epoch_;
  seg.entry.sealed = true;
  seg.entry.frontier = seg.frontier;
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return Status::Ok();
}

Status ElasticArray::Seal(SegmentId s) {
  Status st;
  {
    std::lock_guard lock(mu_);
    if (s.value >= segments_.size() || segments_[s.value]->entry.scheme == SegmentScheme::kFree) {
      return Status::InvalidArgument("segment " + std::to_string(s.value) + " is not in use");
    }
    st = SealLocked(s);
  }
  if (!defer_row_writes_.load(std::memory_order_relaxed)) WriteQueuedRows();  // its last row
  return st;
}

Status ElasticArray::Free(SegmentId s) {
  std::lock_guard lock(mu_);
  if (s.value >= segments_.size()) return Status::InvalidArgument("no such segment");
  Segment& seg = *segments_[s.value];
  if (seg.entry.scheme == SegmentScheme::kFree) return Status::Ok();
  if (!seg.in_flight.empty()) {  // its last rows land before the trims that follow the free
    DrainRows();
    ApplyRowResultsLocked();
  }
  // Flip first: once FREE is durable, nothing reads the segment; the trims only give
  // the space back (and, with FlashAlloc, end the segment's dedicated erase units). The
  // record rides on the next flush, and the trims follow it.
  seg.entry = SegmentEntry{};
  seg.open = false;
  seg.Reset();
  ++seg.incarnation;
  ERAID_RETURN_IF_ERROR(JournalLocked(s.value, Durable::kAtNextFlush));
  seals_awaiting_flush_.erase(s.value);
  seal_epochs_.erase(s.value);
  unmirror_awaiting_flush_.erase(s.value);  // the segment's trims cover these
  frees_awaiting_flush_[s.value] = flush_epoch_;
  return Status::Ok();
}

// ---------------------------------------------------------------- reads

Status ElasticArray::ReadVerifiedLocked(
    SegmentId s, uint32_t pos, std::span<std::byte> out,
    const std::function<bool(std::span<const std::byte>)>& valid, ReadMode mode) {
  const bool count = mode != ReadMode::kProbe;
  Segment& seg = *segments_[s.value];
  if (const std::byte* b = UnwrittenBlockLocked(seg, pos)) {
    std::memcpy(out.data(), b, kBlockSize);
    return Status::Ok();
  }
  Place p = geometry_.Primary(s, pos);
  bool mismatch = false;
  if (io_->ReadBlock(p.device, s.value, p.lba, out)) {
    if (valid(out)) return Status::Ok();
    mismatch = true;
    if (count) ++stats_.crc_mismatches;
  }
  BlockReader reader = [&](uint32_t d, uint64_t lba, std::span<std::byte> b) {
    return io_->ReadBlock(d, s.value, lba, b);
  };
  if (SchemeFor(seg.entry.scheme).ReadAlternative(geometry_, s, pos, reader, valid, out)) {
    if (count) ++stats_.reconstructions;
    if (mismatch && mode == ReadMode::kRepair && io_->writable(p.device)) {
      io_->Write({{p.device, p.lba, out}});
      ++stats_.repairs;
    }
    return Status::Ok();
  }
  if (count) ++stats_.data_loss;
  return Status::DataLoss("segment " + std::to_string(s.value) + " position " +
                          std::to_string(pos) + ": no copy matches its CRC");
}

uint32_t ElasticArray::ReadRowLocked(SegmentId s, uint32_t r, AlignedBuffer* row, ReadMode mode) {
  const Segment& seg = *segments_[s.value];
  const uint64_t rb = geometry_.row_blocks();
  std::fill(row->begin(), row->end(), std::byte{0});
  uint32_t unreadable = 0;
  for (uint64_t i = 0; i < rb && r * rb + i < seg.frontier; ++i) {
    const auto pos = static_cast<uint32_t>(r * rb + i);
    std::span<std::byte> out(row->data() + BlocksToBytes(i), kBlockSize);
    const uint32_t want = seg.crc[pos];
    if (!ReadVerifiedLocked(
             s, pos, out, [&](auto b) { return Crc32c(b) == want; }, mode)
             .ok()) {
      std::fill(out.begin(), out.end(), std::byte{0});
      ++unreadable;
    }
  }
  return unreadable;
}

Status ElasticArray::Read(SegmentId s, uint32_t position, std::span<std::byte> out) {
  if (out.size() != kBlockSize) return Status::InvalidArgument("read takes one 4 KiB block");
  {
    // The fast path: nothing that moves or rewrites blocks (writes, conversion, rebuild,
    // free) runs while the lock is shared, and the primary copy stays where it is.
    std::shared_lock lock(mu_);
    if (s.value >= segments_.size() || position >= segments_[s.value]->frontier) {
      return Status::InvalidArgument("segment " + std::to_string(s.value) + " position " +
                                     std::to_string(position) + " was never written");
    }
    const Segment& seg = *segments_[s.value];
    if (const std::byte* b = UnwrittenBlockLocked(seg, position)) {
      std::memcpy(out.data(), b, kBlockSize);
      return Status::Ok();
    }
    const Place p = geometry_.Primary(s, position);
    if (io_->state(p.device) == DeviceState::kOk &&
        io_->device(p.device)->Read(Lba(p.lba), out).ok() && Crc32c(out) == seg.crc[position]) {
      fast_reads_[p.device].fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
  }
  std::lock_guard lock(mu_);
  if (s.value >= segments_.size() || position >= segments_[s.value]->frontier) {
    return Status::InvalidArgument("segment " + std::to_string(s.value) + " position " +
                                   std::to_string(position) + " was never written");
  }
  const uint32_t want = segments_[s.value]->crc[position];
  Status st = ReadVerifiedLocked(
      s, position, out, [&](auto b) { return Crc32c(b) == want; }, ReadMode::kRepair);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return st;
}

void ElasticArray::ForEachBlock(
    const std::function<void(SegmentId, uint32_t, uint64_t, uint64_t)>& fn) const {
  std::lock_guard lock(mu_);
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Segment& seg = *segments_[i];
    for (uint32_t pos = 0; pos < seg.frontier; ++pos) {
      if (!seg.is_summary[pos]) fn(SegmentId(i), pos, seg.tags[pos].first, seg.tags[pos].second);
    }
  }
}

// ---------------------------------------------------------------- conversion

Status ElasticArray::Convert(SegmentId s, SegmentScheme to) {
  if (to == SegmentScheme::kFree) return Status::InvalidArgument("convert to raid5 or raid10");
  // User I/O goes on during a conversion: the segment is sealed (its data does not
  // change), the new redundancy goes where the old scheme keeps nothing, and the copying
  // holds the array lock only shared, a block or a chunk at a time (step 1). What could
  // change meanwhile is checked under the lock before every block, chunk and the flip: the
  // segment freed (and maybe reborn), or a device failing or being rebuilt (the new
  // redundancy would then miss a device): the conversion stops with Busy, and what it
  // wrote stays unused (a later conversion or free overwrites it).
  uint64_t incarnation = 0;
  SegmentScheme from;
  uint32_t rows = 0;
  std::vector<DeviceState> states;
  auto device_states = [&] {
    std::vector<DeviceState> v;
    for (uint32_t d = 0; d < io_->count(); ++d) v.push_back(io_->state(d));
    return v;
  };
  const uint64_t rb = geometry_.row_blocks();
  {
    std::lock_guard lock(mu_);
    if (s.value >= segments_.size()) return Status::InvalidArgument("no such segment");
    Segment& seg = *segments_[s.value];
    if (seg.entry.scheme == SegmentScheme::kFree) return Status::InvalidArgument("segment is free");
    if (seg.open) return Status::Busy("segment is open; seal it first");
    if (seg.converting) return Status::Busy("segment is being converted already");
    from = seg.entry.scheme;
    if (from == to) return Status::Ok();
    if (!seg.in_flight.empty()) {  // the seal's last row: the copying reads it from the devices
      DrainRows();
      ApplyRowResultsLocked();
    }
    // Trims that wait for a flush must not meet the redundancy written below; and a seal
    // that waits for one is written first, so that the flip below is the segment's newest
    // record (a bitmap checkpoint records a segment whose seal waits as it was before).
    // The device states are taken before: a device that fails in that flush stops the
    // conversion (Busy) like one that fails during it.
    states = device_states();
    if (unmirror_awaiting_flush_.count(s.value) || seals_awaiting_flush_.count(s.value))
      FlushDevicesLocked();
    seg.converting = true;
    incarnation = seg.incarnation;
    rows = static_cast<uint32_t>((seg.frontier + rb - 1) / rb);
  }
  Segment& seg = *segments_[s.value];
  // Under the lock: the segment is still the one being converted, and nothing moved.
  auto still = [&]() -> Status {
    if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
    if (seg.incarnation != incarnation)
      return Status::InvalidArgument("segment was freed during the conversion");
    if (device_states() != states)
      return Status::Busy("a device changed state during the conversion");
    return Status::Ok();
  };
  auto finish = [&](Status st) {  // under the lock; the flag is ours even if the segment was reborn
    seg.converting = false;
    return st;
  };
  // 1. Build the new redundancy beside the old, from verified data, a row at a time.
  // Reads and writes run under the lock *shared*: user reads go on beside them, and a
  // user write waits for at most one chunk's reads or one chunk's write (the lock prefers
  // writers, so each gets in between). Whatever could change what they touch takes the
  // lock exclusively: freeing the segment, a device failing or being replaced, any write
  // to the segment. The exclusive lock is taken here only to change the array's state: a
  // block whose healthy primary copy does not verify (read again through the path that
  // reconstructs and repairs it), a device error (which fails the device), the counters.
  // (Under the exclusive lock throughout, a 192 KiB row of reads, CRCs and writes at a
  // time, a conversion at 100 MB/s cost user reads 38% and writes 28% of their IOPS.)
  // Each block is also read in the form its drive stores it (StoredBlock): where the new
  // redundancy is a copy (RAID10's mirrors), the copy's drive stores that record as it
  // is, without compressing it again, as a drive's copy offload would. The data is still
  // checked against its CRC on the way, so a bad copy is repaired from the old redundancy
  // before it is mirrored.
  AlignedBuffer row(BlocksToBytes(rb)), scratch;
  std::vector<StoredBlock> stored(rb);
  std::vector<DeviceWrite> writes;
  std::vector<std::pair<uint32_t, Status>> errors;  // device errors met under the shared lock
  std::vector<uint64_t> device_writes(io_->count(), 0);
  uint64_t written_bytes = 0;
  auto account = [&] {  // under the exclusive lock
    for (auto& [d, st] : errors) io_->Note(d, st);
    errors.clear();
    for (uint32_t d = 0; d < io_->count(); ++d)
      io_->CountWrites(d, std::exchange(device_writes[d], 0));
    stats_.conversion_bytes += std::exchange(written_bytes, 0);
  };
  auto unchanged = [&] {  // under the lock, shared or not; per block, so without allocating
    if (seg.incarnation != incarnation) return false;
    for (uint32_t d = 0; d < io_->count(); ++d) {
      if (io_->state(d) != states[d]) return false;
    }
    return true;
  };
  for (uint32_t r = 0; r < rows; ++r) {
    std::fill(row.begin(), row.end(), std::byte{0});
    for (StoredBlock& b : stored) b.bytes.clear();  // beyond the frontier: zeros, no stored form
    const uint64_t row_end = std::min<uint64_t>(rb, seg.frontier - uint64_t{r} * rb);
    for (uint64_t i = 0; i < row_end;) {
      // Up to a chunk of blocks is read per hold of the shared lock: taken per block, a
      // waiting writer was woken on every release, and the lock's traffic was ~40% of
      // the converting thread's time (perf, randwrite beside a 100 MB/s conversion).
      // Stops at the first block that does not verify (or at a change).
      const uint64_t end = std::min<uint64_t>(row_end, i + geometry_.chunk_blocks);
      {
        std::shared_lock lock(mu_);
        const bool stop = !unchanged();
        for (; !stop && i < end; ++i) {
          const auto pos = static_cast<uint32_t>(r * rb + i);
          std::span<std::byte> out(row.data() + BlocksToBytes(i), kBlockSize);
          const Place p = geometry_.Primary(s, pos);
          if (io_->state(p.device) != DeviceState::kOk) break;
          Status st = io_->device(p.device)->ReadStored(Lba(p.lba), out, &stored[i]);
          fast_reads_[p.device].fetch_add(1, std::memory_order_relaxed);
          if (!st.ok()) {
            errors.emplace_back(p.device, std::move(st));
            break;
          }
          if (Crc32c(out) != seg.crc[pos]) break;
        }
        if (i == end) continue;  // the whole piece read and verified
      }
      // Block i did not verify (or could not be read, or something changed): read again
      // under the exclusive lock, through the path that reconstructs and repairs it.
      const auto pos = static_cast<uint32_t>(r * rb + i);
      std::span<std::byte> out(row.data() + BlocksToBytes(i), kBlockSize);
      stored[i].bytes.clear();
      std::lock_guard lock(mu_);
      account();
      if (Status st = still(); !st.ok()) return finish(st);
      const uint32_t want = seg.crc[pos];
      if (!ReadVerifiedLocked(
               s, pos, out, [&](auto b) { return Crc32c(b) == want; }, ReadMode::kRepair)
               .ok()) {
        return finish(Status::DataLoss("convert: segment " + std::to_string(s.value) +
                                       " position " + std::to_string(pos) +
                                       ": no copy matches its CRC"));
      }
      ++i;
    }
    writes.clear();
    SchemeFor(to).RowWrites(geometry_, s, r, row, false, &scratch, &writes);
    for (const DeviceWrite& w : writes) {
      bool stop = false;
      {
        std::shared_lock lock(mu_);
        stop = !unchanged();
        if (!stop) changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
        if (!stop && io_->writable(w.device)) {
          // A write of the row's own blocks (a copy) carries their stored forms.
          std::span<const StoredBlock> forms;
          if (w.data.data() >= row.data() && w.data.data() < row.data() + row.size()) {
            forms = std::span(stored).subspan(BytesToBlocks(w.data.data() - row.data()),
                                              BytesToBlocks(w.data.size()));
          }
          Status st = io_->device(w.device)->WriteStored(Lba(w.lba), w.data, forms);
          changes_->Mark(w.device, w.lba, BytesToBlocks(w.data.size()));
          ++device_writes[w.device];
          written_bytes += w.data.size();
          if (!st.ok()) errors.emplace_back(w.device, std::move(st));
        }
      }
      if (stop || !errors.empty()) {
        std::lock_guard lock(mu_);
        account();
        if (Status st = still(); !st.ok()) return finish(st);
      }
    }
  }
  // 2. Durable before the flip; 3. flip (journalled, flushed); 4. drop the old. The two
  // device flushes run under the lock shared, like the copying: a flush of drive files
  // takes milliseconds, and under the exclusive lock (twice per segment) it stalled every
  // reader and writer of the array. The exclusive lock is held only to flip the entry and
  // write its journal record, and then to trim. The segment stays marked as converting
  // until then, so no other conversion of it can meet the trims.
  // A checkpoint written before a flush is durable after it, as after Flush(): without
  // this, a loop of conversions (with no user flush) filled the journal ring, and the
  // ring's own flush and checkpoint then ran under the exclusive lock, stalling writers.
  // Each flush runs without the array lock, as Flush()'s does: under it even shared, a
  // drive flush (milliseconds) kept every appending writer out, twice per segment. What
  // it must cover was written before the device set is taken; what may change meanwhile
  // (the segment freed, a device failing) is checked again under the exclusive lock.
  uint64_t flushed_checkpoint = 0;
  std::vector<Backend*> devices;
  {
    std::shared_lock lock(mu_);
    if (unchanged()) {  // else still() below stops the conversion
      flushed_checkpoint = pending_checkpoint_seq_;
      devices = io_->WritableDevices();
    }
  }
  if (!devices.empty()) io_->FlushDevices(devices, &errors);
  std::vector<DeviceTrim> trims;
  {
    std::lock_guard lock(mu_);
    if (errors.empty()) PromoteCheckpointLocked(flushed_checkpoint);
    account();
    if (Status st = still(); !st.ok()) return finish(st);
    seg.entry.scheme = to;
    if (Status st = JournalLocked(s.value, Durable::kAtNextFlush); !st.ok()) return finish(st);
    SchemeFor(from).RedundancyTrims(geometry_, s, &trims);
  }
  bool flipped_durably = false;  // then the old redundancy may go
  devices.clear();
  {
    std::shared_lock lock(mu_);
    flushed_checkpoint = pending_checkpoint_seq_;
    if (seg.incarnation == incarnation) {  // else freed: the free's own trims cover these
      devices = io_->WritableDevices();
      flipped_durably = true;
    }
  }
  if (flipped_durably) io_->FlushDevices(devices, &errors);
  std::lock_guard lock(mu_);
  if (flipped_durably && errors.empty()) PromoteCheckpointLocked(flushed_checkpoint);
  account();
  if (flipped_durably && seg.incarnation == incarnation) io_->Trim(trims);
  ++(to == SegmentScheme::kRaid10 ? stats_.conversions_to_raid10 : stats_.conversions_to_raid5);
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(finish(WriteSuperblocksLocked()));
  return finish(Status::Ok());
}

// ---------------------------------------------------------------- failure and rebuild

Status ElasticArray::FailDevice(uint32_t device) {
  std::lock_guard lock(mu_);
  if (device >= io_->count()) return Status::InvalidArgument("no device " + std::to_string(device));
  io_->Fail(device);
  io_->take_failures_changed();
  return WriteSuperblocksLocked();
}

Status ElasticArray::Replace(uint32_t device, Backend* fresh, uint64_t rate_bytes_per_sec,
                             const std::function<void(const RebuildProgress&)>& progress) {
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, fresh));
    ERAID_RETURN_IF_ERROR(
        fresh->Trim(Lba(0), geometry_.device_blocks_needed()).WithContext("replace: trim"));
  }
  return Rebuild(device, fresh, nullptr, rate_bytes_per_sec, progress, nullptr);
}

Result<ReAddReport> ElasticArray::ReAdd(
    uint32_t device, Backend* returning, uint64_t rate_bytes_per_sec,
    const std::function<void(const RebuildProgress&)>& progress) {
  std::vector<bool> owed;
  {
    std::lock_guard lock(mu_);
    if (device >= io_->count())
      return Status::InvalidArgument("no device " + std::to_string(device));
    if (io_->state(device) != DeviceState::kFailed) {
      return Status::InvalidArgument("device " + std::to_string(device) +
                                     " is not failed: nothing to re-add");
    }
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, returning));
    if (!changes_->valid(device)) {
      return Status::InvalidArgument(
          "device " + std::to_string(device) +
          " failed before the array was opened: what it lacks is not known; "
          "bring it back with replace (a full rebuild)");
    }
    // Who it is: this array's device `device`, and not an image older than the drive that
    // last joined in that place (a drive replaced since, coming back, would lack all the
    // replacement received).
    std::optional<Superblock> sb;
    std::vector<std::byte> block(kBlockSize);
    for (uint64_t slot = 0; slot < 2; ++slot) {
      if (!returning->Read(Lba(slot), block).ok()) continue;
      auto d = DecodeSuperblock(block);
      if (d.ok() && (!sb || d->generation > sb->generation)) sb = *d;
    }
    const std::string who = "the drive offered as device " + std::to_string(device);
    if (!sb) return Status::InvalidArgument(who + " holds no array superblock: use replace");
    if (sb->array_id != array_id_)
      return Status::InvalidArgument(who + " belongs to another array: use replace");
    if (sb->device_index != device) {
      return Status::InvalidArgument(who + " is device " + std::to_string(sb->device_index) +
                                     " of this array: use replace");
    }
    if (sb->generation < joined_generation_[device] || sb->generation > super_generation_) {
      return Status::InvalidArgument(
          who + " has superblock generation " + std::to_string(sb->generation) +
          ", not one of the drive that left (" + std::to_string(joined_generation_[device]) + ".." +
          std::to_string(super_generation_) + "): use replace");
    }
    owed = changes_->Missing(device);
  }
  ReAddReport report;
  ERAID_RETURN_IF_ERROR(Rebuild(device, returning, &owed, rate_bytes_per_sec, progress, &report));
  return report;
}

Status ElasticArray::CheckRebuildLocked(uint32_t device, Backend* target) const {
  if (device >= io_->count()) return Status::InvalidArgument("no device " + std::to_string(device));
  if (target->capacity_blocks() < geometry_.device_blocks_needed()) {
    return Status::InvalidArgument("the new drive is smaller than the array's devices");
  }
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (d != device && io_->state(d) != DeviceState::kOk) {
      return Status::Busy("device " + std::to_string(d) + " is not healthy; one rebuild at a time");
    }
  }
  return Status::Ok();
}

Status ElasticArray::Rebuild(uint32_t device, Backend* target, const std::vector<bool>* only,
                             uint64_t rate_bytes_per_sec,
                             const std::function<void(const RebuildProgress&)>& progress,
                             ReAddReport* report) {
  RebuildProgress prog;
  uint64_t start_ns = clock_.NowNanos();
  {
    std::lock_guard lock(mu_);
    ERAID_RETURN_IF_ERROR(CheckRebuildLocked(device, target));
    io_->set_device(device, target);
    io_->set_state(device, DeviceState::kRebuilding);
    io_->set_rebuild_cursor(0);
    // From here every write reaches the device (it is writable while rebuilding), and
    // what it lacked before is rebuilt below: its marks start afresh.
    changes_->Restart(device);
    ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
    ERAID_RETURN_IF_ERROR(CheckpointBitmapLocked());
    prog.segments_total = geometry_.segments;
  }
  const uint64_t rb = geometry_.row_blocks();
  AlignedBuffer zeros;  // a re-add's count of what a full rebuild would have written
  for (uint32_t i = 0; i < geometry_.segments; ++i) {
    const bool owed = only == nullptr || (*only)[i];
    {
      std::lock_guard lock(mu_);  // segment by segment: user I/O interleaves between them
      // Rows detached while the device was failed skip it; their blocks are rebuilt here
      // from the others, once written there.
      if (!segments_[i]->in_flight.empty()) {
        DrainRows();
        ApplyRowResultsLocked();
      }
      if (io_->state(device) != DeviceState::kRebuilding) return Status::Aborted("rebuild failed");
      Segment& seg = *segments_[i];
      const SegmentId s(i);
      const uint64_t done_rows = seg.open ? seg.row : (seg.frontier + rb - 1) / rb;
      if (report != nullptr && seg.entry.scheme != SegmentScheme::kFree) {
        if (zeros.size() == 0) zeros = AlignedBuffer(BlocksToBytes(rb));
        AlignedBuffer scratch;
        for (uint32_t r = 0; r < done_rows; ++r) {
          std::vector<DeviceWrite> writes;
          SchemeFor(seg.entry.scheme).RowWrites(geometry_, s, r, zeros, true, &scratch, &writes);
          for (const auto& w : writes)
            report->total_bytes += w.device == device ? w.data.size() : 0;
        }
        report->segments_total += 1;
      }
      if (owed && only != nullptr) {
        // What the returning drive holds of this segment is stale or torn: gone first.
        Status st = target->Trim(Lba(geometry_.SegmentStart(s)), geometry_.segment_span_blocks());
        io_->Note(device, st);
        if (!st.ok()) return Status::Aborted("rebuild failed: " + st.ToString());
      }
      if (owed && seg.entry.scheme != SegmentScheme::kFree) {
        io_->FlashAllocAll(geometry_.SegmentStart(s), geometry_.segment_span_blocks());
        AlignedBuffer row(BlocksToBytes(rb)), scratch;
        for (uint32_t r = 0; r < done_rows; ++r) {
          if (ReadRowLocked(s, r, &row, ReadMode::kNoRepair) > 0) {
            return Status::DataLoss("rebuild: segment " + std::to_string(i) + " row " +
                                    std::to_string(r) + " cannot be reconstructed");
          }
          std::vector<DeviceWrite> writes, mine;
          SchemeFor(seg.entry.scheme).RowWrites(geometry_, s, r, row, true, &scratch, &writes);
          for (const auto& w : writes) {
            if (w.device == device) mine.push_back(w);
          }
          io_->Write(mine);
          for (const auto& w : mine) prog.bytes_written += w.data.size();
        }
        if (seg.open && seg.row_synced > 0) {  // the flushed part of the open row, both copies
          const uint64_t row_start = uint64_t{seg.row} * rb;
          std::vector<DeviceWrite> mine;
          for (uint64_t pos = row_start; pos < row_start + seg.row_synced; ++pos) {
            std::span<const std::byte> data(seg.row_buf.data() + BlocksToBytes(pos - row_start),
                                            kBlockSize);
            for (Place p : {geometry_.Primary(s, pos), geometry_.Mirror(s, pos)}) {
              if (p.device == device) mine.push_back({p.device, p.lba, data});
            }
          }
          io_->Write(mine);
          for (const auto& w : mine) prog.bytes_written += w.data.size();
        }
        if (report != nullptr) report->segments_resynced += 1;
      }
      io_->set_rebuild_cursor(i + 1);
      prog.segments_done = i + 1;
      if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
    }
    if (progress && (owed || i + 1 == geometry_.segments)) progress(prog);
    if (rate_bytes_per_sec > 0) {
      uint64_t due_ns = start_ns + prog.bytes_written * 1'000'000'000ull / rate_bytes_per_sec;
      uint64_t now = clock_.NowNanos();
      if (due_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(due_ns - now));
    }
  }
  std::lock_guard lock(mu_);
  FlushDevicesLocked();
  if (io_->state(device) != DeviceState::kRebuilding) return Status::Aborted("rebuild failed");
  io_->set_state(device, DeviceState::kOk);
  ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  joined_generation_[device] = super_generation_;
  if (report != nullptr) report->resynced_bytes = prog.bytes_written;
  return Status::Ok();
}

Result<ScrubReport> ElasticArray::Scrub() {
  std::lock_guard lock(mu_);
  DrainRows();  // rows still on their way would read as mismatches
  ApplyRowResultsLocked();
  ScrubReport report;
  const ArrayStats before = stats_;
  const uint64_t rb = geometry_.row_blocks();
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    Segment& seg = *segments_[i];
    if (seg.entry.scheme == SegmentScheme::kFree || seg.open) continue;
    const SegmentId s(i);
    ++report.segments;
    const Scheme& scheme = SchemeFor(seg.entry.scheme);
    const auto rows = static_cast<uint32_t>((seg.frontier + rb - 1) / rb);
    AlignedBuffer row(BlocksToBytes(rb)), scratch;
    for (uint32_t r = 0; r < rows; ++r) {
      report.blocks_checked += std::min<uint64_t>(rb, seg.frontier - uint64_t{r} * rb);
      if (ReadRowLocked(s, r, &row, ReadMode::kRepair) > 0)
        continue;  // counted as unrepairable below
      BlockReader reader = [&](uint32_t d, uint64_t lba, std::span<std::byte> b) {
        return io_->ReadBlock(d, s.value, lba, b);
      };
      if (!scheme.RedundancyAgrees(geometry_, s, r, row, reader)) {
        ++(seg.entry.scheme == SegmentScheme::kRaid5 ? report.parity_mismatches
                                                     : report.mirror_mismatches);
        if (report.findings.size() < 16) {
          report.findings.push_back("segment " + std::to_string(i) + " row " + std::to_string(r) +
                                    ": " + SchemeName(seg.entry.scheme) +
                                    " redundancy disagrees with the data");
        }
        std::vector<DeviceWrite> writes;
        scheme.RowWrites(geometry_, s, r, row, false, &scratch, &writes);
        io_->Write(writes);
        ++report.repaired;
      }
    }
  }
  FlushDevicesLocked();
  report.crc_mismatches = stats_.crc_mismatches - before.crc_mismatches;
  report.repaired += stats_.repairs - before.repairs;
  report.unrepairable = stats_.data_loss - before.data_loss;
  if (io_->take_failures_changed()) ERAID_RETURN_IF_ERROR(WriteSuperblocksLocked());
  return report;
}

// ---------------------------------------------------------------- statistics

ArrayStats ElasticArray::stats() const {
  std::lock_guard lock(mu_);
  ArrayStats s = stats_;
  for (uint32_t d = 0; d < s.devices.size(); ++d)
    s.devices[d].reads += fast_reads_[d].load(std::memory_order_relaxed);
  s.packed_blocks = packed_blocks_.load(std::memory_order_relaxed);
  s.row_writer_rows = row_writer_rows_.load(std::memory_order_relaxed);
  s.segments = geometry_.segments;
  s.free_segments = s.raid5_segments = s.raid10_segments = s.open_segments = 0;
  s.user_blocks = s.raid10_user_blocks = 0;
  s.untrimmed_free_segments = static_cast<uint32_t>(frees_awaiting_flush_.size());
  s.pending_unmirror_trims = 0;
  for (const auto& [seg, t] : unmirror_awaiting_flush_) s.pending_unmirror_trims += t.size();
  for (const auto& seg : segments_) {
    switch (seg->entry.scheme) {
      case SegmentScheme::kFree:
        ++s.free_segments;
        continue;
      case SegmentScheme::kRaid5:
        ++(seg->open ? s.open_segments : s.raid5_segments);
        break;
      case SegmentScheme::kRaid10:
        ++(seg->open ? s.open_segments : s.raid10_segments);
        break;
    }
    const uint64_t data = seg->is_summary.size() - seg->summaries;
    s.user_blocks += data;
    if (seg->entry.scheme == SegmentScheme::kRaid10) s.raid10_user_blocks += data;
  }
  uint32_t down = io_->failed_count();
  s.degraded = down > 0;
  s.data_at_risk = down > 1;
  return s;
}

SegmentInfo ElasticArray::segment_info(SegmentId s, bool usage) const {
  // Shared: the device queries below take a while (a scheduler pass asks for every
  // segment), and user reads need not wait for them.
  std::shared_lock lock(mu_);
  SegmentInfo info;
  const Segment& seg = *segments_.at(s.value);
  info.scheme = seg.entry.scheme;
  info.open = seg.open;
  info.sealed = seg.entry.sealed;
  info.frontier = seg.frontier;
  info.generation = seg.entry.generation;
  info.summaries_lost = seg.summaries_lost;
  if (seg.entry.scheme == SegmentScheme::kFree || !usage) return info;
  RangeUsage data, parity, all;
  for (uint32_t d = 0; d < io_->count(); ++d) {
    if (!io_->writable(d)) continue;
    auto u = io_->device(d)->Usage(Lba(geometry_.SegmentStart(s)), geometry_.segment_span_blocks());
    if (!u) return info;  // devices that cannot tell
    all.mapped_blocks += u->mapped_blocks;
    all.stored_bytes += u->stored_bytes;
  }
  for (uint32_t row = 0; row < geometry_.rows_per_slot; ++row) {
    for (uint32_t j = 0; j < geometry_.data_devices(); ++j) {
      Place p = geometry_.Primary(s, geometry_.PositionOf(row, j, 0));
      if (!io_->writable(p.device)) continue;
      auto u = io_->device(p.device)->Usage(Lba(p.lba), geometry_.chunk_blocks);
      data.mapped_blocks += u->mapped_blocks;
      data.stored_bytes += u->stored_bytes;
    }
    Place q = geometry_.Parity(s, row, 0);
    if (seg.entry.scheme == SegmentScheme::kRaid5 && io_->writable(q.device)) {
      auto u = io_->device(q.device)->Usage(Lba(q.lba), geometry_.chunk_blocks);
      parity.mapped_blocks += u->mapped_blocks;
      parity.stored_bytes += u->stored_bytes;
    }
  }
  info.alpha_usr = data.ratio();
  info.alpha_pty = parity.ratio();
  info.physical_bytes = all.stored_bytes;
  return info;
}

}  // namespace eraid
