#include "tools/server/admin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <sstream>
#include <thread>

#include "common/thread_priority.h"

namespace eraid {

namespace {

constexpr const char* kMagic = "eraid-admin 1";
constexpr size_t kMaxRequest = 4096;

// A tiny JSON object writer: enough for flat and nested objects of numbers and strings.
class Json {
 public:
  Json& Num(const std::string& k, double v) {  // NaN: null
    if (std::isnan(v)) return Null(k);
    std::ostringstream o;
    o.precision(6);
    o << v;
    return Raw(k, o.str());
  }
  Json& Int(const std::string& k, uint64_t v) { return Raw(k, std::to_string(v)); }
  Json& Bool(const std::string& k, bool v) { return Raw(k, v ? "true" : "false"); }
  Json& Str(const std::string& k, const std::string& v) { return Raw(k, Quote(v)); }
  Json& Obj(const std::string& k, const Json& v) { return Raw(k, v.str()); }
  Json& Null(const std::string& k) { return Raw(k, "null"); }
  Json& Ints(const std::string& k, const std::vector<uint32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size();
         ++i) {  // (not `(i ? "," : "") + ...`: GCC 12's -Wrestrict at -O3)
      if (i) s += ',';
      s += std::to_string(v[i]);
    }
    return Raw(k, s + "]");
  }
  Json& Arr(const std::string& k, const std::vector<Json>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ',';
      s += v[i].str();
    }
    return Raw(k, s + "]");
  }
  std::string str() const { return "{" + body_ + "}"; }

  static std::string Quote(const std::string& v) {
    std::string s = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') s += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        s += buf;
        continue;
      }
      s += c;
    }
    return s + "\"";
  }

 private:
  Json& Raw(const std::string& k, const std::string& v) {
    if (!body_.empty()) body_ += ",";
    body_ += Quote(k) + ":" + v;
    return *this;
  }
  std::string body_;
};

