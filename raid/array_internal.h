// The array's private parts, shared by its source files (array*.cc): the per-segment
// state, a row on its way to the devices, and device access (ElasticArray::Io).
// Nothing outside raid/ includes this.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "raid/array.h"
#include "raid/scheme.h"

namespace eraid {
namespace array_internal {

constexpr uint32_t kNoBatch = UINT32_MAX;
inline uint64_t BitmapSlotLba(uint32_t slot, uint32_t segments) {
  return 2 + uint64_t{slot} * raid_format::BitmapBlocks(segments);
}
inline uint64_t JournalLba(uint64_t seq, uint32_t segments) {
  return 2 + 2ull * raid_format::BitmapBlocks(segments) + seq % raid_format::kJournalBlocks;
}
// Whether `part` lies within `whole` (a device write's data within a row buffer).
inline bool Inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return !whole.empty() && part.data() >= whole.data() &&
         part.data() + part.size() <= whole.data() + whole.size();
}

}  // namespace array_internal

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
  raid_format::SegmentEntry entry;
  bool open = false;
  uint32_t frontier = 0;
  // Per written position; empty for a sealed segment whose CRCs left the cache (then
  // its summaries hold them: LoadCrcsLocked).
  std::vector<uint32_t> crc;
  uint64_t crc_counted = 0;  // crc's capacity in bytes, as crc_bytes_ counts it
  mutable std::atomic<bool> crc_used{
      false};  // the CLOCK's reference bit (set by shared-lock reads)
  bool crc_resident() const { return crc.size() >= frontier; }
  std::vector<bool> is_summary;
  // Per position, (lba, time) as the summaries held them when Open found this segment;
  // empty once TakeRecoveredBlocks has handed them over, and for segments written since.
  std::vector<std::pair<uint64_t, uint64_t>> recovered_tags;
  uint32_t summaries = 0;  // true entries of is_summary (stats() asks every segment)
  // Open segments only.
  AlignedBuffer row_buf;    // the current row; zero beyond the frontier
  uint32_t row = 0;         // which row row_buf holds
  uint32_t row_synced = 0;  // positions of that row already on disk (via a flush)
  uint32_t batch_pos = array_internal::kNoBatch;  // summary position of the open batch
  std::vector<raid_format::SummaryEntry> batch;
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
    recovered_tags.clear();
    is_summary.clear();
    summaries = 0;
    row_buf.clear();
    row = row_synced = 0;
    batch_pos = array_internal::kNoBatch;
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
  Backend* device(uint32_t d) const {
    ERAID_CHECK(d < devices_.size());
    return devices_[d];
  }
  // A Flush() reads the device set without the array lock (FlushDevices), so a swap
  // also takes this one.
  void set_device(uint32_t d, Backend* b) {
    ERAID_CHECK(d < devices_.size() && b != nullptr);
    std::lock_guard lock(device_set_mu_);
    devices_[d] = b;
  }
  DeviceState state(uint32_t d) const {
    ERAID_CHECK(d < stats_->devices.size());
    return stats_->devices[d].state;
  }
  void set_state(uint32_t d, DeviceState s) {
    ERAID_CHECK(d < stats_->devices.size());
    stats_->devices[d].state = s;
  }
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
    ERAID_CHECK(d < stats_->devices.size());
    if (s.code() == StatusCode::kIoError || s.code() == StatusCode::kAborted) {
      ++stats_->devices[d].errors;
      Fail(d);
    }
  }

  bool ReadBlock(uint32_t d, uint32_t segment, uint64_t lba, std::span<std::byte> out) {
    if (!readable(d, segment)) return false;
    ERAID_CHECK(out.size() == kBlockSize);
    ++stats_->devices[d].reads;
    Status s = devices_[d]->Read(Lba(lba), out);
    Note(d, s);
    return s.ok();
  }

  // ReadBlock of blocks of segment `segment` on several devices, all in flight together
  // (ReadPerDevice: each device's share in one batch): a read waits for the slowest device,
  // not for the sum of them. One block is a ReadBlock. (*ok)[i] as ReadBlock returns it.
  void ReadAcross(uint32_t segment, std::span<const BlockRead> reads, std::vector<bool>* ok) {
    std::vector<Status> results;
    std::vector<bool> asked;
    ReadPerDevice(segment, reads, &results, &asked);
    ok->assign(reads.size(), false);
    for (size_t i = 0; i < reads.size(); ++i) {
      if (!asked[i]) continue;
      ++stats_->devices[reads[i].device].reads;
      Note(reads[i].device, results[i]);
      (*ok)[i] = results[i].ok();
    }
  }
  // The reads of ReadAcross and nothing else: no counts, no device failed by an error (a
  // caller under the shared lock counts in atomics and leaves errors to a retry under the
  // exclusive lock). (*asked)[i]: the device was readable, and results[i] is its answer.
  void SubmitAcross(uint32_t segment, std::span<const BlockRead> reads,
                    std::vector<Status>* results, std::vector<bool>* asked) const {
    results->assign(reads.size(), Status::Ok());
    asked->assign(reads.size(), false);
    struct Pending {
      explicit Pending(size_t n) : done(n), results(n) {}
      std::vector<std::atomic<bool>> done;
      std::vector<Status> results;
    };
    std::shared_ptr<Pending> pending;
    for (size_t i = 0; i < reads.size(); ++i) {
      const uint32_t d = reads[i].device;
      ERAID_CHECK(d < devices_.size());
      if (!readable(d, segment)) continue;
      (*asked)[i] = true;
      if (reads.size() == 1) {  // nothing to wait beside: the synchronous read
        (*results)[i] = devices_[d]->Read(Lba(reads[i].lba), reads[i].out);
        return;
      }
      if (!pending) pending = std::make_shared<Pending>(reads.size());
      devices_[d]->SubmitRead(Lba(reads[i].lba), reads[i].out, [pending, i](Status st) {
        pending->results[i] = std::move(st);
        pending->done[i].store(true, std::memory_order_release);
      });
    }
    for (size_t i = 0; i < reads.size(); ++i) {
      if (!(*asked)[i] || !pending) continue;
      while (!pending->done[i].load(std::memory_order_acquire))
        devices_[reads[i].device]->Poll(true);
      (*results)[i] = std::move(pending->results[i]);
    }
  }

  // SubmitAcross's answer, each device's share asked for in one batch
  // (Backend::SubmitReadMany), every device's batch in flight together; staged, then
  // copied to each read's `out`. One read is SubmitAcross's synchronous read.
  void ReadPerDevice(uint32_t segment, std::span<const BlockRead> reads,
                     std::vector<Status>* results, std::vector<bool>* asked) const {
    if (reads.size() == 1) return SubmitAcross(segment, reads, results, asked);
    results->assign(reads.size(), Status::Ok());
    asked->assign(reads.size(), false);
    struct Batch {
      std::vector<size_t> which;  // the reads it serves
      std::vector<Lba> lbas;
      std::vector<std::byte> buf;
      std::vector<Status> got;
      std::atomic<bool> done{false};
    };
    // Shared with the callbacks, which another thread polling the device may run.
    auto batches = std::make_shared<std::vector<Batch>>(devices_.size());
    for (size_t i = 0; i < reads.size(); ++i) {
      ERAID_CHECK(reads[i].device < devices_.size());
      if (readable(reads[i].device, segment)) (*batches)[reads[i].device].which.push_back(i);
    }
    for (uint32_t d = 0; d < devices_.size(); ++d) {
      Batch& b = (*batches)[d];
      if (b.which.empty()) continue;
      for (size_t i : b.which) b.lbas.push_back(Lba(reads[i].lba));
      b.buf.resize(BlocksToBytes(b.lbas.size()));
      b.got.assign(b.lbas.size(), Status::Ok());
      devices_[d]->SubmitReadMany(b.lbas, b.buf, b.got, [batches, d](const Status&) {
        (*batches)[d].done.store(true, std::memory_order_release);
      });
    }
    for (uint32_t d = 0; d < devices_.size(); ++d) {
      Batch& b = (*batches)[d];
      if (b.which.empty()) continue;
      while (!b.done.load(std::memory_order_acquire)) devices_[d]->Poll(true);
      for (size_t k = 0; k < b.which.size(); ++k) {
        const size_t i = b.which[k];
        (*asked)[i] = true;
        (*results)[i] = std::move(b.got[k]);
        if ((*results)[i].ok())
          std::memcpy(reads[i].out.data(), b.buf.data() + BlocksToBytes(k), kBlockSize);
      }
    }
  }

  // ReadBlock of many blocks of one device at once (Backend::ReadMany); ok[i] as
  // ReadBlock returns it for blocks[i], read into the i-th 4 KiB of `out`.
  void ReadBlocks(uint32_t d, std::span<const uint32_t> segments, std::span<const Lba> blocks,
                  std::span<std::byte> out, std::vector<bool>* ok) {
    ERAID_CHECK(d < devices_.size() && segments.size() == blocks.size() &&
                out.size() >= BlocksToBytes(blocks.size()));
    ok->assign(blocks.size(), false);
    std::vector<size_t> which;
    std::vector<Lba> lbas;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!readable(d, segments[i])) continue;
      which.push_back(i);
      lbas.push_back(blocks[i]);
    }
    if (which.empty()) return;
    std::vector<std::byte> buf(BlocksToBytes(lbas.size()));
    std::vector<Status> results(lbas.size());
    stats_->devices[d].reads += lbas.size();
    devices_[d]->ReadMany(lbas, buf, results);
    for (size_t k = 0; k < which.size(); ++k) {
      Note(d, results[k]);
      if (!results[k].ok()) continue;
      (*ok)[which[k]] = true;
      std::memcpy(out.data() + BlocksToBytes(which[k]), buf.data() + BlocksToBytes(k), kBlockSize);
    }
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
  void CountWrites(uint32_t d, uint64_t n) {
    ERAID_CHECK(d < stats_->devices.size());
    stats_->devices[d].writes += n;
  }

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

  // Device d's blocks with their stored forms, read without the array lock (a
  // conversion's: it checks what it read against the segment afterwards, under the lock).
  // The device set cannot change meanwhile (set_device).
  void ReadStoredUnlocked(uint32_t d, std::span<const Lba> lbas, std::span<std::byte> out,
                          std::span<StoredBlock> stored, std::span<Status> results) {
    ERAID_CHECK(d < devices_.size() && stored.size() == lbas.size() &&
                results.size() == lbas.size() && out.size() >= BlocksToBytes(lbas.size()));
    std::shared_lock lock(device_set_mu_);
    devices_[d]->ReadStoredMany(lbas, out, stored, results);
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
      if (packed && array_internal::Inside(w.data, base)) {
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

}  // namespace eraid
