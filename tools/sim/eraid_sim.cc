// eraid-sim: replays block traces through eraid's own log engine and placement code
// (log/) on a counting store, and reports write amplification per volume and overall,
// as the SepBIT paper's evaluation does.
//
// The trace is read once, at the speed of memory (log/trace.h), and decoded into batches
// of compact write requests; each replay — one placement scheme with one victim
// selection, or every combination asked for (`--placement all --selection all`) — runs on
// a thread of its own against the same batches, so parsing overlaps replaying and a sweep
// of schemes costs one read of the trace.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "log/log_engine.h"
#include "tools/json.h"
#include "tools/sim/trace.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

struct Options {
  std::string trace, format = "alibaba", volume, placement = "sepbit", selection = "cost-benefit";
  uint32_t segment_blocks = 131072, segments_per_gc = 1, threads = 0;
  double gp = 0.15;
  bool json = false, csv = false, quiet = false;
};

// One write request, decoded: 24 bytes. `volume` indexes Trace::volumes.
struct Request {
  uint64_t lba;
  uint64_t timestamp_us;
  uint32_t blocks;
  uint32_t volume;
};
using Batch = std::vector<Request>;
// Small enough that replays start soon after the reader (the first batch is a bubble
// nothing overlaps), large enough that the queue is touched rarely.
constexpr size_t kBatchRequests = 1 << 12;

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

// ---- reading: the trace's volumes, decoded in batches

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// What a pass over the trace learns besides its requests.
struct TraceInfo {
  std::vector<std::string> volumes;  // by index, in order of first appearance
  std::vector<uint64_t> wss_blocks;  // distinct blocks written, per volume
  std::vector<uint64_t> requests;    // write requests, per volume
  uint64_t lines = 0, written_blocks = 0;
};

// Reads the trace once, handing each batch of write requests (of `only` volume, if set)
// to `sink`. Progress on stderr unless quiet.
Status Decode(const Options& o, TraceFormat format, TraceInfo* info,
              const std::function<void(std::shared_ptr<const Batch>)>& sink) {
  ERAID_ASSIGN_OR_RETURN(auto reader, TraceReader::Open(o.trace, format));
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> index;
  std::vector<bool> selected;
  std::vector<std::vector<uint8_t>> written;  // a byte a block: no bit arithmetic per block
  uint32_t last_vol = UINT32_MAX;
  std::string id;
  auto batch = std::make_shared<Batch>();
  batch->reserve(kBatchRequests);
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  TraceLineView v;
  for (;;) {
    ERAID_ASSIGN_OR_RETURN(bool more, reader->NextView(&v));
    if (!more) break;
    ++info->lines;
    if (!o.quiet && (info->lines & 0xFFFF) == 0 && Seconds(last_progress) > 2) {
      last_progress = std::chrono::steady_clock::now();
      std::fprintf(stderr, "\reraid-sim: %llu lines, %.0f MiB read, %zu volumes, %.2f M blocks/s ",
                   (unsigned long long)info->lines, reader->compressed_bytes_read() / 1048576.0,
                   info->volumes.size(), info->written_blocks / Seconds(start) / 1e6);
    }
    if (!v.write) continue;
    std::string_view key = v.volume;
    if (!v.volume_suffix.empty()) {
      id.assign(v.volume).append("_").append(v.volume_suffix);
      key = id;
    }
    // Traces come in runs of one volume's lines: the last volume's id is checked before
    // the hash (which was a tenth of a one-block trace's decoding).
    if (last_vol == UINT32_MAX || key != info->volumes[last_vol]) {
      auto it = index.find(key);
      if (it == index.end()) {
        it = index.emplace(std::string(key), uint32_t(info->volumes.size())).first;
        info->volumes.emplace_back(key);
        selected.push_back(o.volume.empty() || key == o.volume);
        written.emplace_back();
        info->wss_blocks.push_back(0);
        info->requests.push_back(0);
      }
      last_vol = it->second;
    }
    const uint32_t vol = last_vol;
    if (!selected[vol]) continue;
    std::vector<uint8_t>& w = written[vol];
    if (v.lba + v.blocks > w.size())
      w.resize(std::max<uint64_t>(v.lba + v.blocks, w.size() * 3 / 2));
    uint64_t fresh = 0;
    for (uint32_t i = 0; i < v.blocks; ++i) {
      fresh += w[v.lba + i] ^ 1;
      w[v.lba + i] = 1;
    }
    info->wss_blocks[vol] += fresh;
    ++info->requests[vol];
    info->written_blocks += v.blocks;
    batch->push_back(Request{v.lba, v.timestamp_us, v.blocks, vol});
    if (batch->size() == kBatchRequests) {
      sink(std::move(batch));
      batch = std::make_shared<Batch>();
      batch->reserve(kBatchRequests);
    }
  }
  if (!batch->empty()) sink(std::move(batch));
  if (!o.quiet && info->lines > 0xFFFF) std::fprintf(stderr, "\n");
  return Status::Ok();
}