const char* StateName(DeviceState s) {
  switch (s) {
    case DeviceState::kOk:
      return "ok";
    case DeviceState::kFailed:
      return "failed";
    case DeviceState::kRebuilding:
      return "rebuilding";
  }
  return "?";
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// A write-amplification figure over less than 1 MiB of the I/O it divides by says
// nothing (a fresh array's device WAF was 838): it is not given — null in JSON, "-" in
// text — rather than shown as a number: NaN here.
constexpr double kMinWaBytes = 1 << 20;
double Wa(double written, double over_bytes) {
  return over_bytes < kMinWaBytes ? std::numeric_limits<double>::quiet_NaN() : written / over_bytes;
}

std::string Fixed(double v, int digits = 3) {  // NaN: "-"
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Mib(uint64_t bytes) { return Fixed(double(bytes) / 1048576.0, 1) + " MiB"; }

AdminReply Error(int rc, const std::string& message) { return {rc, message + "\n"}; }

Result<uint32_t> ParseIndex(const std::string& text, uint32_t limit, const char* what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v >= limit) {
    return Status::InvalidArgument(std::string("bad ") + what + " '" + text + "' (0.." +
                                   std::to_string(limit - 1) + ")");
  }
  return static_cast<uint32_t>(v);
}

Json VolumeJson(const VolumeReport& r) {
  const ExtentCounters& c = r.counters;
  return Json()
      .Str("name", r.name)
      .Int("size_bytes", BlocksToBytes(r.size_blocks))
      .Int("written_bytes", BlocksToBytes(c.user_blocks))
      .Int("valid_bytes", BlocksToBytes(c.valid_blocks))
      .Int("trimmed_bytes", BlocksToBytes(c.trimmed_blocks))
      .Num("wa", Wa(double(BlocksToBytes(c.user_blocks + c.gc_blocks)),
                    double(BlocksToBytes(c.user_blocks))))
      .Int("read_requests", r.reads)
      .Int("write_requests", r.writes)
      .Int("connections", uint64_t(r.connections));
}

std::string VolumeLine(const VolumeReport& r) {
  const ExtentCounters& c = r.counters;
  return "  " + r.name + "  " + Mib(BlocksToBytes(r.size_blocks)) + ", " +
         Mib(BlocksToBytes(c.valid_blocks)) + " valid, " + Mib(BlocksToBytes(c.user_blocks)) +
         " written, WA " +
         Fixed(Wa(double(BlocksToBytes(c.user_blocks + c.gc_blocks)),
                  double(BlocksToBytes(c.user_blocks)))) +
         ", " + std::to_string(r.reads) + " reads, " + std::to_string(r.writes) + " writes, " +
         std::to_string(r.connections) + " connections\n";
}

// A drive's flash as shown: a remote one's URI without secrets.
std::string Shown(const std::string& path) {
  return NbdBackend::IsUri(path) ? NbdBackend::Redact(path) : path;
}

AdminReply Status_(ArrayDir& a, AdminState& state, bool json) {
  const ArrayStats as = a.array().stats();
  const auto links = a.links();
  const VolumeStats vs = a.volume().stats();
  DriveStats sum;
  std::vector<Json> devices;
  std::string dev_text;
  const std::vector<DriveStats> drive_stats = a.drive_stats();
  for (uint32_t d = 0; d < drive_stats.size(); ++d) {
    const DriveStats& ds = drive_stats[d];
    sum.live_bytes += ds.live_bytes;
    sum.usable_bytes += ds.usable_bytes;
    sum.mapped_blocks += ds.mapped_blocks;
    sum.host_write_bytes += ds.host_write_bytes;
    sum.host_stored_bytes += ds.host_stored_bytes;
    sum.flash_write_bytes += ds.flash_write_bytes;
    const DeviceStats& st = as.devices[d];
    Json link;
    std::string link_text;
    if (d < links.size() && links[d]) {
      const NbdLinkStats& l = *links[d];
      link.Str("uri", l.uri)
          .Str("state", l.state)
          .Str("error", l.error)
          .Int("requests", l.requests)
          .Int("timeouts", l.timeouts)
          .Int("latency_p50_us", l.p50_us)
          .Int("latency_p99_us", l.p99_us)
          .Int("abandoned_writes", l.abandoned)
          .Bool("draining", l.draining)
          .Int("lane_reads", l.lane_reads)
          .Int("lanes", l.lanes);
      link_text =
          "    link " + l.state + "  latency p50 " + std::to_string(l.p50_us) + " us  p99 " +
          std::to_string(l.p99_us) + " us  requests " + std::to_string(l.requests) +
          (l.lanes > 0 ? "  (" + std::to_string(l.lane_reads) + " reads on " +
                             std::to_string(l.lanes) + " lanes)"
                       : "") +
          (l.error.empty() ? "" : "  (" + l.error + ")") +
          (l.draining ? "  " + std::to_string(l.abandoned) + " abandoned writes may still land"
                      : "") +
          "\n";
    }
    Json dev =
        Json()
            .Int("index", d)
            .Str("path", Shown(a.device_path(d)))
            .Str("state", StateName(st.state))
            .Int("reads", st.reads)
            .Int("writes", st.writes)
            .Int("errors", st.errors)
            .Int("physical_bytes", ds.live_bytes)
            .Int("flash_bytes", ds.usable_bytes)
            .Num("compression", ds.compression_ratio())
            .Num("device_waf", Wa(double(ds.flash_write_bytes), double(ds.host_stored_bytes)));
    if (d < links.size() && links[d]) dev.Obj("link", link);
    devices.push_back(dev);
    dev_text +=
        "  device " + std::to_string(d) + "  " + StateName(st.state) + "  " + Mib(ds.live_bytes) +
        " of " + Mib(ds.usable_bytes) + "  compression " + Fixed(ds.compression_ratio(), 2) +
        "  WAF " + Fixed(Wa(double(ds.flash_write_bytes), double(ds.host_stored_bytes))) +
        "  errors " + std::to_string(st.errors) + "  " + Shown(a.device_path(d)) + "\n" + link_text;
  }
  const std::string health = as.data_at_risk                ? "data-at-risk"
                             : state.rebuilding_device >= 0 ? "rebuilding"
                             : as.degraded                  ? "degraded"
                                                            : "ok";
  const EngineStats& es = vs.engine;
  // WA over the array's life (DIR/eraid.stats) and since this open.
  const LifetimeCounters life = a.Lifetime();
  const double log_wa =
      Wa(double(life.user_written_bytes + life.gc_written_bytes), double(life.user_written_bytes));
  const double raid_wa =
      Wa(double(life.raid_written_bytes), double(life.user_written_bytes + life.gc_written_bytes));
  const double dev_waf = Wa(double(life.flash_written_bytes), double(life.device_stored_bytes));
  const double total_wa = log_wa * raid_wa * dev_waf;  // NaN if any is
  const double open_log_wa = Wa(double(BlocksToBytes(es.user_blocks + es.gc_blocks)),
                                double(BlocksToBytes(es.user_blocks)));
  const double open_raid_wa =
      Wa(double(sum.host_write_bytes), double(BlocksToBytes(es.user_blocks + es.gc_blocks)));
  const double open_dev_waf = Wa(double(sum.flash_write_bytes), double(sum.host_stored_bytes));
  Json counters;
  ForEachCounter(life, [&](const char* name, uint64_t v) { counters.Int(name, v); });
  counters.Int("since_unix", life.since_unix).Int("opens", life.opens);
  if (!a.counters_note().empty()) counters.Str("note", a.counters_note());
  const double coverage = Ratio(double(as.raid10_user_blocks), double(as.user_blocks));
  const double physical = Ratio(double(sum.live_bytes), double(sum.usable_bytes));
  const double compression =
      Ratio(double(BlocksToBytes(sum.mapped_blocks)), double(sum.live_bytes));
  Json j;
  j.Str("health", health)
      .Int("io_timeout_ms", a.io_timeout_ms())
      .Int("capacity_bytes", BlocksToBytes(vs.capacity_blocks))
      .Int("valid_bytes", BlocksToBytes(es.valid_blocks))
      .Int("trimmed_bytes", BlocksToBytes(es.trimmed_blocks))
      .Int("trim_records", es.live_trim_records)
      .Int("physical_bytes", sum.live_bytes)
      .Int("flash_bytes", sum.usable_bytes)
      .Num("physical_use", physical)
      .Num("compression", compression)
      .Num("raid10_coverage", coverage)
      .Obj("segments", Json()
                           .Int("total", as.segments)
                           .Int("free", as.free_segments)
                           .Int("raid5", as.raid5_segments)
                           .Int("raid10", as.raid10_segments)
                           .Int("open", as.open_segments)
                           .Int("untrimmed_free", as.untrimmed_free_segments)
                           .Int("unmirror_trims", as.pending_unmirror_trims))
      .Obj("wa", Json()
                     .Num("log", log_wa)
                     .Num("raid", raid_wa)
                     .Num("device", dev_waf)
                     .Num("total", total_wa))
      .Obj("wa_since_open", Json()
                                .Num("log", open_log_wa)
                                .Num("raid", open_raid_wa)
                                .Num("device", open_dev_waf)
                                .Num("total", open_log_wa * open_raid_wa * open_dev_waf))
      // The lifetime counters the WA figures divide: `eraid status --interval N` takes
      // differences of them.
      .Obj("counters", counters)
      .Obj("conversions", Json()
                              .Int("to_raid10", as.conversions_to_raid10)
                              .Int("to_raid5", as.conversions_to_raid5)
                              .Int("bytes", as.conversion_bytes))
      .Obj("errors", Json()
                         .Int("reconstructions", as.reconstructions)
                         .Int("crc_mismatches", as.crc_mismatches)
                         .Int("repairs", as.repairs)
                         .Int("data_loss", as.data_loss))
      .Arr("devices", devices);
  std::vector<Json> vol_json;
  std::string vol_text;
  for (const VolumeReport& r : a.volumes().List()) {
    vol_json.push_back(VolumeJson(r));
    vol_text += VolumeLine(r);
  }
  j.Arr("volumes", vol_json);
  const SchedulerOptions& so = a.scheduler_options();
  const PhysicalUse use = a.Physical();
  const double budget_use = so.beta > 0 && use.flash_bytes
                                ? double(use.used_bytes) / (so.beta * double(use.flash_bytes))
                                : 0;
  Json sched;
  sched.Str("policy", PolicyName(so.policy))
      .Num("beta", so.beta)
      .Num("budget_use", budget_use)
      .Int("throttle_bytes_per_sec", so.rate_bytes_per_sec)
      .Bool("running", a.scheduler() != nullptr);
  std::string sched_text =
      "scheduler:   " + std::string(PolicyName(so.policy)) + ", beta " + Fixed(so.beta, 2) +
      " (budget " + Fixed(100 * budget_use, 1) + "% used), throttle " +
      (so.rate_bytes_per_sec ? Mib(so.rate_bytes_per_sec) + "/s" : std::string("none"));
  std::string hot_text;
  if (Scheduler* sc = a.scheduler()) {
    const SchedulerStats ss = sc->stats();
    sched.Int("to_raid10", ss.to_raid10)
        .Int("to_raid5", ss.to_raid5)
        .Int("autonomous", ss.autonomous)
        .Int("swaps", ss.swaps)
        .Int("second_chances", ss.second_chances)
        .Int("degraded_steps", ss.degraded_steps)
        .Int("epochs", ss.epochs)
        .Int("bytes_moved", ss.bytes_moved)
        .Int("born_raid10", ss.born_raid10)
        .Int("born_raid5", ss.born_raid5)
        .Num("hot_half_life_s", double(so.hotness.half_life_ms) / 1000);
    sched_text += "; " + std::to_string(ss.to_raid10) + " to RAID10 (" +
                  std::to_string(ss.autonomous) + " free), " + std::to_string(ss.to_raid5) +
                  " to RAID5, " + Mib(ss.bytes_moved) + " moved";
    if (as.degraded) sched_text += "; paused while degraded";
    // The share of recent reads (the last hotness epoch's) served by RAID10 segments.
    if (ss.hot_read_coverage >= 0) {
      j.Num("hot_read_coverage", ss.hot_read_coverage);
      hot_text = ", " + Fixed(100 * ss.hot_read_coverage, 1) + "% of recent reads (" +
                 std::to_string(ss.last_epoch_reads) + " in the last epoch)";
    } else {
      j.Null("hot_read_coverage");
    }
  } else {
    j.Null("hot_read_coverage");
    sched_text += " (runs while served)";
  }
  j.Obj("scheduler", sched);
  std::string rebuild_text;
  if (state.rebuilding_device >= 0) {
    j.Obj("rebuild", Json()
                         .Int("device", uint64_t(state.rebuilding_device.load()))
                         .Int("segments_done", state.rebuild_done)
                         .Int("segments_total", state.rebuild_total)
                         .Int("bytes", state.rebuild_bytes));
    rebuild_text = "rebuild:     device " + std::to_string(state.rebuilding_device.load()) +
                   ", segment " + std::to_string(state.rebuild_done.load()) + " of " +
                   std::to_string(state.rebuild_total.load()) + "\n";
  }
  if (json) return {0, j.str() + "\n"};
  std::string t;
  t += "health:      " + health + "\n";
  t += "capacity:    " + Mib(BlocksToBytes(vs.capacity_blocks)) + " (" +
       Mib(BlocksToBytes(es.valid_blocks)) + " written)\n";
  t += "physical:    " + Mib(sum.live_bytes) + " of " + Mib(sum.usable_bytes) + " flash (" +
       Fixed(100 * physical, 1) + "%)\n";
  t += "compression: " + Fixed(compression, 2) + ":1\n";
  t += "RAID10:      " + Fixed(100 * coverage, 1) + "% of user data" + hot_text + "; segments " +
       std::to_string(as.raid5_segments) + " RAID5, " + std::to_string(as.raid10_segments) +
       " RAID10, " + std::to_string(as.open_segments) + " open, " +
       std::to_string(as.free_segments) + " free of " + std::to_string(as.segments) + "\n";
  char since[32] = "?";
  const time_t since_t = static_cast<time_t>(life.since_unix);
  struct tm tm_utc;
  if (gmtime_r(&since_t, &tm_utc))
    std::strftime(since, sizeof(since), "%Y-%m-%d %H:%M UTC", &tm_utc);
  t += "WA:          log " + Fixed(log_wa) + ", RAID " + Fixed(raid_wa) + ", device " +
       Fixed(dev_waf) + " since " + since + " (" + std::to_string(life.opens) +
       " opens); this open: log " + Fixed(open_log_wa) + ", RAID " + Fixed(open_raid_wa) +
       ", device " + Fixed(open_dev_waf) + " (- under 1 MiB written)\n";
  if (!a.counters_note().empty()) t += "             (" + a.counters_note() + ")\n";
  t += "conversions: " + std::to_string(as.conversions_to_raid10) + " to RAID10, " +
       std::to_string(as.conversions_to_raid5) + " to RAID5, " + Mib(as.conversion_bytes) +
       " moved\n";
  t += "errors:      " + std::to_string(as.reconstructions) + " reconstructed, " +
       std::to_string(as.crc_mismatches) + " CRC mismatches, " + std::to_string(as.repairs) +
       " repaired, " + std::to_string(as.data_loss) + " lost\n";
  t += sched_text + "\n" + rebuild_text + "volumes:\n" + vol_text + "devices:\n" + dev_text;
  return {0, t};
}

AdminReply Inspect(ArrayDir& a, bool json, uint32_t bins) {
  const ArrayGeometry& g = a.array().geometry();
  const ArrayStats as = a.array().stats();
  const std::vector<Volume::SegmentLbas> lbas = a.volume().LbaSummary(g.segments, bins);
  Scheduler* sc = a.scheduler();
  std::vector<Json> segs;
  std::string seg_text;
  for (uint32_t i = 0; i < g.segments; ++i) {
    const SegmentInfo si = a.array().segment_info(SegmentId(i));
    if (si.scheme == SegmentScheme::kFree) continue;
    const char* st = si.open ? "open" : si.sealed ? "sealed" : "?";
    const Volume::SegmentLbas& l = lbas[i];
    Json seg;
    seg.Int("index", i)
        .Str("scheme", raid_format::SchemeName(si.scheme))
        .Str("state", st)
        .Int("frontier", si.frontier)
        .Num("alpha_usr", si.alpha_usr)
        .Num("alpha_pty", si.alpha_pty)
        .Int("physical_bytes", si.physical_bytes)
        .Int("valid_blocks", l.valid_blocks);
    std::string range = "-";
    if (l.valid_blocks > 0) {
      seg.Int("lba_min", l.lba_min).Int("lba_max", l.lba_max).Ints("lba_histogram", l.histogram);
      range = std::to_string(l.lba_min) + ".." + std::to_string(l.lba_max);
    } else {
      seg.Null("lba_min").Null("lba_max");
    }
    std::string heat = "-";
    if (sc) {
      const Scheduler::SegmentHeat h = sc->Heat(SegmentId(i));
      seg.Num("hotness_score", h.score).Num("hotness_density", h.density);
      heat = Fixed(h.density, 3);
    }
    segs.push_back(seg);
    seg_text += "  " + std::to_string(i) + "\t" + raid_format::SchemeName(si.scheme) + "\t" + st +
                "\t" + std::to_string(si.frontier) + "\t" + std::to_string(l.valid_blocks) + "\t" +
                range + "\t" + heat + "\t" + Fixed(si.alpha_usr) + "\t" + Fixed(si.alpha_pty) +
                "\t" + std::to_string(si.physical_bytes) + "\n";
  }
  std::vector<Json> devs;
  std::string dev_text;
  for (uint32_t d = 0; d < g.devices; ++d) {
    devs.push_back(Json()
                       .Int("index", d)
                       .Str("path", Shown(a.device_path(d)))
                       .Str("state", StateName(as.devices[d].state)));
    dev_text += "  device " + std::to_string(d) + "  " + StateName(as.devices[d].state) + "  " +
                Shown(a.device_path(d)) + "\n";
  }
  char id[32];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(a.array().array_id()));
  Json j;
  j.Obj("superblock", Json()
                          .Str("array_id", id)
                          .Int("devices", g.devices)
                          .Int("chunk_blocks", g.chunk_blocks)
                          .Int("rows_per_slot", g.rows_per_slot)
                          .Int("meta_blocks", g.meta_blocks)
                          .Int("segments", g.segments)
                          .Int("segment_positions", g.segment_positions()))
      .Arr("devices", devs)
      .Obj("bitmap", Json()
                         .Int("free", as.free_segments)
                         .Int("raid5", as.raid5_segments)
                         .Int("raid10", as.raid10_segments)
                         .Int("open", as.open_segments))
      .Arr("segments", segs);
  if (json) return {0, j.str() + "\n"};
  std::string t = "superblock: array " + std::string(id) + ", " + std::to_string(g.devices) +
                  " devices, chunk " + std::to_string(g.chunk_blocks * 4) + " KiB, " +
                  std::to_string(g.rows_per_slot) + " rows per slot, " +
                  std::to_string(g.segments) + " segments of " +
                  std::to_string(g.segment_positions()) + " positions, metadata " +
                  std::to_string(g.meta_blocks) + " blocks\n";
  t += dev_text;
  t += "bitmap: " + std::to_string(as.free_segments) + " free, " +
       std::to_string(as.raid5_segments) + " RAID5, " + std::to_string(as.raid10_segments) +
       " RAID10, " + std::to_string(as.open_segments) + " open\n";
  t += "segments (index, scheme, state, positions written, valid blocks, their LBAs "
       "lowest..highest, hotness\n"
       "(decayed accesses per written block; - when not served), alpha_usr, alpha_pty, physical "
       "bytes):\n" +
       seg_text;
  return {0, t};
}

