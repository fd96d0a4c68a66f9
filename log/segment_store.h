// SegmentStore: where the log engine's segments live. Two implementations:
//   CountingStore (here): no data at all, fixed-size segments — for replaying month-long
//     traces at millions of blocks per second;
//   LogVolume::ArrayStore (log_volume.cc): the elastic array, with data, CRCs and recovery.
// The engine never knows which one it runs on, except that it skips a CountingStore's
// per-block calls (Append, Full, OnInvalidate), which do nothing but cost a virtual call
// each on a replay's hottest path.
//
// Thread-safety: none; owned by one engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace eraid {

class SegmentStore {
 public:
  virtual ~SegmentStore() = default;
  // Opens a segment for class `cls`; returns a handle.
  virtual Result<uint64_t> Open(uint32_t cls) = 0;
  // Appends a block (data may be empty for stores without data); returns its position.
  virtual Result<uint32_t> Append(uint64_t handle, uint64_t lba, uint64_t user_time,
                                  std::span<const std::byte> data) = 0;
  // No room for another block.
  virtual bool Full(uint64_t handle, uint32_t blocks_in_segment) const = 0;
  virtual Status Seal(uint64_t handle) = 0;
  virtual Status Free(uint64_t handle) = 0;
  virtual Status Read(uint64_t handle, uint32_t position, std::span<std::byte> out) = 0;
  // GC's read of one block: not a user's (a store that tells hotness of reads does not
  // count it). The default is Read.
  virtual Status ReadForGc(uint64_t handle, uint32_t position, std::span<std::byte> out) {
    return Read(handle, position, out);
  }
  // Read of many positions of one segment: positions[i] into the i-th 4 KiB of `out`,
  // its outcome in results[i]. GC's read-ahead: not counted for hotness either. The
  // default reads them one by one.
  virtual void ReadMany(uint64_t handle, std::span<const uint32_t> positions,
                        std::span<std::byte> out, std::span<Status> results) {
    for (size_t i = 0; i < positions.size(); ++i)
      results[i] = Read(handle, positions[i], out.subspan(BlocksToBytes(i), kBlockSize));
  }
  virtual Status Flush() = 0;
  virtual bool has_data() const = 0;
  // A block of the segment was overwritten or trimmed (for hotness; default: nothing).
  virtual void OnInvalidate(uint64_t /*handle*/) {}

  // True if the store keeps each block's tags (Append's lba and user_time) beside it and
  // reads them back (ReadTags): the engine then keeps no tags in RAM for sealed segments
  // and reads a victim's when it collects it (as SepBIT keeps a block's metadata on disk
  // beside the block).
  virtual bool keeps_tags() const { return false; }
  struct StoredTag {
    uint64_t lba;
    uint64_t user_time;
    uint32_t position;
  };
  // Every block's tags, in position order (replaces *out).
  virtual Status ReadTags(uint64_t /*handle*/, std::vector<StoredTag>* /*out*/) {
    return Status::NotSupported("this store keeps no tags");
  }
};

class CountingStore final : public SegmentStore {
 public:
  explicit CountingStore(uint32_t segment_blocks) : segment_blocks_(segment_blocks) {}
  Result<uint64_t> Open(uint32_t) override { return next_++; }
  Result<uint32_t> Append(uint64_t, uint64_t, uint64_t, std::span<const std::byte>) override {
    return 0;
  }
  bool Full(uint64_t, uint32_t blocks) const override { return blocks >= segment_blocks_; }
  Status Seal(uint64_t) override { return Status::Ok(); }
  Status Free(uint64_t) override { return Status::Ok(); }
  Status Read(uint64_t, uint32_t, std::span<std::byte>) override {
    return Status::NotSupported("a counting store keeps no data");
  }
  Status Flush() override { return Status::Ok(); }
  bool has_data() const override { return false; }
  uint32_t segment_blocks() const { return segment_blocks_; }

 private:
  uint32_t segment_blocks_;
  uint64_t next_ = 0;
};

}  // namespace eraid