// FK and the oracle need each write's future: for the i-th user-written block of a volume, how many
// user writes later its LBA is written again. A first pass over the trace, per volume.
Result<std::vector<std::shared_ptr<std::vector<uint64_t>>>> FutureLifespans(const Options& o,
                                                                            TraceFormat f) {
  std::vector<std::shared_ptr<std::vector<uint64_t>>> out;
  std::vector<std::unordered_map<uint64_t, uint64_t>> last;  // volume -> lba -> index
  TraceInfo info;
  Options quiet = o;
  quiet.quiet = true;
  ERAID_RETURN_IF_ERROR(Decode(quiet, f, &info, [&](std::shared_ptr<const Batch> b) {
    for (const Request& r : *b) {
      if (r.volume >= out.size()) {
        out.resize(r.volume + 1);
        last.resize(r.volume + 1);
      }
      auto& vec = out[r.volume];
      if (!vec) vec = std::make_shared<std::vector<uint64_t>>();
      for (uint32_t i = 0; i < r.blocks; ++i) {
        const uint64_t index = vec->size();
        auto [it, fresh] = last[r.volume].try_emplace(r.lba + i, index);
        if (!fresh) {
          (*vec)[it->second] = index - it->second;
          it->second = index;
        }
        vec->push_back(UINT64_MAX);
      }
    }
  }));
  return out;
}

// ---- replaying: one scheme × selection on a thread of its own

// Batches in, in order; bounded, so a slow replay holds the reader back, not memory.
class BatchQueue {
 public:
  void Push(std::shared_ptr<const Batch> b) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return q_.size() < kDepth; });
    q_.push_back(std::move(b));
    cv_.notify_all();
  }
  // nullptr at the end.
  std::shared_ptr<const Batch> Pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !q_.empty(); });
    auto b = std::move(q_.front());
    q_.pop_front();
    cv_.notify_all();
    return b;
  }

 private:
  static constexpr size_t kDepth = 128;  // batches: ~12 MiB at most
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const Batch>> q_;
};

struct VolumeRun {
  std::unique_ptr<Placement> placement;
  std::unique_ptr<CountingStore> store;
  std::unique_ptr<LogEngine> engine;
};

struct Replay {
  static constexpr size_t kPrefetchAhead = 4, kBatchAhead = 32;
  std::string placement, selection;
  EngineOptions options;
  std::vector<VolumeRun> volumes;  // by volume index; engine null if never written
  BatchQueue queue;
  Status status;
  double seconds = 0;

  void Run(const std::vector<std::shared_ptr<std::vector<uint64_t>>>& futures) {
    const auto start = std::chrono::steady_clock::now();
    for (std::shared_ptr<const Batch> b; (b = queue.Pop());) {
      if (!status.ok()) continue;  // keep draining, so the reader is never stuck
      const Batch& batch = *b;
      for (size_t i = 0; i < batch.size(); ++i) {
        const Request& r = batch[i];
        // The map entries and placement state of a request a few ahead: its cache misses
        // overlap this one's work (they were most of a replay's time).
        // The batch itself was written on the reader's core: its lines are loaded well
        // ahead, or each one stalls the request a few ahead that first touches it.
        if (i + kBatchAhead < batch.size()) __builtin_prefetch(&batch[i + kBatchAhead]);
        if (i + kPrefetchAhead < batch.size()) {
          const Request& next = batch[i + kPrefetchAhead];
          if (next.volume < volumes.size() && volumes[next.volume].engine) {
            volumes[next.volume].engine->Prefetch(next.lba, next.blocks);
          }
        }
        if (r.volume >= volumes.size()) volumes.resize(r.volume + 1);
        VolumeRun& v = volumes[r.volume];
        if (!v.engine) {
          auto future = r.volume < futures.size() ? futures[r.volume] : nullptr;
          v.placement = std::move(MakePlacement(placement, future)).value();
          v.store = std::make_unique<CountingStore>(options.segment_blocks);
          v.engine = std::make_unique<LogEngine>(options, *v.placement, *v.store);
        }
        status = v.engine->Write(r.lba, r.blocks, r.timestamp_us);
        if (!status.ok()) break;
      }
    }
    seconds = Seconds(start);
  }
};