// volume create NAME SIZE | resize NAME SIZE | delete NAME | list
AdminReply Volume_(ArrayDir& a, const std::vector<std::string>& words, bool json) {
  const std::string& op = words[1];
  Volumes& v = a.volumes();
  auto size_of = [&](const std::string& text) -> Result<uint64_t> {
    ERAID_ASSIGN_OR_RETURN(uint64_t bytes, ParseSize(text));
    if (bytes == 0 || bytes % kBlockSize != 0)
      return Status::InvalidArgument("size must be a positive multiple of 4 KiB");
    return BytesToBlocks(bytes);
  };
  Status s;
  if (op == "list" && words.size() == 2) {
    const std::vector<VolumeReport> list = v.List();
    std::vector<Json> js;
    std::string t = "volumes (" + std::to_string(list.size()) + "; " +
                    Mib(BlocksToBytes(v.provisioned_blocks())) + " provisioned of at most " +
                    Mib(BlocksToBytes(v.limit_blocks())) + ", the array holds " +
                    Mib(BlocksToBytes(a.volume().capacity_blocks())) + "):\n";
    for (const VolumeReport& r : list) {
      js.push_back(VolumeJson(r));
      t += VolumeLine(r);
    }
    Json j;
    j.Arr("volumes", js)
        .Int("provisioned_bytes", BlocksToBytes(v.provisioned_blocks()))
        .Int("limit_bytes", BlocksToBytes(v.limit_blocks()))
        .Int("capacity_bytes", BlocksToBytes(a.volume().capacity_blocks()));
    return {0, json ? j.str() + "\n" : t};
  } else if ((op == "create" || op == "resize") && words.size() == 4) {
    auto blocks = size_of(words[3]);
    if (!blocks.ok()) return Error(2, blocks.status().message());
    s = op == "create" ? v.Create(words[2], *blocks) : v.Resize(words[2], *blocks);
  } else if (op == "delete" && words.size() == 3) {
    s = v.Delete(words[2]);
  } else {
    return Error(2, "usage: volume list | create NAME SIZE | resize NAME SIZE | delete NAME");
  }
  if (!s.ok()) return Error(s.code() == StatusCode::kInvalidArgument ? 2 : 1, s.message());
  const std::string what = op + "d volume " + words[2];
  return {0, json ? Json().Str("volume", words[2]).Str("done", op).str() + "\n" : what + "\n"};
}

