#include "compress/drive_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <thread>
#include <type_traits>

#include "common/check.h"
#include "compress/drive_format.h"

namespace eraid {

namespace {

constexpr double kBlock = 4096;

// The named profiles. Their figures, and where they come from, are in
// docs/compressed-drive.md ("Timing model"); the derived datasheet figures
// (RandomReadIops, ...) are checked against them in tests/compress/drive_model_test.cc.
DriveProfile NvmeTlc() {
  // A datacenter PCIe 4.0 x4 TLC drive: 6.9 / 4.1 GB/s sequential, ~1M random 4 KiB
  // reads/s, ~65 us idle read latency. 64 units of 4-plane 64 KiB pages.
  DriveProfile p;
  p.name = "nvme-tlc";
  p.channels = 8, p.dies_per_channel = 8, p.page_bytes = 65536;
  p.read_us = 60, p.program_us = 800, p.erase_us = 3500, p.channel_mb_s = 1200;
  p.host_read_mb_s = 6900, p.host_write_mb_s = 4100;
  p.controller_read_us = 1, p.controller_write_us = 1;
  p.write_buffer_bytes = 16ull << 20, p.plp = true;
  return p;
}
DriveProfile Csd() {
  // A computational drive with transparent compression in hardware (the Elastic RAID
  // paper's kind): PCIe 3.0 x4, 32 units, a compression engine of 4 GB/s each way.
  DriveProfile p;
  p.name = "csd";
  p.channels = 8, p.dies_per_channel = 4, p.page_bytes = 32768;
  p.read_us = 70, p.program_us = 900, p.erase_us = 3500, p.channel_mb_s = 800;
  p.host_read_mb_s = 3200, p.host_write_mb_s = 2800;
  p.controller_read_us = 1.5, p.controller_write_us = 1.5;
  p.compress_mb_s = 4000, p.decompress_mb_s = 4000;
  p.write_buffer_bytes = 8ull << 20, p.plp = true;
  return p;
}
DriveProfile SataSsd() {
  // A datacenter SATA drive, Kingston DC600M 960 GB: 560 / 530 MB/s sequential,
  // 94k / 65k random 4 KiB IOPS (the controller's command rate), power-loss protected.
  DriveProfile p;
  p.name = "sata-ssd";
  p.channels = 8, p.dies_per_channel = 2, p.page_bytes = 16384;
  p.read_us = 60, p.program_us = 600, p.erase_us = 3000, p.channel_mb_s = 400;
  p.host_read_mb_s = 560, p.host_write_mb_s = 530;
  p.controller_read_us = 1e6 / 94000, p.controller_write_us = 1e6 / 65000;
  p.write_buffer_bytes = 1ull << 20, p.plp = true;
  return p;
}

bool ToDouble(const std::string& v, double* out, double lo, double hi) {
  try {
    size_t used = 0;
    double d = std::stod(v, &used);
    if (used != v.size() || !std::isfinite(d) || d < lo || d > hi) return false;
    *out = d;
    return true;
  } catch (...) {
    return false;
  }
}
bool ToBool(const std::string& v, bool* out) {
  if (v == "1" || v == "on" || v == "true") return *out = true, true;
  if (v == "0" || v == "off" || v == "false") return *out = false, true;
  return false;
}

// A profile's key: how --drive-model sets it from text (false if the value is bad) and
// how Spec() reads it back. One table for both, in the order Spec() writes them.
struct Field {
  const char* key;
  std::function<bool(DriveProfile&, const std::string&)> set;
  std::function<double(const DriveProfile&)> get;
};
// A member's field: numbers within [lo, hi] (whole ones a multiple of `multiple`), flags
// as 1/0, on/off, true/false.
template <typename T>
Field Member(const char* key, T DriveProfile::*m, double lo = 0, double hi = 1e6,
             uint64_t multiple = 1) {
  auto set = [=](DriveProfile& p, const std::string& v) {
    if constexpr (std::is_same_v<T, bool>) {
      return ToBool(v, &(p.*m));
    } else {
      double d = 0;
      if (!ToDouble(v, &d, lo, hi)) return false;
      if constexpr (std::is_integral_v<T>) {
        if (d != std::floor(d) || static_cast<uint64_t>(d) % multiple != 0) return false;
      }
      p.*m = static_cast<T>(d);
      return true;
    }
  };
  return {key, set, [=](const DriveProfile& p) { return static_cast<double>(p.*m); }};
}
const std::vector<Field>& Fields() {
  using P = DriveProfile;
  static const std::vector<Field> fields{
      Member("channels", &P::channels, 1, 64),
      Member("dies_per_channel", &P::dies_per_channel, 1, 64),
      Member("page_bytes", &P::page_bytes, 4096, 1 << 20, 4096),
      Member("read_us", &P::read_us),
      Member("program_us", &P::program_us),
      Member("erase_us", &P::erase_us),
      Member("channel_mb_s", &P::channel_mb_s),
      Member("host_read_mb_s", &P::host_read_mb_s),
      Member("host_write_mb_s", &P::host_write_mb_s),
      Member("controller_read_us", &P::controller_read_us),
      Member("controller_write_us", &P::controller_write_us),
      Member("compress_mb_s", &P::compress_mb_s),
      Member("decompress_mb_s", &P::decompress_mb_s),
      Member("write_buffer_bytes", &P::write_buffer_bytes, 65536, double(1ull << 34)),
      Member("plp", &P::plp),
      Member("program_suspend", &P::program_suspend),
      Member("suspend_us", &P::suspend_us),
      Member("time_scale", &P::time_scale, 0.001, 1e6),
  };
  return fields;
}

std::string Num(double d) {
  std::ostringstream o;
  o << d;
  return o.str();
}

}  // namespace

std::vector<std::string> DriveProfileNames() { return {"nvme-tlc", "csd", "sata-ssd", "none"}; }

Result<DriveProfile> ParseDriveProfile(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string part; std::getline(ss, part, ',');) parts.push_back(part);
  if (parts.empty() || parts[0].empty())
    return Status::InvalidArgument("--drive-model: give a profile (nvme-tlc, csd, sata-ssd, none)");
  DriveProfile p;
  if (parts[0] == "nvme-tlc") {
    p = NvmeTlc();
  } else if (parts[0] == "csd") {
    p = Csd();
  } else if (parts[0] == "sata-ssd") {
    p = SataSsd();
  } else if (parts[0] != "none") {
    return Status::InvalidArgument("--drive-model: no profile '" + parts[0] +
                                   "' (nvme-tlc, csd, sata-ssd, none)");
  }
  if (parts[0] == "none" && parts.size() > 1)
    return Status::InvalidArgument("--drive-model: 'none' takes no key=value");
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos)
      return Status::InvalidArgument("--drive-model: '" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    auto it = std::find_if(Fields().begin(), Fields().end(),
                           [&](const Field& f) { return key == f.key; });
    if (it == Fields().end()) return Status::InvalidArgument("--drive-model: no key '" + key + "'");
    if (!it->set(p, value))
      return Status::InvalidArgument("--drive-model: bad value for " + key + ": '" + value + "'");
  }
  return p;
}