// ---- reporting

struct Totals {
  uint64_t user = 0, gc = 0;
  std::vector<float> gps;
  double wa() const { return user ? double(user + gc) / double(user) : 1.0; }
};

Totals Sum(const Replay& r) {
  Totals t;
  for (const VolumeRun& v : r.volumes) {
    if (!v.engine) continue;
    t.user += v.engine->stats().user_blocks;
    t.gc += v.engine->stats().gc_blocks;
    t.gps.insert(t.gps.end(), v.engine->stats().victim_gps.begin(),
                 v.engine->stats().victim_gps.end());
  }
  return t;
}

std::string ReplayJson(const Options& o, const Replay& r, const TraceInfo& info, double secs) {
  const Totals t = Sum(r);
  Json volumes = Json::array();
  for (size_t i = 0; i < r.volumes.size(); ++i) {
    const VolumeRun& v = r.volumes[i];
    if (!v.engine) continue;
    const EngineStats& st = v.engine->stats();
    volumes.push_back(
        Json::object({{"volume", info.volumes[i]},
                      {"user_blocks", st.user_blocks},
                      {"gc_blocks", st.gc_blocks},
                      {"wa", Figure(st.wa())},
                      {"wss_blocks", info.wss_blocks[i]},
                      {"median_victim_gp", Figure(Median(st.victim_gps))},
                      {"fifo_peak_unique_lbas", v.placement->stats().fifo_unique_lbas_peak},
                      {"user_per_class", st.user_per_class},
                      {"gc_per_class", st.gc_per_class}}));
  }
  const Json j = Json::object(
      {{"trace", o.trace},
       {"placement", r.placement},
       {"selection", r.selection},
       {"segment_blocks", o.segment_blocks},
       {"gp", Figure(o.gp)},
       {"volumes", volumes},
       {"overall", Json::object({{"user_blocks", t.user},
                                 {"gc_blocks", t.gc},
                                 {"wa", Figure(t.wa())},
                                 {"median_victim_gp", Figure(Median(t.gps))},
                                 {"seconds", Figure(secs)},
                                 {"replay_seconds", Figure(r.seconds)},
                                 {"blocks_per_second",
                                  Figure(secs > 0 ? double(info.written_blocks) / secs : 0)},
                                 {"peak_rss_kib", PeakRssKiB()}})}});
  return j.dump();
}

void PrintVolumes(const Replay& r, const TraceInfo& info) {
  std::printf("%-14s %12s %12s %8s %10s %10s %12s  %s\n", "volume", "user_blocks", "gc_blocks",
              "WA", "victim_GP", "WSS_MiB", "FIFO_peak", "user/gc writes per class");
  for (size_t i = 0; i < r.volumes.size(); ++i) {
    const VolumeRun& v = r.volumes[i];
    if (!v.engine) continue;
    const EngineStats& st = v.engine->stats();
    std::string classes;
    for (size_t c = 0; c < st.user_per_class.size(); ++c) {
      if (c) classes += ' ';  // (not `(c ? " " : "") + ...`: GCC 12's -Wrestrict at -O3)
      classes += std::to_string(st.user_per_class[c]) + "/" + std::to_string(st.gc_per_class[c]);
    }
    std::printf("%-14s %12llu %12llu %8.4f %10.3f %10.1f %12llu  %s\n", info.volumes[i].c_str(),
                (unsigned long long)st.user_blocks, (unsigned long long)st.gc_blocks, st.wa(),
                Median(st.victim_gps), info.wss_blocks[i] / 256.0,
                (unsigned long long)v.placement->stats().fifo_unique_lbas_peak, classes.c_str());
  }
  const Totals t = Sum(r);
  std::printf("%-14s %12llu %12llu %8.4f %10.3f\n", "overall", (unsigned long long)t.user,
              (unsigned long long)t.gc, t.wa(), Median(t.gps));
}

