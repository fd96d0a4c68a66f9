// NamedVolumes: named, thinly provisioned volumes on one array — what LVM's thin volumes or
// SPDK's lvols give, here as extents of the log's LBA space.
//
// The log (LogVolume, log_volume.h) has one map over an LBA space larger than what the array can
// hold (VolumeOptions::address_blocks, kOvercommit times its capacity). A named volume is a list of
// extents of that space, 64 MiB each, taken when the volume is created or grown and given back when
// it is deleted or shrunk. All volumes share the log's segments, placement classes, GC and
// redundancy; space is taken only as blocks are written (the log refuses a write that would make
// more blocks valid than the array can hold, with NoSpace) and given back by trims. Each volume has
// its own counters (the log keeps them per extent): blocks written by users and by GC, valid and
// trimmed blocks, and its reads and writes.
//
// The default volume, "default" (NBD's default export, ""), is the array's first
// volume: extents 0.. of the LBA space, the size one volume of the whole array exports.
// An array made before volumes existed is exactly that.
//
// Crash safety. The table of volumes is saved through a callback (the array directory
// writes DIR/volumes, docs/format/array-dir.md) after every change, and is ordered with
// the data: a deleted (or shrunk) volume's extents are trimmed and the trims flushed
// before the table that gives them back is saved, so an extent is never handed to a new
// volume while a crash could bring back its old blocks. A crash before the save leaves
// the volume in the table, empty.
//
// Thread-safety: all methods may be called concurrently. I/O holds the table's lock
// shared; create, resize and delete hold it exclusively only to change the table (a
// delete's trims run before, with the volume closed to new I/O).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "log/log_volume.h"

namespace eraid {

struct VolumeRecord {
  std::string name;
  uint64_t size_blocks = 0;
  std::vector<uint32_t> extents;  // extent i of the volume is extent extents[i] of the LBA space
};

struct VolumeReport {
  std::string name;
  uint64_t size_blocks = 0;
  ExtentCounters counters;                                          // summed over its extents
  uint64_t reads = 0, writes = 0, read_bytes = 0, write_bytes = 0;  // requests since open
  int connections = 0;
};

class NamedVolumes {
 public:
  static constexpr uint32_t kExtentShift = 14;  // 16 Ki blocks = 64 MiB
  static constexpr uint64_t kExtentBlocks = uint64_t{1} << kExtentShift;
  // Volume sizes may add up to this many times the array's capacity (thin provisioning).
  // The log's map covers the LBA space up to the highest extent written: 12 bytes of
  // memory per LBA (docs/log.md), so overcommit costs memory only where it is used.
  static constexpr uint64_t kOvercommit = 4;
  static constexpr uint32_t kMaxVolumes = 64;
  static constexpr const char* kDefault = "default";

  using SaveFn = std::function<Status(const std::vector<VolumeRecord>&)>;
  // The log must have been opened with extent_shift = kExtentShift and overcommit =
  // kOvercommit (SetOptions). `table` empty: just the default volume.
  NamedVolumes(LogVolume& log, std::vector<VolumeRecord> table, SaveFn save);
  static void SetOptions(VolumeOptions* o) {
    o->extent_shift = kExtentShift;
    o->overcommit = kOvercommit;
    o->max_volumes = kMaxVolumes;
  }
  static std::vector<VolumeRecord> DefaultTable(uint64_t capacity_blocks);
  // Names: 1..64 of [A-Za-z0-9._-], not starting with '.' or '-'.
  static Status CheckName(const std::string& name);

  // A connection's view of one volume ("" = the default). Keeps the volume from being
  // deleted while open.
  class Handle;
  Result<std::shared_ptr<Handle>> Open(const std::string& name);

  Status Create(const std::string& name, uint64_t size_blocks);
  // Growing takes extents; shrinking trims and gives back what is past the new end.
  Status Resize(const std::string& name, uint64_t size_blocks);
  // Refused while connections have it open. The default volume cannot be deleted.
  Status Delete(const std::string& name);
  std::vector<VolumeReport> List() const;
  std::vector<VolumeRecord> Table() const;
  uint64_t provisioned_blocks() const;
  uint64_t limit_blocks() const { return log_.capacity_blocks() * kOvercommit; }

  // I/O on a volume: offsets in 4 KiB blocks of the volume, as LogVolume's.
  Status Read(Handle& h, uint64_t lba, std::span<std::byte> out);
  Status Write(Handle& h, uint64_t lba, std::span<const std::byte> data);
  Status Trim(Handle& h, uint64_t lba, uint64_t blocks);
  Status Flush(Handle& h);
  std::vector<LogVolume::Run> Allocation(Handle& h, uint64_t lba, uint64_t blocks);
  uint64_t size_blocks(const Handle& h) const;

 private:
  struct Entry;
  Entry* Find(const std::string& name) const;  // under mu_
  Status CheckRange(const Entry& e, uint64_t lba, uint64_t blocks) const;
  // Calls fn(global lba, blocks, offset in blocks into the request) per extent piece.
  Status ForEachPiece(const Entry& e, uint64_t lba, uint64_t blocks,
                      const std::function<Status(uint64_t, uint64_t, uint64_t)>& fn) const;
  // Unmaps [from, to) of the extents' LBA space and flushes: nothing of them can come back.
  Status TrimExtents(const std::vector<uint32_t>& extents);
  Status SaveLocked() const;
  uint64_t ProvisionedLocked() const;
  // NoSpace if `more_blocks` more would take the sizes past limit_blocks().
  Status CheckProvisioningLocked(uint64_t more_blocks) const;
  std::vector<uint32_t> TakeExtents(uint64_t n);  // under mu_ exclusively; lowest first

  LogVolume& log_;
  SaveFn save_;
  mutable std::shared_mutex mu_;
  std::vector<std::shared_ptr<Entry>> entries_;
  std::vector<bool> extent_used_;  // of the LBA space
  std::mutex admin_mu_;            // one create/resize/delete at a time
};

}  // namespace eraid
