// eraid-sim: replays block traces through eraid's own log engine and placement code
// (log/) on a counting store, and reports write amplification per volume and overall,
// as the SepBIT paper's evaluation does.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "log/log_engine.h"
#include "log/trace.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

struct Options {
  std::string trace, format = "alibaba", volume, placement = "sepbit", selection = "cost-benefit";
  uint32_t segment_blocks = 131072, segments_per_gc = 1;
  double gp = 0.15;
  bool json = false, quiet = false;
};

struct Volume {
  std::unique_ptr<Placement> placement;
  std::unique_ptr<CountingStore> store;
  std::unique_ptr<LogEngine> engine;
  std::vector<bool> written;  // write working set
  uint64_t wss_blocks = 0, requests = 0;
};

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

uint64_t PeakRssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

double Median(std::vector<float> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// FK needs each write's future: for the i-th user-written block of a volume, how many
// user writes later its LBA is written again. One pass over the trace, per volume.
Result<std::map<std::string, std::shared_ptr<std::vector<uint64_t>>>> FutureLifespans(const Options& o, TraceFormat f) {
  ERAID_ASSIGN_OR_RETURN(auto reader, TraceReader::Open(o.trace, f));
  std::map<std::string, std::shared_ptr<std::vector<uint64_t>>> out;
  std::unordered_map<std::string, std::unordered_map<uint64_t, uint64_t>> last;  // volume -> lba -> index
  TraceRecord r;
  for (;;) {
    ERAID_ASSIGN_OR_RETURN(bool more, reader->Next(&r));
    if (!more) break;
    if (!r.write || (!o.volume.empty() && r.volume != o.volume)) continue;
    auto& vec = out[r.volume];
    if (!vec) vec = std::make_shared<std::vector<uint64_t>>();
    auto& seen = last[r.volume];
    for (uint32_t i = 0; i < r.blocks; ++i) {
      const uint64_t index = vec->size();
      auto [it, fresh] = seen.try_emplace(r.lba + i, index);
      if (!fresh) {
        (*vec)[it->second] = index - it->second;
        it->second = index;
      }
      vec->push_back(UINT64_MAX);
    }
  }
  return out;
}

int Run(const Options& o) {
  auto format = ParseTraceFormat(o.format);
  auto selection = ParseSelection(o.selection);
  for (const Status& s : {format.status(), selection.status()}) {
    if (!s.ok()) {
      std::cerr << "eraid-sim: " << s.message() << "\n";
      return 2;
    }
  }
  if (o.segment_blocks == 0 || o.segment_blocks >= (1u << 24) || !(o.gp > 0 && o.gp < 1) || o.segments_per_gc == 0) {
    std::cerr << "eraid-sim: need 0 < --segment-blocks < 2^24, 0 < --gp < 1, --segments-per-gc > 0\n";
    return 2;
  }
  if (auto p = MakePlacement(o.placement, std::make_shared<std::vector<uint64_t>>()); !p.ok()) {
    std::cerr << "eraid-sim: " << p.status().message() << "\n";
    return 2;
  }
  EngineOptions eo;
  eo.segment_blocks = o.segment_blocks;
  eo.gp_threshold = o.gp;
  eo.selection = *selection;
  eo.segments_per_gc = o.segments_per_gc;
  eo.initial_open_segments = 6;  // as the reference simulator: same segment ids, same ties

  std::map<std::string, std::shared_ptr<std::vector<uint64_t>>> futures;
  if (o.placement == "fk") {
    auto f = FutureLifespans(o, *format);
    if (!f.ok()) {
      std::cerr << "eraid-sim: " << f.status().message() << "\n";
      return 1;
    }
    futures = std::move(f).value();
  }
  auto reader = TraceReader::Open(o.trace, *format);
  if (!reader.ok()) {
    std::cerr << "eraid-sim: " << reader.status().message() << "\n";
    return 1;
  }
  std::map<std::string, Volume> volumes;
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  TraceRecord r;
  uint64_t records = 0, writes = 0;
  for (;;) {
    auto more = (*reader)->Next(&r);
    if (!more.ok()) {
      std::cerr << "eraid-sim: " << more.status().message() << "\n";
      return 1;
    }
    if (!*more) break;
    ++records;
    if (!o.quiet && (records & 0xFFFF) == 0 && Seconds(last_progress) > 2) {
      last_progress = std::chrono::steady_clock::now();
      std::fprintf(stderr, "\reraid-sim: %llu lines, %.0f MiB read, %llu volumes, %.2f M blocks/s ",
                   (unsigned long long)records, (*reader)->compressed_bytes_read() / 1048576.0,
                   (unsigned long long)volumes.size(), writes / Seconds(start) / 1e6);
    }
    if (!r.write || (!o.volume.empty() && r.volume != o.volume)) continue;
    Volume& v = volumes[r.volume];
    if (!v.engine) {
      v.placement = std::move(MakePlacement(o.placement, futures[r.volume])).value();
      v.store = std::make_unique<CountingStore>(o.segment_blocks);
      v.engine = std::make_unique<LogEngine>(eo, *v.placement, *v.store);
    }
    if (r.lba + r.blocks > v.written.size()) v.written.resize(std::max<uint64_t>(r.lba + r.blocks, v.written.size() * 3 / 2));
    for (uint32_t i = 0; i < r.blocks; ++i) {
      if (!v.written[r.lba + i]) {
        v.written[r.lba + i] = true;
        ++v.wss_blocks;
      }
    }
    ++v.requests;
    writes += r.blocks;
    Status s = v.engine->Write(r.lba, r.blocks, r.timestamp_us);
    if (!s.ok()) {
      std::cerr << "eraid-sim: volume " << r.volume << ": " << s.ToString() << "\n";
      return 1;
    }
  }
  const double secs = Seconds(start);
  if (!o.quiet && records > 0xFFFF) std::fprintf(stderr, "\n");
  if (volumes.empty()) {
    std::cerr << "eraid-sim: no write requests" << (o.volume.empty() ? "" : " for volume " + o.volume) << " in " << o.trace << "\n";
    return 1;
  }

  uint64_t user = 0, gc = 0;
  std::vector<float> all_gps;
  for (auto& [id, v] : volumes) {
    user += v.engine->stats().user_blocks;
    gc += v.engine->stats().gc_blocks;
    all_gps.insert(all_gps.end(), v.engine->stats().victim_gps.begin(), v.engine->stats().victim_gps.end());
  }
  const double wa = user ? double(user + gc) / double(user) : 1.0;
  if (o.json) {
    std::ostringstream js;
    js << "{\"trace\":\"" << o.trace << "\",\"placement\":\"" << o.placement << "\",\"selection\":\"" << o.selection
       << "\",\"segment_blocks\":" << o.segment_blocks << ",\"gp\":" << o.gp << ",\"volumes\":[";
    bool first = true;
    for (auto& [id, v] : volumes) {
      const EngineStats& st = v.engine->stats();
      const PlacementStats ps = v.placement->stats();
      js << (first ? "" : ",") << "{\"volume\":\"" << id << "\",\"user_blocks\":" << st.user_blocks
         << ",\"gc_blocks\":" << st.gc_blocks << ",\"wa\":" << st.wa() << ",\"wss_blocks\":" << v.wss_blocks
         << ",\"median_victim_gp\":" << Median(st.victim_gps) << ",\"fifo_peak_unique_lbas\":" << ps.fifo_unique_lbas_peak
         << ",\"user_per_class\":[";
      for (size_t c = 0; c < st.user_per_class.size(); ++c) js << (c ? "," : "") << st.user_per_class[c];
      js << "],\"gc_per_class\":[";
      for (size_t c = 0; c < st.gc_per_class.size(); ++c) js << (c ? "," : "") << st.gc_per_class[c];
      js << "]}";
      first = false;
    }
    js << "],\"overall\":{\"user_blocks\":" << user << ",\"gc_blocks\":" << gc << ",\"wa\":" << wa
       << ",\"median_victim_gp\":" << Median(all_gps) << ",\"seconds\":" << secs
       << ",\"blocks_per_second\":" << (secs > 0 ? double(writes) / secs : 0) << ",\"peak_rss_kib\":" << PeakRssKiB() << "}}";
    std::cout << js.str() << "\n";
    return 0;
  }
  std::printf("%-14s %12s %12s %8s %10s %10s %12s  %s\n", "volume", "user_blocks", "gc_blocks", "WA", "victim_GP",
              "WSS_MiB", "FIFO_peak", "user/gc writes per class");
  for (auto& [id, v] : volumes) {
    const EngineStats& st = v.engine->stats();
    std::string classes;
    for (size_t c = 0; c < st.user_per_class.size(); ++c) {
      classes += (c ? " " : "") + std::to_string(st.user_per_class[c]) + "/" + std::to_string(st.gc_per_class[c]);
    }
    std::printf("%-14s %12llu %12llu %8.4f %10.3f %10.1f %12llu  %s\n", id.c_str(), (unsigned long long)st.user_blocks,
                (unsigned long long)st.gc_blocks, st.wa(), Median(st.victim_gps), v.wss_blocks / 256.0,
                (unsigned long long)v.placement->stats().fifo_unique_lbas_peak, classes.c_str());
  }
  std::printf("%-14s %12llu %12llu %8.4f %10.3f\n", "overall", (unsigned long long)user, (unsigned long long)gc, wa,
              Median(all_gps));
  std::printf("replayed %llu blocks in %.2f s (%.2f M blocks/s), peak memory %.1f MiB\n", (unsigned long long)writes,
              secs, secs > 0 ? writes / secs / 1e6 : 0, PeakRssKiB() / 1024.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string names;
  for (const auto& n : PlacementNames()) names += (names.empty() ? "" : "|") + n;
  po::options_description desc(
      "eraid-sim --trace FILE [options]\n"
      "Replays the writes of a block trace through eraid's log engine and reports write\n"
      "amplification (WA = (user + GC-rewritten blocks) / user blocks) per volume.\n\noptions");
  desc.add_options()("help,h", "this text")
      ("trace", po::value(&o.trace)->required(), "trace file (plain, .gz or .zst)")
      ("format", po::value(&o.format)->default_value(o.format), "alibaba | tencent | msr")
      ("volume", po::value(&o.volume), "replay only this volume (default: every volume, independently)")
      ("placement", po::value(&o.placement)->default_value(o.placement), names.c_str())
      ("selection", po::value(&o.selection)->default_value(o.selection), "greedy | cost-benefit")
      ("segment-blocks", po::value(&o.segment_blocks)->default_value(o.segment_blocks), "segment size in 4 KiB blocks")
      ("gp", po::value(&o.gp)->default_value(o.gp), "garbage proportion that triggers GC")
      ("segments-per-gc", po::value(&o.segments_per_gc)->default_value(o.segments_per_gc), "segments collected per GC")
      ("json", po::bool_switch(&o.json), "print one JSON object")
      ("quiet", po::bool_switch(&o.quiet), "no progress on stderr");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-sim: " << e.what() << " (see --help)\n";
    return 2;
  }
  return Run(o);
}