void Report(const Options& o, const std::vector<std::unique_ptr<Replay>>& runs,
            const TraceInfo& info, double secs) {
  if (o.json) {
    for (const auto& r : runs) std::cout << ReplayJson(o, *r, info, secs) << "\n";
    return;
  }
  if (o.csv) {
    std::printf(
        "placement,selection,segment_blocks,gp,user_blocks,gc_blocks,wa,median_victim_gp,replay_"
        "seconds\n");
    for (const auto& r : runs) {
      const Totals t = Sum(*r);
      std::printf("%s,%s,%u,%g,%llu,%llu,%.6f,%.4f,%.3f\n", r->placement.c_str(),
                  r->selection.c_str(), o.segment_blocks, o.gp, (unsigned long long)t.user,
                  (unsigned long long)t.gc, t.wa(), Median(t.gps), r->seconds);
    }
    return;
  }
  if (runs.size() == 1) {
    PrintVolumes(*runs[0], info);
  } else {
    std::printf("%-8s %-13s %12s %12s %8s %10s %9s\n", "scheme", "selection", "user_blocks",
                "gc_blocks", "WA", "victim_GP", "replay_s");
    for (const auto& r : runs) {
      const Totals t = Sum(*r);
      std::printf("%-8s %-13s %12llu %12llu %8.4f %10.3f %9.2f\n", r->placement.c_str(),
                  r->selection.c_str(), (unsigned long long)t.user, (unsigned long long)t.gc,
                  t.wa(), Median(t.gps), r->seconds);
    }
  }
  std::printf(
      "replayed %llu blocks%s in %.2f s (%.2f M blocks/s per replay), peak memory %.1f MiB\n",
      (unsigned long long)info.written_blocks,
      runs.size() == 1 ? "" : (" × " + std::to_string(runs.size()) + " replays").c_str(), secs,
      secs > 0 ? info.written_blocks / secs / 1e6 : 0, PeakRssKiB() / 1024.0);
}

// ---- the command line

