// The admin reports: status, inspect, and the volume command's listing.
#include <ctime>

#include "tools/server/admin_internal.h"

namespace eraid::admin_internal {
namespace {

Json VolumeJson(const VolumeReport& r) {
  const ExtentCounters& c = r.counters;
  return Json::object({{"name", r.name},
                       {"size_bytes", BlocksToBytes(r.size_blocks)},
                       {"written_bytes", BlocksToBytes(c.user_blocks)},
                       {"valid_bytes", BlocksToBytes(c.valid_blocks)},
                       {"trimmed_bytes", BlocksToBytes(c.trimmed_blocks)},
                       {"wa", Figure(Wa(double(BlocksToBytes(c.user_blocks + c.gc_blocks)),
                                        double(BlocksToBytes(c.user_blocks))))},
                       {"read_requests", r.reads},
                       {"write_requests", r.writes},
                       {"connections", uint64_t(r.connections)}});
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

// A drive's figures under the timing model: into its JSON object, and as a line of text.
std::string DriveModelReport(const DriveModelStats& m, Json* dev) {
  (*dev)["model"] = Json::object({{"utilization", Figure(m.utilization())},
                                  {"queue_depth_mean", Figure(m.mean_queue_depth())},
                                  {"in_flight", m.in_flight},
                                  {"queued_share", Figure(m.queued_share())},
                                  {"served_share", Figure(m.ops ? 1 - m.queued_share() : 0.0)},
                                  {"ops", m.ops},
                                  {"flash_reads", m.flash_reads},
                                  {"flash_programs", m.flash_programs},
                                  {"erases", m.erases}});
  return "    model: NAND busy " + Fixed(100 * m.utilization(), 1) + "%  queue depth " +
         Fixed(m.mean_queue_depth(), 1) + " (now " + std::to_string(m.in_flight) +
         ")  of each I/O's time " + Fixed(100 * m.queued_share(), 0) + "% queued, " +
         Fixed(m.ops ? 100 * (1 - m.queued_share()) : 0.0, 0) + "% served  (" +
         std::to_string(m.ops) + " I/Os)\n";
}

// A remote drive's link: into its JSON object, and as a line of text.
std::string LinkReport(const NbdLinkStats& l, Json* dev) {
  (*dev)["link"] = Json::object({{"uri", l.uri},
                                 {"state", l.state},
                                 {"error", l.error},
                                 {"requests", l.requests},
                                 {"timeouts", l.timeouts},
                                 {"latency_p50_us", l.p50_us},
                                 {"latency_p99_us", l.p99_us},
                                 {"abandoned_writes", l.abandoned},
                                 {"draining", l.draining},
                                 {"lane_reads", l.lane_reads},
                                 {"lanes", l.lanes}});
  return "    link " + l.state + "  latency p50 " + std::to_string(l.p50_us) + " us  p99 " +
         std::to_string(l.p99_us) + " us  requests " + std::to_string(l.requests) +
         (l.lanes > 0 ? "  (" + std::to_string(l.lane_reads) + " reads on " +
                            std::to_string(l.lanes) + " lanes)"
                      : "") +
         (l.error.empty() ? "" : "  (" + l.error + ")") +
         (l.draining ? "  " + std::to_string(l.abandoned) + " abandoned writes may still land"
                     : "") +
         "\n";
}

// Status's sections, each as JSON and as text.
struct DevicesSection {
  Json json = Json::array();
  std::string text;
  DriveStats sum;  // the drives' figures added up
};
DevicesSection Devices(ArrayDir& a, const ArrayStats& as) {
  DevicesSection out;
  const auto links = a.links();
  const std::vector<DriveStats> drive_stats = a.drive_stats();
  const std::vector<DriveModelStats> model_stats = a.drive_model_stats();
  for (uint32_t d = 0; d < drive_stats.size(); ++d) {
    const DriveStats& ds = drive_stats[d];
    out.sum.Add(ds);
    const DeviceStats& st = as.devices[d];
    const double waf = Wa(double(ds.flash_write_bytes), double(ds.host_stored_bytes));
    Json dev = Json::object({{"index", d},
                             {"path", Shown(a.device_path(d))},
                             {"state", StateName(st.state)},
                             {"reads", st.reads},
                             {"writes", st.writes},
                             {"errors", st.errors},
                             {"physical_bytes", ds.live_bytes},
                             {"flash_bytes", ds.usable_bytes},
                             {"compression", Figure(ds.compression_ratio())},
                             {"device_waf", Figure(waf)}});
    std::string link_text;
    if (d < links.size() && links[d]) link_text = LinkReport(*links[d], &dev);
    if (a.drive_model().enabled() && d < model_stats.size())
      link_text += DriveModelReport(model_stats[d], &dev);
    out.json.push_back(std::move(dev));
    out.text += "  device " + std::to_string(d) + "  " + StateName(st.state) + "  " +
                Mib(ds.live_bytes) + " of " + Mib(ds.usable_bytes) + "  compression " +
                Fixed(ds.compression_ratio(), 2) + "  WAF " + Fixed(waf) + "  errors " +
                std::to_string(st.errors) + "  " + Shown(a.device_path(d)) + "\n" + link_text;
  }
  return out;
}

// Write amplification over the array's life (DIR/eraid.stats) and since this open.
struct WaFigures {
  double log, raid, device, open_log, open_raid, open_device;
};
WaFigures WaOf(const LifetimeCounters& life, const EngineStats& es, const DriveStats& sum) {
  return {
      Wa(double(life.user_written_bytes + life.gc_written_bytes), double(life.user_written_bytes)),
      Wa(double(life.raid_written_bytes), double(life.user_written_bytes + life.gc_written_bytes)),
      Wa(double(life.flash_written_bytes), double(life.device_stored_bytes)),
      Wa(double(BlocksToBytes(es.user_blocks + es.gc_blocks)),
         double(BlocksToBytes(es.user_blocks))),
      Wa(double(sum.host_write_bytes), double(BlocksToBytes(es.user_blocks + es.gc_blocks))),
      Wa(double(sum.flash_write_bytes), double(sum.host_stored_bytes))};
}

struct SchedulerSection {
  Json json;
  std::string text;        // one line, without its newline
  std::string hot_text;    // the RAID10 line's share of recent reads
  Json hot_read_coverage;  // null if not known
};
SchedulerSection SchedulerReport(ArrayDir& a, const ArrayStats& as) {
  SchedulerSection out;
  const SchedulerOptions& so = a.scheduler_options();
  const PhysicalUse use = a.Physical();
  const double budget_use = so.beta > 0 && use.flash_bytes
                                ? double(use.used_bytes) / (so.beta * double(use.flash_bytes))
                                : 0;
  out.json = Json::object({{"policy", PolicyName(so.policy)},
                           {"beta", Figure(so.beta)},
                           {"budget_use", Figure(budget_use)},
                           {"throttle_bytes_per_sec", so.rate_bytes_per_sec},
                           {"running", a.scheduler() != nullptr}});
  out.text = "scheduler:   " + std::string(PolicyName(so.policy)) + ", beta " + Fixed(so.beta, 2) +
             " (budget " + Fixed(100 * budget_use, 1) + "% used), throttle " +
             (so.rate_bytes_per_sec ? Mib(so.rate_bytes_per_sec) + "/s" : std::string("none"));
  Scheduler* sc = a.scheduler();
  if (sc == nullptr) {
    out.text += " (runs while served)";
    return out;
  }
  const SchedulerStats ss = sc->stats();
  out.json.update(
      Json::object({{"to_raid10", ss.to_raid10},
                    {"to_raid5", ss.to_raid5},
                    {"autonomous", ss.autonomous},
                    {"swaps", ss.swaps},
                    {"second_chances", ss.second_chances},
                    {"degraded_steps", ss.degraded_steps},
                    {"epochs", ss.epochs},
                    {"bytes_moved", ss.bytes_moved},
                    {"born_raid10", ss.born_raid10},
                    {"born_raid5", ss.born_raid5},
                    {"demotions_for_space", ss.demotions_for_space},
                    {"gc_spared", ss.gc_spared},
                    {"over_allowance", ss.over_allowance},
                    {"write_share", Figure(ss.write_share)},
                    {"allowance_bytes", static_cast<int64_t>(ss.allowance_bytes)},
                    {"conversion_share", Figure(so.conversion_share)},
                    {"hot_half_life_s", Figure(double(so.hotness.half_life_ms) / 1000)}}));
  out.text += "; " + std::to_string(ss.to_raid10) + " to RAID10 (" + std::to_string(ss.autonomous) +
              " free), " + std::to_string(ss.to_raid5) + " to RAID5, " + Mib(ss.bytes_moved) +
              " moved";
  if (ss.write_share >= 0)
    out.text +=
        "; writes " + Fixed(100 * ss.write_share, 0) + "% of the traffic" +
        (ss.write_share > 0.2
             ? " (conversions within " + Fixed(100 * so.conversion_share, 0) + "% of bytes written)"
             : "");
  if (as.degraded) out.text += "; paused while degraded";
  // The share of recent reads (the last hotness epoch's) served by RAID10 segments.
  if (ss.hot_read_coverage >= 0) {
    out.hot_read_coverage = Figure(ss.hot_read_coverage);
    out.hot_text = ", " + Fixed(100 * ss.hot_read_coverage, 1) + "% of recent reads (" +
                   std::to_string(ss.last_epoch_reads) + " in the last epoch)";
  }
  return out;
}

// What status shows, gathered once for both forms.
struct StatusFigures {
  std::string health;
  ArrayStats as;
  VolumeStats vs;
  DevicesSection devices;
  LifetimeCounters life;
  WaFigures wa;
  double coverage, physical, compression;
};

Json StatusJson(ArrayDir& a, const StatusFigures& f) {
  const ArrayStats& as = f.as;
  const EngineStats& es = f.vs.engine;
  Json counters = Json::object();
  ForEachCounter(f.life, [&](const char* name, uint64_t v) { counters[name] = v; });
  counters["since_unix"] = f.life.since_unix;
  counters["opens"] = f.life.opens;
  if (!a.counters_note().empty()) counters["note"] = a.counters_note();
  auto wa_json = [](double log, double raid, double device) {
    return Json::object({{"log", Figure(log)},
                         {"raid", Figure(raid)},
                         {"device", Figure(device)},
                         {"total", Figure(log * raid * device)}});  // NaN if any is
  };
  const ArrayDir::OpenTimes& ot = a.open_times();
  return Json::object(
      {{"health", f.health},
       {"io_timeout_ms", a.io_timeout_ms()},
       {"capacity_bytes", BlocksToBytes(f.vs.capacity_blocks)},
       {"valid_bytes", BlocksToBytes(es.valid_blocks)},
       {"trimmed_bytes", BlocksToBytes(es.trimmed_blocks)},
       {"trim_records", es.live_trim_records},
       {"physical_bytes", f.devices.sum.live_bytes},
       {"flash_bytes", f.devices.sum.usable_bytes},
       {"physical_use", Figure(f.physical)},
       {"compression", Figure(f.compression)},
       {"raid10_coverage", Figure(f.coverage)},
       {"segments", Json::object({{"total", as.segments},
                                  {"free", as.free_segments},
                                  {"raid5", as.raid5_segments},
                                  {"raid10", as.raid10_segments},
                                  {"open", as.open_segments},
                                  {"untrimmed_free", as.untrimmed_free_segments},
                                  {"unmirror_trims", as.pending_unmirror_trims}})},
       {"wa", wa_json(f.wa.log, f.wa.raid, f.wa.device)},
       {"wa_since_open", wa_json(f.wa.open_log, f.wa.open_raid, f.wa.open_device)},
       // The lifetime counters the WA figures divide: `eraid status --interval N`
       // takes differences of them.
       {"counters", counters},
       {"conversions", Json::object({{"to_raid10", as.conversions_to_raid10},
                                     {"to_raid5", as.conversions_to_raid5},
                                     {"bytes", as.conversion_bytes}})},
       {"errors", Json::object({{"reconstructions", as.reconstructions},
                                {"crc_mismatches", as.crc_mismatches},
                                {"repairs", as.repairs},
                                {"data_loss", as.data_loss}})},
       // Sealed segments' block CRCs in RAM (bounded by serve --crc-cache-mib), and how
       // often they were read back from the summaries or let go.
       {"crc_cache", Json::object({{"bytes", as.crc_cache_bytes},
                                   {"loads", as.crc_cache_loads},
                                   {"evictions", as.crc_cache_evictions}})},
       // RAM by layer, as each counts its own state (not the allocator's slack, nor
       // buffers and queues): the log's tables, the array's per-segment state, the
       // drives' FTL maps.
       {"memory", Json::object({{"log_bytes", f.vs.memory_bytes},
                                {"array_bytes", as.memory_bytes},
                                {"crc_cache_bytes", as.crc_cache_bytes},
                                {"drive_map_bytes", f.devices.sum.map_bytes}})},
       {"devices", f.devices.json},
       {"drive_model", a.drive_model().Spec()},
       // How long the open took, by stage (a crash's recovery is in it: the drives replay
       // their records, the array completes open segments).
       {"open", Json::object({{"seconds", Figure(ot.total_seconds)},
                              {"drives_seconds", Figure(ot.drives_seconds)},
                              {"array_seconds", Figure(ot.array_seconds)},
                              {"log_seconds", Figure(ot.volume_seconds)},
                              // Not zero: the open was a crash recovery (these drives
                              // were not closed cleanly), and its time is the above.
                              {"crashed_drives", ot.crashed_drives}})}});
}

// The text form's lines down to the conversions and errors, and how long the open took.
std::string StatusText(ArrayDir& a, const StatusFigures& f, const std::string& hot_text) {
  const ArrayStats& as = f.as;
  const DriveStats& sum = f.devices.sum;
  std::string t;
  t += "health:      " + f.health + "\n";
  t += "capacity:    " + Mib(BlocksToBytes(f.vs.capacity_blocks)) + " (" +
       Mib(BlocksToBytes(f.vs.engine.valid_blocks)) + " written)\n";
  t += "physical:    " + Mib(sum.live_bytes) + " of " + Mib(sum.usable_bytes) + " flash (" +
       Fixed(100 * f.physical, 1) + "%)\n";
  t += "compression: " + Fixed(f.compression, 2) + ":1\n";
  if (a.drive_model().enabled()) {
    t += "drive model: " + a.drive_model().Spec() + " (each I/O completes at its modeled time)\n";
  }
  t += "RAID10:      " + Fixed(100 * f.coverage, 1) + "% of user data" + hot_text + "; segments " +
       std::to_string(as.raid5_segments) + " RAID5, " + std::to_string(as.raid10_segments) +
       " RAID10, " + std::to_string(as.open_segments) + " open, " +
       std::to_string(as.free_segments) + " free of " + std::to_string(as.segments) + "\n";
  char since[32] = "?";
  const time_t since_t = static_cast<time_t>(f.life.since_unix);
  struct tm tm_utc;
  if (gmtime_r(&since_t, &tm_utc))
    std::strftime(since, sizeof(since), "%Y-%m-%d %H:%M UTC", &tm_utc);
  t += "WA:          log " + Fixed(f.wa.log) + ", RAID " + Fixed(f.wa.raid) + ", device " +
       Fixed(f.wa.device) + " since " + since + " (" + std::to_string(f.life.opens) +
       " opens); this open: log " + Fixed(f.wa.open_log) + ", RAID " + Fixed(f.wa.open_raid) +
       ", device " + Fixed(f.wa.open_device) + " (- under 1 MiB written)\n";
  if (!a.counters_note().empty()) t += "             (" + a.counters_note() + ")\n";
  t += "conversions: " + std::to_string(as.conversions_to_raid10) + " to RAID10, " +
       std::to_string(as.conversions_to_raid5) + " to RAID5, " + Mib(as.conversion_bytes) +
       " moved\n";
  t += "errors:      " + std::to_string(as.reconstructions) + " reconstructed, " +
       std::to_string(as.crc_mismatches) + " CRC mismatches, " + std::to_string(as.repairs) +
       " repaired, " + std::to_string(as.data_loss) + " lost\n";
  const ArrayDir::OpenTimes& ot = a.open_times();
  if (ot.total_seconds > 0) {
    t += "opened in:   " + Fixed(ot.total_seconds, 2) + " s" +
         (ot.crashed_drives ? ", a crash recovery (" + std::to_string(ot.crashed_drives) +
                                  " drives not closed cleanly)"
                            : "") +
         " (drives " + Fixed(ot.drives_seconds, 2) + " s, array " + Fixed(ot.array_seconds, 2) +
         " s, log " + Fixed(ot.volume_seconds, 2) + " s)\n";
  }
  return t;
}

}  // namespace

AdminReply StatusReport(ArrayDir& a, AdminState& state, bool json) {
  StatusFigures f{.as = a.array().stats(), .vs = a.volume().stats()};
  f.devices = Devices(a, f.as);
  f.health = f.as.data_at_risk              ? "data-at-risk"
             : state.rebuilding_device >= 0 ? "rebuilding"
             : f.as.degraded                ? "degraded"
                                            : "ok";
  f.life = a.Lifetime();
  f.wa = WaOf(f.life, f.vs.engine, f.devices.sum);
  const DriveStats& sum = f.devices.sum;
  f.coverage = Ratio(double(f.as.raid10_user_blocks), double(f.as.user_blocks));
  f.physical = Ratio(double(sum.live_bytes), double(sum.usable_bytes));
  f.compression = Ratio(double(BlocksToBytes(sum.mapped_blocks)), double(sum.live_bytes));
  Json j = StatusJson(a, f);
  Json vol_json = Json::array();
  std::string vol_text;
  for (const VolumeReport& r : a.volumes().List()) {
    vol_json.push_back(VolumeJson(r));
    vol_text += VolumeLine(r);
  }
  j["volumes"] = vol_json;
  const SchedulerSection sched = SchedulerReport(a, f.as);
  j["hot_read_coverage"] = sched.hot_read_coverage;
  j["scheduler"] = sched.json;
  std::string rebuild_text;
  if (state.rebuilding_device >= 0) {
    j["rebuild"] = Json::object({{"device", uint64_t(state.rebuilding_device.load())},
                                 {"segments_done", state.rebuild_done.load()},
                                 {"segments_total", state.rebuild_total.load()},
                                 {"bytes", state.rebuild_bytes.load()}});
    rebuild_text = "rebuild:     device " + std::to_string(state.rebuilding_device.load()) +
                   ", segment " + std::to_string(state.rebuild_done.load()) + " of " +
                   std::to_string(state.rebuild_total.load()) + "\n";
  }
  if (json) return {0, j.dump() + "\n"};
  return {0, StatusText(a, f, sched.hot_text) + sched.text + "\n" + rebuild_text + "volumes:\n" +
                 vol_text + "devices:\n" + f.devices.text};
}

AdminReply InspectReport(ArrayDir& a, bool json, uint32_t bins) {
  const ArrayGeometry& g = a.array().geometry();
  const ArrayStats as = a.array().stats();
  const std::vector<LogVolume::SegmentLbas> lbas = a.volume().LbaSummary(g.segments, bins);
  Scheduler* sc = a.scheduler();
  Json segs = Json::array();
  std::string seg_text;
  for (uint32_t i = 0; i < g.segments; ++i) {
    const SegmentInfo si = a.array().segment_info(SegmentId(i));
    if (si.scheme == SegmentScheme::kFree) continue;
    const char* st = si.open ? "open" : si.sealed ? "sealed" : "?";
    const LogVolume::SegmentLbas& l = lbas[i];
    Json seg = Json::object({{"index", i},
                             {"scheme", raid_format::SchemeName(si.scheme)},
                             {"state", st},
                             {"frontier", si.frontier},
                             {"alpha_usr", Figure(si.alpha_usr)},
                             {"alpha_pty", Figure(si.alpha_pty)},
                             {"physical_bytes", si.physical_bytes},
                             {"valid_blocks", l.valid_blocks}});
    std::string range = "-";
    if (l.valid_blocks > 0) {
      seg["lba_min"] = l.lba_min;
      seg["lba_max"] = l.lba_max;
      seg["lba_histogram"] = l.histogram;
      range = std::to_string(l.lba_min) + ".." + std::to_string(l.lba_max);
    } else {
      seg["lba_min"] = nullptr;
      seg["lba_max"] = nullptr;
    }
    std::string heat = "-";
    if (sc) {
      const Scheduler::SegmentHeat h = sc->Heat(SegmentId(i));
      seg["hotness_score"] = Figure(h.score);
      seg["hotness_density"] = Figure(h.density);
      heat = Fixed(h.density, 3);
    }
    segs.push_back(std::move(seg));
    seg_text += "  " + std::to_string(i) + "\t" + raid_format::SchemeName(si.scheme) + "\t" + st +
                "\t" + std::to_string(si.frontier) + "\t" + std::to_string(l.valid_blocks) + "\t" +
                range + "\t" + heat + "\t" + Fixed(si.alpha_usr) + "\t" + Fixed(si.alpha_pty) +
                "\t" + std::to_string(si.physical_bytes) + "\n";
  }
  Json devs = Json::array();
  std::string dev_text;
  for (uint32_t d = 0; d < g.devices; ++d) {
    devs.push_back(Json::object({{"index", d},
                                 {"path", Shown(a.device_path(d))},
                                 {"state", StateName(as.devices[d].state)}}));
    dev_text += "  device " + std::to_string(d) + "  " + StateName(as.devices[d].state) + "  " +
                Shown(a.device_path(d)) + "\n";
  }
  char id[32];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(a.array().array_id()));
  const Json j =
      Json::object({{"superblock", Json::object({{"array_id", id},
                                                 {"devices", g.devices},
                                                 {"chunk_blocks", g.chunk_blocks},
                                                 {"rows_per_slot", g.rows_per_slot},
                                                 {"meta_blocks", g.meta_blocks},
                                                 {"segments", g.segments},
                                                 {"segment_positions", g.segment_positions()}})},
                    {"devices", devs},
                    {"bitmap", Json::object({{"free", as.free_segments},
                                             {"raid5", as.raid5_segments},
                                             {"raid10", as.raid10_segments},
                                             {"open", as.open_segments}})},
                    {"segments", segs}});
  if (json) return {0, j.dump() + "\n"};
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
  NamedVolumes& v = a.volumes();
  auto size_of = [&](const std::string& text) -> Result<uint64_t> {
    ERAID_ASSIGN_OR_RETURN(uint64_t bytes, ParseSize(text));
    if (bytes == 0 || bytes % kBlockSize != 0)
      return Status::InvalidArgument("size must be a positive multiple of 4 KiB");
    return BytesToBlocks(bytes);
  };
  Status s;
  if (op == "list" && words.size() == 2) {
    const std::vector<VolumeReport> list = v.List();
    Json js = Json::array();
    std::string t = "volumes (" + std::to_string(list.size()) + "; " +
                    Mib(BlocksToBytes(v.provisioned_blocks())) + " provisioned of at most " +
                    Mib(BlocksToBytes(v.limit_blocks())) + ", the array holds " +
                    Mib(BlocksToBytes(a.volume().capacity_blocks())) + "):\n";
    for (const VolumeReport& r : list) {
      js.push_back(VolumeJson(r));
      t += VolumeLine(r);
    }
    const Json j = Json::object({{"volumes", js},
                                 {"provisioned_bytes", BlocksToBytes(v.provisioned_blocks())},
                                 {"limit_bytes", BlocksToBytes(v.limit_blocks())},
                                 {"capacity_bytes", BlocksToBytes(a.volume().capacity_blocks())}});
    return {0, json ? j.dump() + "\n" : t};
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
  return {0, json ? Json::object({{"volume", words[2]}, {"done", op}}).dump() + "\n" : what + "\n"};
}

}  // namespace eraid::admin_internal
