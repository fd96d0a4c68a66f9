// The admin reports: status, inspect, and the volume command's listing.
#include <ctime>

#include "tools/server/admin_internal.h"

namespace eraid::admin_internal {
namespace {

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

}  // namespace

AdminReply StatusReport(ArrayDir& a, AdminState& state, bool json) {
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

AdminReply InspectReport(ArrayDir& a, bool json, uint32_t bins) {
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

AdminReply VolumeCommand(ArrayDir& a, const std::vector<std::string>& words, bool json) {
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

}  // namespace eraid::admin_internal