// One admin command's context: the words (verb first, --json taken out), the array, and
// what the caller passed along.
struct AdminCommand {
  ArrayDir& array;
  AdminState& state;
  const std::vector<std::string>& words;
  bool json;
  const std::function<void(double)>& progress;
  const std::function<bool()>& cancelled;
  // The reply: `text` for people, `j` with --json.
  AdminReply Done(const std::string& text, const Json& j) const {
    return {0, json ? j.str() + "\n" : text + "\n"};
  }
};

// status
AdminReply RunStatus(const AdminCommand& c) { return Status_(c.array, c.state, c.json); }

// volume list | create NAME SIZE | resize NAME SIZE | delete NAME
AdminReply RunVolume(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  return Volume_(a, words, c.json);
}

// inspect [BINS]
AdminReply RunInspect(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  uint32_t bins = 20;
  if (words.size() == 2) {
    auto b = ParseIndex(words[1], 1001, "bins");
    if (!b.ok() || *b == 0) return Error(2, "bins must be 1..1000");
    bins = *b;
  }
  return Inspect(a, c.json, bins);
}

// fail DEVICE
AdminReply RunFail(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const uint32_t devices = a.array().geometry().devices;
  auto d = ParseIndex(words[1], devices, "device");
  if (!d.ok()) return Error(2, d.status().message());
  Status s = a.array().FailDevice(*d);
  if (!s.ok()) return Error(1, s.ToString());
  return c.Done("device " + words[1] + " failed; the array runs degraded",
                Json()
                    .Int("failed", *d)
                    .Str("health", a.array().stats().data_at_risk ? "data-at-risk" : "degraded"));
}

