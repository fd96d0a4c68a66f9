#include "raid/change_tracker.h"

#include <algorithm>

namespace eraid {

ChangeTracker::ChangeTracker(const ArrayGeometry& g, uint32_t devices)
    : geometry_(g), devices_(devices) {
  for (Device& d : devices_) d.marked.assign(g.segments, 0);
}

void ChangeTracker::Mark(uint32_t d, uint64_t lba, uint64_t count_blocks) {
  const uint64_t span = geometry_.segment_span_blocks();
  const uint64_t start = geometry_.meta_blocks;
  const uint64_t end = lba + count_blocks;
  if (end <= start || count_blocks == 0) return;
  const uint64_t first = (std::max(lba, start) - start) / span;
  const uint64_t last = std::min<uint64_t>((end - 1 - start) / span, geometry_.segments - 1);
  std::lock_guard lock(mu_);
  Device& dev = devices_[d];
  for (uint64_t s = first; s <= last; ++s) {
    if (dev.marked[s]) continue;
    dev.marked[s] = 1;
    dev.current.push_back(static_cast<uint32_t>(s));
  }
}

uint64_t ChangeTracker::FlushBegin(uint32_t d) {
  std::lock_guard lock(mu_);
  Device& dev = devices_[d];
  const uint64_t ticket = next_ticket_++;
  for (uint32_t s : dev.current) dev.marked[s] = 0;
  dev.flushing.emplace_back(ticket, std::move(dev.current));
  dev.current.clear();
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
  std::vector<bool> out(geometry_.segments, false);
  for (uint32_t s : dev.current) out[s] = true;
  for (const auto& [ticket, marks] : dev.flushing) {
    for (uint32_t s : marks) out[s] = true;
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
  dev.marked.assign(geometry_.segments, 0);
  dev.current.clear();
  dev.flushing.clear();
}

void ChangeTracker::Invalidate(uint32_t d) {
  std::lock_guard lock(mu_);
  devices_[d].valid = false;
}

}  // namespace eraid