std::string DriveProfile::Spec() const {
  if (!enabled()) return "none";
  // Only what differs from the named profile, so a spec reads as the user wrote it.
  auto base = ParseDriveProfile(name);
  std::ostringstream o;
  o << name;
  const DriveProfile& b = *base;
  for (const Field& f : Fields()) {
    if (f.get(*this) != f.get(b)) o << ',' << f.key << '=' << Num(f.get(*this));
  }
  return o.str();
}

double DriveProfile::RandomReadIops() const {
  double iops = 1e6 * units() / read_us;
  iops = std::min(iops, channels * channel_mb_s * 1e6 / kBlock);
  if (controller_read_us > 0) iops = std::min(iops, 1e6 / controller_read_us);
  if (host_read_mb_s > 0) iops = std::min(iops, host_read_mb_s * 1e6 / kBlock);
  if (decompress_mb_s > 0) iops = std::min(iops, decompress_mb_s * 1e6 / kBlock);
  return iops;
}

double DriveProfile::RandomWriteIops() const {
  double iops = units() * (page_bytes / kBlock) * 1e6 / program_us;
  iops = std::min(iops, channels * channel_mb_s * 1e6 / kBlock);
  if (controller_write_us > 0) iops = std::min(iops, 1e6 / controller_write_us);
  if (host_write_mb_s > 0) iops = std::min(iops, host_write_mb_s * 1e6 / kBlock);
  if (compress_mb_s > 0) iops = std::min(iops, compress_mb_s * 1e6 / kBlock);
  return iops;
}

