// eraid-tracegen: synthetic block traces in Alibaba format, for eraid-sim and the
// benchmarks. Deterministic for a seed. Write patterns (--pattern):
//
//   zipf      writes over the working set with Zipf(alpha) popularity (alpha 0 = uniform),
//             ranks scattered over the LBAs by a fixed permutation
//   mixed     zipf, interleaved with hot sequential bursts: --seq-percent of the written
//             blocks go, in runs of up to --burst-blocks, to a region of --seq-blocks at the
//             end of the working set rewritten front to back over and over (a log file, a
//             journal); the zipf part covers the rest
//   shifting  zipf whose hot set moves: every --shift-every written blocks, the ranks'
//             LBAs rotate by --shift-blocks
//   bursty    zipf, with --seq-percent of the written blocks in sequential rewrites of a
//             random extent of --burst-blocks (a file rewritten whole)
//   abrupt    zipf whose popularity is reshuffled (a new permutation of ranks over LBAs)
//             every --shift-every written blocks
//
// Request sizes are 1..--max-request-blocks except in sequential runs (whole --burst-blocks
// runs cut into requests of --max-request-blocks); timestamps increase 1..200 µs a request.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace po = boost::program_options;

namespace {

struct Options {
  std::string pattern = "zipf";
  double alpha = 1.0;
  uint64_t wss = 1 << 18, writes = 1 << 22, seed = 1;
  uint32_t volumes = 1, max_blocks = 8, read_pct = 10;
  uint32_t seq_pct = 30;
  uint64_t seq_blocks = 0, burst_blocks = 1024, shift_every = 0, shift_blocks = 0;
};

// One volume's generator state.
struct Volume {
  uint64_t left;
  uint64_t seq_cursor = 0;   // mixed: next block of the sequential region
  uint64_t run_left = 0;     // blocks left of the sequential run in progress
  uint64_t run_lba = 0;      // its next block
  uint64_t since_shift = 0;  // written blocks since the last shift
  uint64_t rotation = 0;     // shifting: how far the ranks' LBAs have rotated
};

}  // namespace

// The command line into `o`, checked, with its defaults filled in; -1 to go on, else the
// exit code.
int ParseArgs(int argc, char** argv, Options* out) {
  Options& o = *out;
  po::options_description desc("eraid-tracegen [options] > trace.csv\noptions");
  desc.add_options()("help,h", "this text")("pattern",
                                            po::value(&o.pattern)->default_value(o.pattern),
                                            "zipf | mixed | shifting | bursty | abrupt")(
      "alpha", po::value(&o.alpha)->default_value(o.alpha), "Zipf skew (0 = uniform)")(
      "wss-blocks", po::value(&o.wss)->default_value(o.wss),
      "write working set per volume, 4 KiB blocks")(
      "writes", po::value(&o.writes)->default_value(o.writes), "written blocks per volume")(
      "volumes", po::value(&o.volumes)->default_value(o.volumes), "volumes, interleaved in time")(
      "max-request-blocks", po::value(&o.max_blocks)->default_value(o.max_blocks),
      "request sizes 1..N blocks")("read-percent",
                                   po::value(&o.read_pct)->default_value(o.read_pct),
                                   "extra read requests (replay skips them)")(
      "seq-percent", po::value(&o.seq_pct)->default_value(o.seq_pct),
      "mixed, bursty: % of written blocks in sequential runs")(
      "seq-blocks", po::value(&o.seq_blocks)->default_value(o.seq_blocks),
      "mixed: the sequential region (default wss/8)")(
      "burst-blocks", po::value(&o.burst_blocks)->default_value(o.burst_blocks),
      "mixed, bursty: blocks per sequential run")(
      "shift-every", po::value(&o.shift_every)->default_value(o.shift_every),
      "shifting, abrupt: written blocks between changes (default writes/8)")(
      "shift-blocks", po::value(&o.shift_blocks)->default_value(o.shift_blocks),
      "shifting: how far the hot set moves (default wss/16)")(
      "seed", po::value(&o.seed)->default_value(o.seed), "random seed");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-tracegen: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  const std::vector<std::string> patterns = {"zipf", "mixed", "shifting", "bursty", "abrupt"};
  if (std::find(patterns.begin(), patterns.end(), o.pattern) == patterns.end()) {
    std::cerr << "eraid-tracegen: unknown --pattern '" << o.pattern
              << "' (zipf, mixed, shifting, bursty, abrupt)\n";
    return 2;
  }
  if (o.wss == 0 || o.wss > (1ull << 32) || o.volumes == 0 || o.max_blocks == 0 || o.alpha < 0 ||
      o.read_pct > 90 || o.seq_pct > 100 || o.burst_blocks == 0) {
    std::cerr << "eraid-tracegen: need 0 < wss-blocks <= 2^32, volumes > 0, max-request-blocks > "
                 "0, alpha >= 0,"
                 " read-percent <= 90, seq-percent <= 100, burst-blocks > 0\n";
    return 2;
  }
  if (o.seq_blocks == 0) o.seq_blocks = std::max<uint64_t>(1, o.wss / 8);
  if (o.shift_every == 0) o.shift_every = std::max<uint64_t>(1, o.writes / 8);
  if (o.shift_blocks == 0) o.shift_blocks = std::max<uint64_t>(1, o.wss / 16);
  const bool mixed = o.pattern == "mixed";
  if (mixed && o.seq_blocks >= o.wss) {
    std::cerr << "eraid-tracegen: --seq-blocks must be below --wss-blocks\n";
    return 2;
  }
  o.burst_blocks = std::min(o.burst_blocks, mixed ? o.seq_blocks : o.wss);
  return -1;
}

