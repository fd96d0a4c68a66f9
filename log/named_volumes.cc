#include "log/named_volumes.h"

#include <algorithm>
#include <mutex>

#include "common/types.h"

namespace eraid {

struct NamedVolumes::Entry {
  std::string name;
  uint64_t size_blocks = 0;       // under mu_
  std::vector<uint32_t> extents;  // under mu_
  bool closed = false;            // being deleted: no new I/O or connections (under mu_)
  std::atomic<int> connections{0};
  std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0};
};

class NamedVolumes::Handle {
 public:
  explicit Handle(std::shared_ptr<Entry> e) : entry(std::move(e)) { ++entry->connections; }
  ~Handle() { --entry->connections; }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  std::shared_ptr<Entry> entry;
};

namespace {
uint64_t ExtentsFor(uint64_t blocks) {
  return (blocks + NamedVolumes::kExtentBlocks - 1) / NamedVolumes::kExtentBlocks;
}
}  // namespace

std::vector<VolumeRecord> NamedVolumes::DefaultTable(uint64_t capacity_blocks) {
  VolumeRecord r{kDefault, capacity_blocks, {}};
  for (uint32_t e = 0; e < ExtentsFor(capacity_blocks); ++e) r.extents.push_back(e);
  return {r};
}

Status NamedVolumes::CheckName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-' ||
      !std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      })) {
    return Status::InvalidArgument(
        "a volume name is 1..64 of A-Z a-z 0-9 . _ - (not starting with . or -), got '" + name +
        "'");
  }
  return Status::Ok();
}

NamedVolumes::NamedVolumes(LogVolume& log, std::vector<VolumeRecord> table, SaveFn save)
    : log_(log), save_(std::move(save)), extent_used_(log.address_blocks() >> kExtentShift, false) {
  if (table.empty()) table = DefaultTable(log.capacity_blocks());
  for (VolumeRecord& r : table) {
    auto e = std::make_shared<Entry>();
    e->name = std::move(r.name);
    e->size_blocks = r.size_blocks;
    e->extents = std::move(r.extents);
    for (uint32_t x : e->extents) {
      if (x < extent_used_.size()) extent_used_[x] = true;
    }
    entries_.push_back(std::move(e));
  }
}

NamedVolumes::Entry* NamedVolumes::Find(const std::string& name) const {
  const std::string& n = name.empty() ? std::string(kDefault) : name;
  for (const auto& e : entries_) {
    if (e->name == n) return e.get();
  }
  return nullptr;
}

Result<std::shared_ptr<NamedVolumes::Handle>> NamedVolumes::Open(const std::string& name) {
  std::shared_lock lock(mu_);
  Entry* e = Find(name);
  if (!e || e->closed) return Status::NotFound("no volume '" + name + "'");
  for (const auto& sp : entries_) {
    if (sp.get() == e) return std::make_shared<Handle>(sp);
  }
  return Status::NotFound("no volume '" + name + "'");
}

uint64_t NamedVolumes::ProvisionedLocked() const {
  uint64_t sum = 0;
  for (const auto& e : entries_) sum += e->size_blocks;
  return sum;
}

uint64_t NamedVolumes::provisioned_blocks() const {
  std::shared_lock lock(mu_);
  return ProvisionedLocked();
}

Status NamedVolumes::CheckProvisioningLocked(uint64_t more_blocks) const {
  const uint64_t provisioned = ProvisionedLocked();
  if (provisioned + more_blocks <= limit_blocks()) return Status::Ok();
  return Status::NoSpace("volumes may add up to " +
                         std::to_string(BlocksToBytes(limit_blocks()) >> 20) + " MiB (" +
                         std::to_string(kOvercommit) + "x the array's capacity); " +
                         std::to_string(BlocksToBytes(provisioned) >> 20) + " MiB are provisioned");
}