// set-io-timeout MILLISECONDS
AdminReply RunSetIoTimeout(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  auto ms = ParseIndex(words[1], 86400001, "milliseconds");
  if (!ms.ok()) return Error(2, ms.status().message());
  Status s = a.SetIoTimeout(static_cast<uint32_t>(*ms));
  if (!s.ok()) return Error(s.code() == StatusCode::kInvalidArgument ? 2 : 1, s.ToString());
  return c.Done("io timeout " + words[1] + " ms, on every remote drive's connection now",
                Json().Int("io_timeout_ms", *ms));
}

// replace DEVICE [PATH [RATE]] | re-add DEVICE [RATE]
AdminReply RunRebuild(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const std::string& verb = words[0];
  const uint32_t devices = a.array().geometry().devices;
  AdminState& state = c.state;
  const std::function<void(double)>& progress = c.progress;
  auto d = ParseIndex(words[1], devices, "device");
  if (!d.ok()) return Error(2, d.status().message());
  const size_t rate_at = verb == "replace" ? 3 : 2;
  uint64_t rate = 0;
  if (words.size() > rate_at) {
    auto r = ParseSize(words[rate_at]);
    if (!r.ok()) return Error(2, "bad --rate: " + r.status().message());
    rate = *r;
  }
  // One rebuild at a time; its progress in `state` (for status) and on the caller's line.
  int expected = -1;
  if (!state.rebuilding_device.compare_exchange_strong(expected, static_cast<int>(*d))) {
    return Error(1, "device " + std::to_string(expected) + " is being rebuilt already");
  }
  state.rebuild_done = 0;
  state.rebuild_total = a.array().geometry().segments;
  LowerThisThreadPriority();  // this request's own thread: the rebuild yields to user I/O
  auto report = [&](const RebuildProgress& p) {
    state.rebuild_done = p.segments_done;
    state.rebuild_total = p.segments_total;
    state.rebuild_bytes = p.bytes_written;
    if (progress && p.segments_total) progress(double(p.segments_done) / p.segments_total);
  };
  const auto start = std::chrono::steady_clock::now();
  Result<ReAddReport> readd = ReAddReport{};
  Status s;
  if (verb == "replace") {
    s = a.Replace(*d, words.size() >= 3 ? words[2] : "", rate, report);
  } else {
    readd = a.ReAdd(*d, rate, report);
    s = readd.status();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t bytes = state.rebuild_bytes;
  state.rebuilding_device = -1;
  // A drive re-add refuses (another one, an older image) is the caller's mistake: 2.
  if (!s.ok())
    return Error(verb == "re-add" && s.code() == StatusCode::kInvalidArgument ? 2 : 1,
                 s.ToString());
  Json j = Json().Int("device", *d).Str("path", Shown(a.device_path(*d)));
  if (verb == "replace") {
    return c.Done("device " + words[1] + " rebuilt onto " + Shown(a.device_path(*d)) + ": " +
                      Mib(bytes) + " in " + Fixed(secs, 2) + " s",
                  j.Int("bytes", bytes).Num("seconds", secs));
  }
  const ReAddReport& r = *readd;
  return c.Done("device " + words[1] + " re-added: " + Mib(r.resynced_bytes) + " resynced of " +
                    Mib(r.total_bytes) + " (" + std::to_string(r.segments_resynced) + " of " +
                    std::to_string(r.segments_total) + " segments) in " + Fixed(secs, 2) + " s",
                j.Int("resynced_bytes", r.resynced_bytes)
                    .Int("total_bytes", r.total_bytes)
                    .Int("segments_resynced", r.segments_resynced)
                    .Int("segments_total", r.segments_total)
                    .Num("seconds", secs));
}

// scrub
AdminReply RunScrub(const AdminCommand& c) {
  ArrayDir& a = c.array;
  LowerThisThreadPriority();
  auto r = a.array().Scrub();
  if (!r.ok()) return Error(1, r.status().ToString());
  const ScrubReport& rep = *r;
  const uint64_t mismatches = rep.crc_mismatches + rep.parity_mismatches + rep.mirror_mismatches;
  std::string t =
      "scrub: " + std::to_string(rep.segments) + " segments, " +
      std::to_string(rep.blocks_checked) + " blocks checked, " + std::to_string(mismatches) +
      " mismatches (" + std::to_string(rep.crc_mismatches) + " CRC, " +
      std::to_string(rep.parity_mismatches) + " parity, " + std::to_string(rep.mirror_mismatches) +
      " mirror), " + std::to_string(rep.repaired) + " repaired, " +
      std::to_string(rep.unrepairable) + " unrepairable";
  for (const std::string& f : rep.findings) t += "\n  " + f;
  AdminReply reply = c.Done(t, Json()
                                   .Int("segments", rep.segments)
                                   .Int("blocks_checked", rep.blocks_checked)
                                   .Int("mismatches", mismatches)
                                   .Int("crc_mismatches", rep.crc_mismatches)
                                   .Int("parity_mismatches", rep.parity_mismatches)
                                   .Int("mirror_mismatches", rep.mirror_mismatches)
                                   .Int("repaired", rep.repaired)
                                   .Int("unrepairable", rep.unrepairable));
  if (rep.unrepairable > 0) reply.rc = 1;
  return reply;
}

// convert raid5|raid10 SEGMENT|all [RATE]
AdminReply RunConvert(const AdminCommand& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const std::function<void(double)>& progress = c.progress;
  const std::function<bool()>& cancelled = c.cancelled;
  SegmentScheme to;
  if (words[1] == "raid5")
    to = SegmentScheme::kRaid5;
  else if (words[1] == "raid10")
    to = SegmentScheme::kRaid10;
  else
    return Error(2, "--to must be raid5 or raid10, not '" + words[1] + "'");
  const uint32_t segments = a.array().geometry().segments;
  uint32_t first = 0, last = segments;
  if (words[2] != "all") {
    auto s = ParseIndex(words[2], segments, "segment");
    if (!s.ok()) return Error(2, s.status().message());
    first = *s;
    last = *s + 1;
    const SegmentInfo si = a.array().segment_info(SegmentId(first));
    if (!si.sealed) return Error(1, "segment " + words[2] + " is not sealed (free or still open)");
  }
  uint64_t rate = 0;
  if (words.size() == 4) {
    auto r = ParseSize(words[3]);
    if (!r.ok()) return Error(2, "bad --rate: " + r.status().message());
    rate = *r;
  }
  LowerThisThreadPriority();
  // Paced over the user bytes converted: before each segment, wait until the bytes so
  // far are due at `rate` (the scheduler's throttle counts the same bytes).
  const auto start = std::chrono::steady_clock::now();
  uint32_t converted = 0, skipped = 0;
  uint64_t bytes = 0;
  bool stopped = false;
  for (uint32_t i = first; i < last; ++i) {
    if (cancelled && cancelled()) {
      stopped = true;
      break;
    }
    const SegmentInfo si = a.array().segment_info(SegmentId(i));
    if (si.sealed && si.scheme != to) {
      if (rate > 0) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(double(bytes) / double(rate))));
      }
      Status s = a.array().Convert(SegmentId(i), to);
      if (s.ok()) {
        ++converted;
        bytes += BlocksToBytes(si.frontier);
      } else if (last - first == 1) {
        return Error(1, s.ToString());
      } else {
        ++skipped;  // freed by GC meanwhile
      }
    }
    if (progress) progress(double(i - first + 1) / double(last - first));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c.Done("converted " + std::to_string(converted) + " segments (" + Mib(bytes) + ") to " +
                    words[1] + " in " + Fixed(secs, 2) + " s" +
                    (skipped ? " (" + std::to_string(skipped) + " went away meanwhile)" : "") +
                    (stopped ? " (stopped: the client went away)" : ""),
                Json()
                    .Int("converted", converted)
                    .Int("skipped", skipped)
                    .Str("to", words[1])
                    .Int("bytes", bytes)
                    .Num("seconds", secs));
}

