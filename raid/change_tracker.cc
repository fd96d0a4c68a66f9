#include "raid/change_tracker.h"

#include <algorithm>

namespace eraid {

ChangeTracker::ChangeTracker(const ArrayGeometry& g, uint32_t devices) : geometry_(g), devices_(devices) {
  for (Device& d : devices_) d.current.assign(g.segments, false);
}

void ChangeTracker::Mark(uint32_t d, uint64_t lba, uint64_t count_blocks) {
  const uint64_t span = geometry_.segment_span_blocks();
  const uint64_t start = geometry_.meta_blocks;
  const uint64_t end = lba + count_blocks;
  if (end <= start || count_blocks == 0) return;
  const uint64_t first = (std::max(lba, start) - start) / span;
  const uint64_t last = std::min<uint64_t>((end - 1 - start) / span, geometry_.segments - 1);
  std::lock_guard lock(mu_);
  for (uint64_t s = first; s <= last; ++s) devices_[d].current[s] = true;
}

uint64_t ChangeTracker::FlushBegin(uint32_t d) {
  std::lock_guard lock(mu_);
  Device& dev = devices_[d];
  const uint64_t ticket = next_ticket_++;
  dev.flushing.emplace_back(ticket, std::move(dev.current));
  dev.current.assign(geometry_.segments, false);
  return ticket;
}

void ChangeTracker::FlushDone(uint32_t d, uint64_t ticket, bool ok) {
  if (!ok) return;  // the device is failed: everything stays owed
  std::lock_guard lock(mu_);
  auto& f = devices_[d].flushing;
  while (!f.empty() && f.front().first <= ticket) f.pop_front();
}

std::vector<bool> ChangeTracker::Missing(uint32_t d) const {
  std::lock_guard lock(mu_);
  const Device& dev = devices_[d];
  std::vector<bool> out = dev.current;
  for (const auto& [ticket, marks] : dev.flushing) {
    for (size_t s = 0; s < out.size(); ++s) out[s] = out[s] || marks[s];
  }
  return out;
}

bool ChangeTracker::valid(uint32_t d) const {
  std::lock_guard lock(mu_);
  return devices_[d].valid;
}

void ChangeTracker::Restart(uint32_t d) {
  std::lock_guard lock(mu_);
  Device& dev = devices_[d];
  dev.valid = true;
  dev.current.assign(geometry_.segments, false);
  dev.flushing.clear();
}

void ChangeTracker::Invalidate(uint32_t d) {
  std::lock_guard lock(mu_);
  devices_[d].valid = false;
}

}  // namespace eraid