double DriveProfile::ReadLatencyUs() const {
  auto xfer = [](double mb_s) { return mb_s > 0 ? kBlock / mb_s : 0.0; };  // bytes/(MB/s) = us
  return controller_read_us + read_us + xfer(channel_mb_s) + xfer(decompress_mb_s) +
         xfer(host_read_mb_s);
}

double DriveProfile::ExpectedIops(uint32_t qd, bool reads) const {
  auto xfer = [](double mb_s) { return mb_s > 0 ? kBlock / mb_s : 0.0; };  // us per 4 KiB
  struct Station {
    double count, demand_us;  // identical stations, and each one's demand per I/O
  };
  std::vector<Station> st;
  if (reads) {
    st = {{double(units()), read_us / units()},
          {double(channels), xfer(channel_mb_s) / channels},
          {1, controller_read_us},
          {1, xfer(decompress_mb_s)},
          {1, xfer(host_read_mb_s)}};
  } else {
    st = {{1, controller_write_us}, {1, xfer(host_write_mb_s)}, {1, xfer(compress_mb_s)}};
  }
  std::vector<double> queue(st.size(), 0.0);
  double x = 0;
  for (uint32_t k = 1; k <= qd; ++k) {
    double total = 0;
    std::vector<double> r(st.size());
    for (size_t i = 0; i < st.size(); ++i) {
      r[i] = st[i].demand_us * (1 + queue[i]);
      total += st[i].count * r[i];
    }
    x = total > 0 ? k / total : 0;
    for (size_t i = 0; i < st.size(); ++i) queue[i] = x * r[i];
  }
  const double iops = x * 1e6;
  return reads ? iops : std::min(iops > 0 ? iops : RandomWriteIops(), RandomWriteIops());
}

namespace {

// The model on a virtual clock with `qd` clients, each issuing its next operation when
// the last completes: issue(model, now) starts one and returns when it completes. The
// first tenth of `ops` warms the calendars up; the rest is measured.
template <typename Issue>
ModelCurve ClosedLoop(const DriveProfile& p, uint32_t qd, uint64_t ops, Issue issue) {
  ERAID_CHECK(p.enabled() && qd > 0 && ops > 0);
  ManualClock clock;
  DriveModel m(p, clock);
  // (next submission, client): the earliest goes first, so the model sees time move on.
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>,
                      std::greater<>>
      next;
  for (uint32_t c = 0; c < qd; ++c) next.push({0, c});
  const uint64_t warm = ops / 10;
  uint64_t done = 0, measured = 0, latency_ns = 0, first_ns = 0, last_ns = 0;
  while (done < ops) {
    const auto [t, c] = next.top();
    next.pop();
    clock.AdvanceNanos(t - clock.NowNanos());
    const uint64_t end = issue(m, t);
    next.push({end, c});
    if (++done == warm) first_ns = t;
    if (done > warm) {
      ++measured;
      latency_ns += end - t;
      last_ns = std::max(last_ns, end);
    }
  }
  ModelCurve curve;
  if (measured > 0 && last_ns > first_ns) {
    curve.iops = double(measured) * 1e9 / double(last_ns - first_ns);
    curve.mean_latency_us = double(latency_ns) / double(measured) / 1e3;
  }
  return curve;
}

}  // namespace

ModelCurve SimulateRandomReads(const DriveProfile& p, uint32_t qd, uint64_t flash_bytes,
                               uint64_t reads, uint64_t seed) {
  constexpr uint64_t kRecord =
      kBlockSize + drive_format::kRecordHeaderBytes;  // incompressible, as stored
  const uint64_t records = std::max<uint64_t>(1, flash_bytes / kRecord);
  std::mt19937_64 rng(seed);
  return ClosedLoop(p, qd, reads, [&](DriveModel& m, uint64_t t) {
    const uint64_t flash = m.FlashRead(rng() % records * kRecord, kRecord);
    return m.HostRead(kBlockSize, /*engine=*/true, t, flash);
  });
}