// The commands: verb, how many words (the verb included) it takes, and what runs it.
struct CommandEntry {
  const char* verb;
  size_t min_words, max_words;
  AdminReply (*run)(const AdminCommand&);
};
constexpr CommandEntry kCommands[] = {
    {"status", 1, 1, RunStatus},
    {"volume", 2, 64, RunVolume},  // its own usage message for a wrong count
    {"inspect", 1, 2, RunInspect},
    {"fail", 2, 2, RunFail},
    {"set-io-timeout", 2, 2, RunSetIoTimeout},
    {"replace", 2, 4, RunRebuild},
    {"re-add", 2, 3, RunRebuild},
    {"scrub", 1, 1, RunScrub},
    {"convert", 3, 4, RunConvert},
};

}  // namespace

AdminReply RunAdmin(ArrayDir& a, AdminState& state, const std::vector<std::string>& in,
                    const std::function<void(double)>& progress,
                    const std::function<bool()>& cancelled) {
  std::vector<std::string> words;
  bool json = false;
  for (const std::string& w : in) {
    if (w == "--json")
      json = true;
    else
      words.push_back(w);
  }
  if (words.empty()) return Error(2, "no command");
  for (const CommandEntry& cmd : kCommands) {
    if (words[0] != cmd.verb || words.size() < cmd.min_words || words.size() > cmd.max_words)
      continue;
    return cmd.run(AdminCommand{a, state, words, json, progress, cancelled});
  }
  return Error(2, "unknown or malformed admin command '" + words[0] + "' (" +
                      std::to_string(words.size()) + " words)");
}

