// ChangeTracker: which segments each device of an array may lack — written, converted,
// trimmed or freed since the device's last successful flush, including writes it missed
// while failed. A device that comes back after an outage (`eraid re-add`) is resynced by
// rebuilding only these segments: md's write-intent bitmap, made from what the array
// writes anyway (docs/raid.md, "Re-add").
//
// A device write or trim is marked when it is submitted (or skipped: the device is down)
// and again when it completes. A flush moves the marks made so far aside when it is
// submitted, and its success drops them and every older set: a write that completed
// before the flush was submitted is durable after it, and one still in flight then was
// marked again, in a newer set, when it completed. So the union of the sets never misses
// a segment whose data a device does not durably hold.
//
// Tracking is in memory: it starts when the array opens (for the devices healthy then)
// or when a device is rebuilt, and a device that was failed when the array opened has an
// unknown set (valid() false): only a full rebuild brings it back.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "raid/geometry.h"

namespace eraid {

class ChangeTracker {
 public:
  ChangeTracker(const ArrayGeometry& g, uint32_t devices);

  // A write or trim of device d at `lba` (device blocks): its segment changed. Blocks of
  // the metadata area belong to no segment and are ignored.
  void Mark(uint32_t d, uint64_t lba, uint64_t count_blocks = 1);
  // A flush of device d is being submitted; returns its ticket for FlushDone.
  uint64_t FlushBegin(uint32_t d);
  void FlushDone(uint32_t d, uint64_t ticket, bool ok);

  // The segments device d may lack (one flag per segment).
  std::vector<bool> Missing(uint32_t d) const;
  bool valid(uint32_t d) const;
  // Forgets device d's marks and starts tracking it afresh (a rebuild of every segment the
  // marks could name is about to run), or stops (valid() false from now).
  void Restart(uint32_t d);
  void Invalidate(uint32_t d);

 private:
  // Marks as lists of segments (with a flag per segment against repeats), so that a
  // flush costs what was marked since the last one, not the size of the array.
  struct Device {
    bool valid = true;
    std::vector<uint8_t> marked;    // per segment: in `current`
    std::vector<uint32_t> current;  // marked since the last flush was submitted
    std::deque<std::pair<uint64_t, std::vector<uint32_t>>> flushing;  // ticket, marks moved aside
  };
  const ArrayGeometry geometry_;
  mutable std::mutex mu_;
  std::vector<Device> devices_;
  uint64_t next_ticket_ = 1;
};

}  // namespace eraid