// Writes the trace to stdout.
void Generate(const Options& o) {
  const bool mixed = o.pattern == "mixed", bursty = o.pattern == "bursty";
  // The zipf part's LBAs: the whole working set, or (mixed) all but the sequential region.
  const uint64_t zipf_span = mixed ? o.wss - o.seq_blocks : o.wss;
  std::mt19937_64 rng(o.seed);
  // Zipf CDF over ranks; ranks are scattered over the LBA space by a permutation.
  std::vector<double> cdf(zipf_span);
  double sum = 0;
  for (uint64_t i = 0; i < zipf_span; ++i) cdf[i] = (sum += 1.0 / std::pow(double(i + 1), o.alpha));
  std::vector<uint32_t> perm(zipf_span);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> u(0, sum), coin(0, 1);
  // A request starts a sequential run with the probability that makes seq_pct of the
  // written blocks sequential: runs are burst_blocks long, other requests (max + 1) / 2.
  const double f = o.seq_pct / 100.0, m = (o.max_blocks + 1) / 2.0;
  const double run_start = f >= 1 ? 1.0 : f * m / (double(o.burst_blocks) * (1 - f) + f * m);
  std::vector<Volume> vols(o.volumes, Volume{o.writes});
  uint64_t t = 1'600'000'000'000'000ull;
  std::vector<char> line(256);
  std::string out;
  out.reserve(1 << 20);
  while (true) {
    uint32_t v = static_cast<uint32_t>(rng() % o.volumes);
    if (vols[v].left == 0) {
      v = static_cast<uint32_t>(
          std::find_if(vols.begin(), vols.end(), [](const Volume& x) { return x.left > 0; }) -
          vols.begin());
      if (v == o.volumes) break;
    }
    Volume& vol = vols[v];
    t += 1 + rng() % 200;
    uint64_t lba, n;
    if (vol.run_left > 0) {  // a sequential run in progress
      lba = vol.run_lba;
      n = std::min<uint64_t>(vol.run_left, o.max_blocks);
    } else if ((mixed || bursty) && coin(rng) < run_start) {
      vol.run_left = o.burst_blocks;
      if (mixed) {
        vol.run_lba = zipf_span + vol.seq_cursor;
        vol.seq_cursor = (vol.seq_cursor + o.burst_blocks) % o.seq_blocks;
        vol.run_left = std::min<uint64_t>(o.burst_blocks, o.wss - vol.run_lba);
      } else {
        vol.run_lba = rng() % (o.wss - o.burst_blocks + 1);
      }
      lba = vol.run_lba;
      n = std::min<uint64_t>(vol.run_left, o.max_blocks);
    } else {
      const uint64_t rank =
          static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      lba = (perm[std::min<uint64_t>(rank, zipf_span - 1)] + vol.rotation) % zipf_span;
      n = 1 + rng() % o.max_blocks;
      n = std::min<uint64_t>(n, zipf_span - lba);
    }
    n = std::min(n, vol.left);
    const bool read = vol.run_left == 0 && rng() % 100 < o.read_pct;  // runs are writes
    int len = std::snprintf(line.data(), line.size(), "%u,%c,%llu,%llu,%llu\n", v, read ? 'R' : 'W',
                            (unsigned long long)(lba * 4096), (unsigned long long)(n * 4096),
                            (unsigned long long)t);
    out.append(line.data(), static_cast<size_t>(len));
    if (!read) {
      vol.left -= n;
      if (vol.run_left > 0) {
        vol.run_left -= n;
        vol.run_lba += n;
      }
      vol.since_shift += n;
      if (vol.since_shift >= o.shift_every) {
        vol.since_shift = 0;
        if (o.pattern == "shifting") vol.rotation = (vol.rotation + o.shift_blocks) % zipf_span;
        if (o.pattern == "abrupt") std::shuffle(perm.begin(), perm.end(), rng);
      }
    }
    if (out.size() > (1 << 20) - 256) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int main(int argc, char** argv) {
  Options o;
  if (int rc = ParseArgs(argc, argv, &o); rc >= 0) return rc;
  Generate(o);
  return 0;
}