std::vector<uint32_t> NamedVolumes::TakeExtents(uint64_t n) {
  std::vector<uint32_t> taken;
  for (uint32_t x = 0; x < extent_used_.size() && taken.size() < n; ++x) {
    if (!extent_used_[x]) taken.push_back(x);
  }
  if (taken.size() < n) return {};
  for (uint32_t x : taken) extent_used_[x] = true;
  return taken;
}

std::vector<VolumeRecord> NamedVolumes::Table() const {
  std::shared_lock lock(mu_);
  std::vector<VolumeRecord> t;
  for (const auto& e : entries_) t.push_back({e->name, e->size_blocks, e->extents});
  return t;
}

Status NamedVolumes::SaveLocked() const {
  std::vector<VolumeRecord> t;
  for (const auto& e : entries_) t.push_back({e->name, e->size_blocks, e->extents});
  return save_ ? save_(t) : Status::Ok();
}

Status NamedVolumes::Create(const std::string& name, uint64_t size_blocks) {
  ERAID_RETURN_IF_ERROR(CheckName(name));
  if (size_blocks == 0) return Status::InvalidArgument("a volume's size must be at least 4 KiB");
  std::lock_guard admin(admin_mu_);
  std::unique_lock lock(mu_);
  if (Find(name)) return Status::InvalidArgument("volume '" + name + "' exists");
  if (entries_.size() >= kMaxVolumes) {
    return Status::NoSpace("an array holds at most " + std::to_string(kMaxVolumes) + " volumes");
  }
  ERAID_RETURN_IF_ERROR(CheckProvisioningLocked(size_blocks));
  std::vector<uint32_t> extents = TakeExtents(ExtentsFor(size_blocks));
  if (extents.empty()) return Status::NoSpace("no free extents of the LBA space left");
  // Free extents were trimmed (and the trims flushed) when they were given back, and the
  // log's counters for them reset: the new volume reads zeros and counts from zero.
  auto e = std::make_shared<Entry>();
  e->name = name;
  e->size_blocks = size_blocks;
  e->extents = extents;
  entries_.push_back(e);
  if (Status s = SaveLocked(); !s.ok()) {
    entries_.pop_back();
    for (uint32_t x : extents) extent_used_[x] = false;
    return s;
  }
  return Status::Ok();
}

Status NamedVolumes::TrimExtents(const std::vector<uint32_t>& extents) {
  for (uint32_t x : extents) {
    ERAID_RETURN_IF_ERROR(log_.Trim(uint64_t{x} << kExtentShift, kExtentBlocks));
  }
  ERAID_RETURN_IF_ERROR(log_.Flush());
  for (uint32_t x : extents) log_.ResetExtent(x);
  return Status::Ok();
}

Status NamedVolumes::Resize(const std::string& name, uint64_t size_blocks) {
  if (size_blocks == 0)
    return Status::InvalidArgument("a volume's size must be at least 4 KiB (delete it instead)");
  std::lock_guard admin(admin_mu_);
  std::vector<uint32_t> dropped;
  uint64_t tail_from = 0, tail_to = 0;  // LBAs of the volume to trim in its last kept extent
  Entry* e = nullptr;
  {
    std::unique_lock lock(mu_);
    e = Find(name);
    if (!e || e->closed) return Status::NotFound("no volume '" + name + "'");
    const uint64_t old = e->size_blocks;
    if (size_blocks > old) {
      ERAID_RETURN_IF_ERROR(CheckProvisioningLocked(size_blocks - old));
      const uint64_t more = ExtentsFor(size_blocks) - e->extents.size();
      std::vector<uint32_t> taken = TakeExtents(more);
      if (more > 0 && taken.empty())
        return Status::NoSpace("no free extents of the LBA space left");
      e->extents.insert(e->extents.end(), taken.begin(), taken.end());
      e->size_blocks = size_blocks;
      if (Status s = SaveLocked(); !s.ok()) {
        e->extents.resize(e->extents.size() - taken.size());
        e->size_blocks = old;
        for (uint32_t x : taken) extent_used_[x] = false;
        return s;
      }
      return Status::Ok();
    }
    // Shrinking: no I/O past the new end from here on; what was there is trimmed below.
    e->size_blocks = size_blocks;
    const uint64_t keep = ExtentsFor(size_blocks);
    dropped.assign(e->extents.begin() + static_cast<long>(keep), e->extents.end());
    tail_from = size_blocks;
    tail_to = std::min(old, keep * kExtentBlocks);
  }
  // Trim the volume's blocks past its new end, flush, and only then give the extents
  // back (a crash before the save: the volume keeps them, past its end, holding zeros).
  if (tail_to > tail_from) {
    std::shared_lock lock(mu_);
    ERAID_RETURN_IF_ERROR(
        ForEachPiece(*e, tail_from, tail_to - tail_from,
                     [&](uint64_t g, uint64_t n, uint64_t) { return log_.Trim(g, n); }));
  }
  ERAID_RETURN_IF_ERROR(TrimExtents(dropped));
  std::unique_lock lock(mu_);
  e->extents.resize(e->extents.size() - dropped.size());
  for (uint32_t x : dropped) extent_used_[x] = false;
  return SaveLocked();
}