ModelCurve SimulateRandomWrites(const DriveProfile& p, uint32_t qd, uint64_t writes) {
  return ClosedLoop(p, qd, writes, [](DriveModel& m, uint64_t t) {
    return std::max(t + 1, m.HostWrite(kBlockSize, /*engine=*/true));
  });
}

DriveModel::DriveModel(const DriveProfile& profile, const Clock& clock)
    : p_(profile),
      clock_(clock),
      start_ns_(clock.NowNanos()),
      unit_reads_(profile.units()),
      unit_programs_(profile.units()),
      channels_(profile.channels) {
  ERAID_CHECK(p_.enabled() && p_.units() > 0 && p_.page_bytes >= 4096);
  stats_.units = p_.units();
}

DriveModel::Page DriveModel::PageAt(uint64_t page) const {
  const uint32_t unit = static_cast<uint32_t>(page % p_.units());
  return {unit, unit % p_.channels};
}

uint64_t DriveModel::Ns(double us) const { return static_cast<uint64_t>(us * p_.time_scale * 1e3); }

uint64_t DriveModel::TransferNs(uint64_t bytes, double mb_s) const {
  // bytes / (mb_s * 1e6 B/s) seconds = bytes * 1e3 / mb_s ns.
  return mb_s > 0 ? static_cast<uint64_t>(double(bytes) * 1e3 / mb_s * p_.time_scale) : 0;
}

uint64_t Calendar::FirstGap(uint64_t at, uint64_t ns) const {
  uint64_t t = at;
  for (const auto& [start, end] : r_) {
    if (end <= t) continue;
    if (start >= t + ns) break;  // fits before this one
    t = end;
  }
  return t;
}

bool Calendar::Covers(uint64_t t) const {
  for (const auto& [start, end] : r_) {
    if (start > t) return false;
    if (end > t) return true;
  }
  return false;
}

void Calendar::Add(uint64_t start, uint64_t ns) {
  if (ns == 0) return;
  auto it = std::lower_bound(r_.begin(), r_.end(), std::make_pair(start, uint64_t{0}));
  ERAID_CHECK(it == r_.end() || it->first >= start + ns);
  ERAID_CHECK(it == r_.begin() || std::prev(it)->second <= start);
  r_.insert(it, {start, start + ns});
}

void Calendar::Prune(uint64_t now) {
  size_t done = 0;
  while (done < r_.size() && r_[done].second <= now) ++done;
  r_.erase(r_.begin(), r_.begin() + static_cast<std::ptrdiff_t>(done));
}

uint64_t DriveModel::Take(Calendar* c, uint64_t at, uint64_t ns, Calendar* also) {
  c->Prune(now_);
  if (also) also->Prune(now_);
  uint64_t t = c->FirstGap(at, ns);
  while (also) {
    const uint64_t t2 = also->FirstGap(t, ns);
    if (t2 == t) break;
    t = c->FirstGap(t2, ns);
  }
  c->Add(t, ns);
  return t + ns;
}

uint64_t DriveModel::TakeUnitForRead(uint32_t u, uint64_t at, uint64_t ns) {
  stats_.unit_busy_ns += ns;
  if (!p_.program_suspend) return Take(&unit_reads_[u], at, ns, &unit_programs_[u]);
  unit_reads_[u].Prune(now_);
  unit_programs_[u].Prune(now_);
  uint64_t start = unit_reads_[u].FirstGap(at, ns);
  // A program or erase holds the unit then: suspended, it lets the read in.
  if (unit_programs_[u].Covers(start))
    start = unit_reads_[u].FirstGap(start + Ns(p_.suspend_us), ns);
  unit_reads_[u].Add(start, ns);
  return start + ns;
}

uint64_t DriveModel::TakeUnitForProgram(uint32_t u, uint64_t at, uint64_t ns) {
  stats_.unit_busy_ns += ns;
  // Suspendable programs go on beside the reads (which suspend them); others wait for them.
  return Take(&unit_programs_[u], at, ns, p_.program_suspend ? nullptr : &unit_reads_[u]);
}