std::string AdminSocketPath(const std::string& dir) { return dir + "/admin.sock"; }

namespace {

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads one '\n'-terminated line of at most `limit` bytes (without the newline).
bool ReadLine(int fd, std::string* line, size_t limit) {
  line->clear();
  char c;
  while (line->size() <= limit) {
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

sockaddr_un Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

}  // namespace

Result<AdminReply> AdminCall(const std::string& dir, const std::vector<std::string>& words,
                             const std::function<void(double)>& progress) {
  const std::string path = AdminSocketPath(dir);
  if (path.size() >= sizeof(sockaddr_un::sun_path))
    return Status::InvalidArgument("directory path too long for a socket");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr = Address(path);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED) return Status::NotFound("no server on " + path);
    return Status::IoError("connect " + path + ": " + std::strerror(e));
  }
  std::string request = kMagic;
  for (const std::string& w : words) {
    if (w.find_first_of("\t\n") != std::string::npos) {
      ::close(fd);
      return Status::InvalidArgument("arguments may not contain tabs or newlines");
    }
    request += "\t" + w;
  }
  request += "\n";
  if (!WriteAll(fd, request)) {
    ::close(fd);
    return Status::IoError("admin socket closed while sending");
  }
  std::string line;
  while (ReadLine(fd, &line, kMaxRequest)) {
    if (line.rfind("progress ", 0) == 0) {
      if (progress) progress(std::atof(line.c_str() + 9));
      continue;
    }
    int rc = 0;
    unsigned long long len = 0;
    if (std::sscanf(line.c_str(), "result %d %llu", &rc, &len) != 2) break;
    AdminReply reply{rc, std::string(len, '\0')};
    size_t off = 0;
    while (off < len) {
      ssize_t n = ::recv(fd, reply.text.data() + off, len - off, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fd);
    if (off < len) return Status::IoError("admin reply truncated");
    return reply;
  }
  ::close(fd);
  return Status::IoError("admin socket closed without a reply (did the server stop?)");
}

AdminServer::AdminServer(ArrayDir& array, std::function<void()> on_shutdown)
    : array_(array), on_shutdown_(std::move(on_shutdown)), path_(AdminSocketPath(array.dir())) {}

AdminServer::~AdminServer() { Stop(); }

Status AdminServer::Start() {
  if (path_.size() >= sizeof(sockaddr_un::sun_path))
    return Status::InvalidArgument("directory path too long for a socket");
  ::unlink(path_.c_str());  // left by a server that was killed: the array lock says none runs
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr = Address(path_);
  const mode_t old = ::umask(0177);  // the socket is created 0600: only the owner administers
  const int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (rc != 0 || ::chmod(path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0) {
    return Status::IoError("admin socket " + path_ + ": " + std::strerror(errno));
  }
  acceptor_ = std::thread([this] {
    NameThisThread("eraid-admin");
    Loop();
  });
  return Status::Ok();
}

void AdminServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_)
      ::shutdown(fd, SHUT_RDWR);  // unblocks reads; a running command finishes
  }
  for (Worker& w : workers_) w.thread.join();
  workers_.clear();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
  listen_fd_ = -1;
}