Status NamedVolumes::Delete(const std::string& name) {
  std::lock_guard admin(admin_mu_);
  std::shared_ptr<Entry> victim;
  {
    std::unique_lock lock(mu_);
    Entry* e = Find(name);
    if (!e || e->closed) return Status::NotFound("no volume '" + name + "'");
    if (e->name == kDefault) return Status::InvalidArgument("the default volume cannot be deleted");
    if (const int n = e->connections.load(); n > 0) {
      return Status::Busy("volume '" + name + "' is open by " + std::to_string(n) +
                          " connection(s): disconnect first");
    }
    e->closed = true;  // no new connections or I/O
    for (const auto& sp : entries_) {
      if (sp.get() == e) victim = sp;
    }
  }
  // Its data goes first, durably; then the table that gives its extents back.
  if (Status s = TrimExtents(victim->extents); !s.ok()) {
    std::unique_lock lock(mu_);
    victim->closed = false;
    return s;
  }
  std::unique_lock lock(mu_);
  for (uint32_t x : victim->extents) extent_used_[x] = false;
  std::erase(entries_, victim);
  return SaveLocked();
}

std::vector<VolumeReport> NamedVolumes::List() const {
  std::vector<std::shared_ptr<Entry>> entries;
  std::vector<std::vector<uint32_t>> extents;
  {
    std::shared_lock lock(mu_);
    for (const auto& e : entries_) {
      if (e->closed) continue;
      entries.push_back(e);
      extents.push_back(e->extents);
    }
  }
  std::vector<VolumeReport> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = *entries[i];
    VolumeReport r;
    r.name = e.name;
    {
      std::shared_lock lock(mu_);
      r.size_blocks = e.size_blocks;
    }
    for (uint32_t x : extents[i]) {
      const ExtentCounters c = log_.Extent(x);
      r.counters.user_blocks += c.user_blocks;
      r.counters.gc_blocks += c.gc_blocks;
      r.counters.valid_blocks += c.valid_blocks;
      r.counters.trimmed_blocks += c.trimmed_blocks;
    }
    r.reads = e.reads.load(std::memory_order_relaxed);
    r.writes = e.writes.load(std::memory_order_relaxed);
    r.read_bytes = e.read_bytes.load(std::memory_order_relaxed);
    r.write_bytes = e.write_bytes.load(std::memory_order_relaxed);
    r.connections = e.connections.load();
    out.push_back(std::move(r));
  }
  return out;
}

// ---------------------------------------------------------------- I/O

uint64_t NamedVolumes::size_blocks(const Handle& h) const {
  std::shared_lock lock(mu_);
  return h.entry->size_blocks;
}