void DriveModel::Account(uint64_t now, uint64_t end, uint64_t service_ns) {
  while (!ends_.empty() && ends_.top() <= now) ends_.pop();
  if (end > now) ends_.push(end);
  ++stats_.ops;
  stats_.latency_ns += end - now;
  stats_.service_ns += std::min(service_ns, end - now);
}

uint64_t DriveModel::SensePage(uint64_t page, uint64_t bytes, uint64_t now) {
  const Page at = PageAt(page);
  const uint64_t sensed = TakeUnitForRead(at.unit, now, Ns(p_.read_us));
  ++stats_.flash_reads;
  return Take(&channels_[at.channel], sensed, TransferNs(bytes, p_.channel_mb_s));
}

uint64_t DriveModel::FlashRead(uint64_t offset_bytes, uint64_t length_bytes) {
  if (length_bytes == 0) return clock_.NowNanos();
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  const uint64_t first = offset_bytes / p_.page_bytes;
  const uint64_t last = (offset_bytes + length_bytes - 1) / p_.page_bytes;
  uint64_t end = now;
  for (uint64_t page = first; page <= last; ++page) {
    const uint64_t lo = std::max(offset_bytes, page * p_.page_bytes);
    const uint64_t hi = std::min(offset_bytes + length_bytes, (page + 1) * p_.page_bytes);
    end = std::max(end, SensePage(page, hi - lo, now));
  }
  return end;
}

uint64_t DriveModel::FlashReadMany(std::span<const ByteExtent> extents) {
  if (extents.size() == 1) return FlashRead(extents[0].offset, extents[0].length);
  // The pages touched and the bytes wanted from each, in page order, each page once.
  std::vector<std::pair<uint64_t, uint64_t>> pages;
  for (const ByteExtent& e : extents) {
    if (e.length == 0) continue;
    const uint64_t first = e.offset / p_.page_bytes;
    const uint64_t last = (e.offset + e.length - 1) / p_.page_bytes;
    for (uint64_t page = first; page <= last; ++page) {
      const uint64_t lo = std::max(e.offset, page * p_.page_bytes);
      const uint64_t hi = std::min(e.offset + e.length, (page + 1) * p_.page_bytes);
      pages.emplace_back(page, hi - lo);
    }
  }
  std::sort(pages.begin(), pages.end());
  size_t out = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (out > 0 && pages[out - 1].first == pages[i].first) {
      pages[out - 1].second =
          std::min<uint64_t>(p_.page_bytes, pages[out - 1].second + pages[i].second);
    } else {
      pages[out++] = pages[i];
    }
  }
  pages.resize(out);
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  uint64_t end = now;
  for (const auto& [page, bytes] : pages) end = std::max(end, SensePage(page, bytes, now));
  return end;
}

uint64_t DriveModel::FlashWrite(uint64_t offset_bytes, uint64_t length_bytes) {
  if (length_bytes == 0) return clock_.NowNanos();
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  // Room in the buffer, first come first served: programs that have ended free theirs.
  uint64_t admit = std::max(now, last_admit_);
  auto release_until = [&](uint64_t t) {
    while (!programs_.empty() && programs_.top().first <= t) {
      buffered_bytes_ -= programs_.top().second;
      programs_.pop();
    }
  };
  release_until(admit);
  while (buffered_bytes_ > 0 && buffered_bytes_ + length_bytes > p_.write_buffer_bytes &&
         !programs_.empty()) {
    admit = std::max(admit, programs_.top().first);
    release_until(admit);
  }
  last_admit_ = admit;
  // Each page the write completes is programmed (moved over its channel, then held on its
  // unit); the bytes of a page it leaves unfinished stay in the buffer until the write
  // that finishes it, which programs the page once (the drive fills pages in order).
  const uint64_t first = offset_bytes / p_.page_bytes;
  const uint64_t last = (offset_bytes + length_bytes - 1) / p_.page_bytes;
  for (uint64_t page = first; page <= last; ++page) {
    const uint64_t lo = std::max(offset_bytes, page * p_.page_bytes);
    const uint64_t hi = std::min(offset_bytes + length_bytes, (page + 1) * p_.page_bytes);
    const Page at = PageAt(page);
    const uint64_t moved =
        Take(&channels_[at.channel], admit, TransferNs(hi - lo, p_.channel_mb_s));
    if (hi < (page + 1) * p_.page_bytes) continue;  // unfinished: no program yet
    const uint64_t programmed = TakeUnitForProgram(at.unit, moved, Ns(p_.program_us));
    ++stats_.flash_programs;
    programs_.push({programmed, p_.page_bytes});
    buffered_bytes_ += p_.page_bytes;
    last_program_end_ = std::max(last_program_end_, programmed);
  }
  return admit;
}