std::vector<std::string> List(const std::string& text, const std::vector<std::string>& all) {
  if (text == "all") return all;
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

Result<std::vector<std::unique_ptr<Replay>>> MakeReplays(const Options& o) {
  const auto placements = List(o.placement, PlacementNames());
  const auto selections = List(o.selection, {"greedy", "cost-benefit"});
  if (placements.empty() || selections.empty())
    return Status::InvalidArgument("no placement or no selection");
  EngineOptions eo;
  eo.segment_blocks = o.segment_blocks;
  eo.gp_threshold = o.gp;
  eo.segments_per_gc = o.segments_per_gc;
  eo.initial_open_segments = 6;  // as the reference simulator: same segment ids, same ties
  std::vector<std::unique_ptr<Replay>> runs;
  for (const std::string& p : placements) {
    ERAID_RETURN_IF_ERROR(MakePlacement(p, std::make_shared<std::vector<uint64_t>>()).status());
    for (const std::string& s : selections) {
      ERAID_ASSIGN_OR_RETURN(eo.selection, ParseSelection(s));
      auto r = std::make_unique<Replay>();
      r->placement = p;
      r->selection = s;
      r->options = eo;
      runs.push_back(std::move(r));
    }
  }
  return runs;
}

int Fail(const Status& s, int rc) {
  std::cerr << "eraid-sim: " << s.message() << "\n";
  return rc;
}

int Run(const Options& o) {
  auto format = ParseTraceFormat(o.format);
  if (!format.ok()) return Fail(format.status(), 2);
  if (o.segment_blocks == 0 || o.segment_blocks >= (1u << 24) || !(o.gp > 0 && o.gp < 1) ||
      o.segments_per_gc == 0) {
    return Fail(Status::InvalidArgument(
                    "need 0 < --segment-blocks < 2^24, 0 < --gp < 1, --segments-per-gc > 0"),
                2);
  }
  if (o.json && o.csv) return Fail(Status::InvalidArgument("--json or --csv, not both"), 2);
  auto runs = MakeReplays(o);
  if (!runs.ok()) return Fail(runs.status(), 2);
  std::vector<std::shared_ptr<std::vector<uint64_t>>> futures;
  if (std::any_of(runs->begin(), runs->end(),
                  [](const auto& r) { return r->placement == "fk" || r->placement == "oracle"; })) {
    auto f = FutureLifespans(o, *format);
    if (!f.ok()) return Fail(f.status(), 1);
    futures = std::move(f).value();
  }
  const auto start = std::chrono::steady_clock::now();
  // Replays run on threads of their own (the reader is one more); with more replays than
  // --threads, they go in waves of that many, each wave reading the trace again.
  const size_t width = o.threads ? o.threads : runs->size();
  TraceInfo info;
  Options again = o;  // later waves read quietly
  again.quiet = true;
  for (size_t first = 0; first < runs->size(); first += width) {
    const size_t last = std::min(runs->size(), first + width);
    std::vector<std::thread> threads;
    for (size_t i = first; i < last; ++i)
      threads.emplace_back([&, i] { (*runs)[i]->Run(futures); });
    info = TraceInfo();
    Status s = Decode(first == 0 ? o : again, *format, &info, [&](std::shared_ptr<const Batch> b) {
      for (size_t i = first; i < last; ++i) (*runs)[i]->queue.Push(b);
    });
    for (size_t i = first; i < last; ++i) (*runs)[i]->queue.Push(nullptr);
    for (auto& t : threads) t.join();
    if (!s.ok()) return Fail(s, 1);
    for (size_t i = first; i < last; ++i) {
      if (!(*runs)[i]->status.ok()) return Fail((*runs)[i]->status, 1);
    }
  }
  const double secs = Seconds(start);
  if (info.written_blocks == 0) {
    std::cerr << "eraid-sim: no write requests"
              << (o.volume.empty() ? "" : " for volume " + o.volume) << " in " << o.trace << "\n";
    return 1;
  }
  Report(o, *runs, info, secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string names;
  for (const auto& n : PlacementNames()) names += (names.empty() ? "" : "|") + n;
  const std::string placement_help = names + ", a comma-separated list, or all";
  po::options_description desc(
      "eraid-sim --trace FILE [options]\n"
      "Replays the writes of a block trace through eraid's log engine and reports write\n"
      "amplification (WA = (user + GC-rewritten blocks) / user blocks) per volume. Given several\n"
      "placements and/or selections, it reads the trace once and replays each combination on a\n"
      "thread of its own: one row (or JSON line) per combination.\n\noptions");
  desc.add_options()("help,h", "this text")("trace", po::value(&o.trace)->required(),
                                            "trace file (plain, .gz or .zst)")(
      "format", po::value(&o.format)->default_value(o.format), "alibaba | tencent | msr")(
      "volume", po::value(&o.volume),
      "replay only this volume (default: every volume, independently)")(
      "placement", po::value(&o.placement)->default_value(o.placement), placement_help.c_str())(
      "selection", po::value(&o.selection)->default_value(o.selection),
      "greedy | cost-benefit, both comma-separated, or all")(
      "segment-blocks", po::value(&o.segment_blocks)->default_value(o.segment_blocks),
      "segment size in 4 KiB blocks")("gp", po::value(&o.gp)->default_value(o.gp),
                                      "garbage proportion that triggers GC")(
      "segments-per-gc", po::value(&o.segments_per_gc)->default_value(o.segments_per_gc),
      "segments collected per GC")("threads", po::value(&o.threads)->default_value(o.threads),
                                   "replays at once (0 = all of them; more read the trace again)")(
      "json", po::bool_switch(&o.json), "print one JSON object per replay, one per line")(
      "csv", po::bool_switch(&o.csv), "print one CSV row per replay (overall figures)")(
      "quiet", po::bool_switch(&o.quiet), "no progress on stderr");
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