Status NamedVolumes::CheckRange(const Entry& e, uint64_t lba, uint64_t blocks) const {
  if (e.closed) return Status::NotFound("volume '" + e.name + "' was deleted");
  if (blocks == 0 || lba >= e.size_blocks || blocks > e.size_blocks - lba) {
    return Status::InvalidArgument("blocks [" + std::to_string(lba) + ", +" +
                                   std::to_string(blocks) + ") outside volume '" + e.name +
                                   "' of " + std::to_string(e.size_blocks) + " blocks");
  }
  return Status::Ok();
}

Status NamedVolumes::ForEachPiece(
    const Entry& e, uint64_t lba, uint64_t blocks,
    const std::function<Status(uint64_t, uint64_t, uint64_t)>& fn) const {
  for (uint64_t done = 0; done < blocks;) {
    const uint64_t l = lba + done;
    const uint64_t in_extent = l & (kExtentBlocks - 1);
    const uint64_t n = std::min(blocks - done, kExtentBlocks - in_extent);
    ERAID_CHECK((l >> kExtentShift) < e.extents.size());  // CheckRange kept it in the volume
    ERAID_RETURN_IF_ERROR(
        fn((uint64_t{e.extents[l >> kExtentShift]} << kExtentShift) | in_extent, n, done));
    done += n;
  }
  return Status::Ok();
}

Status NamedVolumes::Read(Handle& h, uint64_t lba, std::span<std::byte> out) {
  if (!IsBlockAligned(out.size()))
    return Status::InvalidArgument("read size must be a multiple of 4 KiB");
  const uint64_t blocks = BytesToBlocks(out.size());
  std::shared_lock lock(mu_);
  ERAID_RETURN_IF_ERROR(CheckRange(*h.entry, lba, blocks));
  h.entry->reads.fetch_add(1, std::memory_order_relaxed);
  h.entry->read_bytes.fetch_add(out.size(), std::memory_order_relaxed);
  return ForEachPiece(*h.entry, lba, blocks, [&](uint64_t g, uint64_t n, uint64_t at) {
    return log_.Read(g, out.subspan(BlocksToBytes(at), BlocksToBytes(n)));
  });
}

Status NamedVolumes::Write(Handle& h, uint64_t lba, std::span<const std::byte> data) {
  if (!IsBlockAligned(data.size()))
    return Status::InvalidArgument("write size must be a multiple of 4 KiB");
  const uint64_t blocks = BytesToBlocks(data.size());
  std::shared_lock lock(mu_);
  ERAID_RETURN_IF_ERROR(CheckRange(*h.entry, lba, blocks));
  h.entry->writes.fetch_add(1, std::memory_order_relaxed);
  h.entry->write_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  return ForEachPiece(*h.entry, lba, blocks, [&](uint64_t g, uint64_t n, uint64_t at) {
    return log_.Write(g, data.subspan(BlocksToBytes(at), BlocksToBytes(n)));
  });
}

Status NamedVolumes::Trim(Handle& h, uint64_t lba, uint64_t blocks) {
  std::shared_lock lock(mu_);
  ERAID_RETURN_IF_ERROR(CheckRange(*h.entry, lba, blocks));
  return ForEachPiece(*h.entry, lba, blocks,
                      [&](uint64_t g, uint64_t n, uint64_t) { return log_.Trim(g, n); });
}

Status NamedVolumes::Flush(Handle&) { return log_.Flush(); }

std::vector<LogVolume::Run> NamedVolumes::Allocation(Handle& h, uint64_t lba, uint64_t blocks) {
  std::vector<LogVolume::Run> runs;
  std::shared_lock lock(mu_);
  if (!CheckRange(*h.entry, lba, blocks).ok()) return runs;
  (void)ForEachPiece(*h.entry, lba, blocks, [&](uint64_t g, uint64_t n, uint64_t) {
    for (const LogVolume::Run& r : log_.Allocation(g, n)) {
      if (!runs.empty() && runs.back().written == r.written) {
        runs.back().blocks += r.blocks;
      } else {
        runs.push_back(r);
      }
    }
    return Status::Ok();
  });
  return runs;
}

}  // namespace eraid