uint64_t DriveModel::FlashErase(uint64_t offset_bytes, uint64_t length_bytes) {
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  const uint64_t first = offset_bytes / p_.page_bytes;
  const uint64_t pages = std::max<uint64_t>(1, (length_bytes + p_.page_bytes - 1) / p_.page_bytes);
  uint64_t end = now;
  // An erase block spans one block on each unit the range's pages lie on.
  for (uint64_t i = 0; i < std::min<uint64_t>(pages, p_.units()); ++i) {
    const Page at = PageAt(first + i);
    end = std::max(end, TakeUnitForProgram(at.unit, now, Ns(p_.erase_us)));
    ++stats_.erases;
  }
  last_program_end_ = std::max(last_program_end_, end);
  return end;
}

uint64_t DriveModel::FlashFlush() {
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  return p_.plp ? std::max(now, last_admit_) : std::max(now, last_program_end_);
}

uint64_t DriveModel::HostRead(uint64_t logical_bytes, bool engine, uint64_t submitted_ns,
                              uint64_t flash_done_ns) {
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  const uint64_t commands = std::max<uint64_t>(1, logical_bytes / kBlockSize);
  const uint64_t ctrl = commands * Ns(p_.controller_read_us);
  const uint64_t dec = engine ? TransferNs(logical_bytes, p_.decompress_mb_s) : 0;
  const uint64_t xfer = TransferNs(logical_bytes, p_.host_read_mb_s);
  uint64_t t = Take(&controller_, std::max(now, flash_done_ns), ctrl);
  if (dec) t = Take(&engine_, t, dec);
  t = Take(&link_out_, t, xfer);
  // Served: what an idle drive takes for it, a page sensed and moved per block included
  // (a block served from the drive's RAM takes less: then all of it counts as served).
  const uint64_t service =
      ctrl + Ns(p_.read_us) + TransferNs(logical_bytes, p_.channel_mb_s) + dec + xfer;
  const uint64_t from = std::min(submitted_ns ? submitted_ns : now, now);
  Account(from, t, service);
  return t;
}

uint64_t DriveModel::HostWrite(uint64_t logical_bytes, bool engine) {
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.NowNanos();
  now_ = now;
  const uint64_t commands = std::max<uint64_t>(1, logical_bytes / kBlockSize);
  const uint64_t ctrl = commands * Ns(p_.controller_write_us);
  const uint64_t xfer = TransferNs(logical_bytes, p_.host_write_mb_s);
  const uint64_t comp = engine ? TransferNs(logical_bytes, p_.compress_mb_s) : 0;
  uint64_t t = Take(&controller_, now, ctrl);
  t = Take(&link_in_, t, xfer);
  if (comp) t = Take(&engine_, t, comp);
  Account(now, t, ctrl + xfer + comp);
  return t;
}

void DriveModel::WaitUntil(uint64_t ready_ns) const {
  if (dynamic_cast<const SystemClock*>(&clock_) == nullptr) return;
  LowerTimerSlack();
  for (uint64_t now = clock_.NowNanos(); now < ready_ns; now = clock_.NowNanos())
    std::this_thread::sleep_for(std::chrono::nanoseconds(ready_ns - now));
}

DriveModelStats DriveModel::stats() const {
  std::lock_guard lock(mu_);
  DriveModelStats s = stats_;
  const uint64_t now = clock_.NowNanos();
  s.elapsed_ns = now - start_ns_;
  auto ends = ends_;
  while (!ends.empty() && ends.top() <= now) ends.pop();
  s.in_flight = static_cast<uint32_t>(ends.size());
  return s;
}

}  // namespace eraid