void AdminServer::Loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    open_fds_.push_back(fd);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (*it->done) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([this, fd, done] {
                          NameThisThread("eraid-admin");
                          Serve(fd);
                          *done = true;
                        }),
                        done});
  }
}

void AdminServer::Serve(int fd) {
  std::string line;
  std::vector<std::string> words;
  AdminReply reply;
  bool shutdown = false;
  if (!ReadLine(fd, &line, kMaxRequest)) {
    reply = Error(
        2, "malformed admin request: no line of at most " + std::to_string(kMaxRequest) + " bytes");
  } else {
    words = Split(line, '\t');
    if (words.empty() || words[0] != kMagic) {
      reply = Error(2, "malformed admin request: it must start with '" + std::string(kMagic) + "'");
    } else {
      words.erase(words.begin());
      if (words.size() == 1 && words[0] == "shutdown") {
        reply = {0, "shutting down\n"};
        shutdown = true;
      } else {
        bool gone = false;
        reply = RunAdmin(
            array_, state_, words,
            [&](double f) { gone = gone || !WriteAll(fd, "progress " + Fixed(f, 4) + "\n"); },
            [&] { return gone; });
      }
    }
  }
  WriteAll(fd, "result " + std::to_string(reply.rc) + " " + std::to_string(reply.text.size()) +
                   "\n" + reply.text);
  {
    std::lock_guard lock(mu_);
    std::erase(open_fds_, fd);
    ::close(fd);
  }
  if (shutdown && on_shutdown_) on_shutdown_();
}

}  // namespace eraid
