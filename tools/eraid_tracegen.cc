// eraid-tracegen: synthetic block traces in Alibaba format, for eraid-sim and the
// benchmarks: writes over a working set with Zipf(alpha) popularity (alpha 0 = uniform),
// request sizes of 1..max blocks, increasing microsecond timestamps, several volumes.
// Deterministic for a seed.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

namespace po = boost::program_options;

int main(int argc, char** argv) {
  double alpha = 1.0;
  uint64_t wss = 1 << 18, writes = 1 << 22, seed = 1;
  uint32_t volumes = 1, max_blocks = 8, read_pct = 10;
  po::options_description desc("eraid-tracegen [options] > trace.csv\noptions");
  desc.add_options()("help,h", "this text")
      ("alpha", po::value(&alpha)->default_value(alpha), "Zipf skew (0 = uniform)")
      ("wss-blocks", po::value(&wss)->default_value(wss), "write working set per volume, 4 KiB blocks")
      ("writes", po::value(&writes)->default_value(writes), "written blocks per volume")
      ("volumes", po::value(&volumes)->default_value(volumes), "volumes, interleaved in time")
      ("max-request-blocks", po::value(&max_blocks)->default_value(max_blocks), "request sizes 1..N blocks")
      ("read-percent", po::value(&read_pct)->default_value(read_pct), "extra read requests (replay skips them)")
      ("seed", po::value(&seed)->default_value(seed), "random seed");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid-tracegen: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (wss == 0 || wss > (1ull << 32) || volumes == 0 || max_blocks == 0 || alpha < 0 || read_pct > 90) {
    std::cerr << "eraid-tracegen: need 0 < wss-blocks <= 2^32, volumes > 0, max-request-blocks > 0, alpha >= 0\n";
    return 2;
  }
  std::mt19937_64 rng(seed);
  // Zipf CDF over ranks; ranks are scattered over the LBA space by a fixed permutation.
  std::vector<double> cdf(wss);
  double sum = 0;
  for (uint64_t i = 0; i < wss; ++i) cdf[i] = (sum += 1.0 / std::pow(double(i + 1), alpha));
  std::vector<uint32_t> perm(wss);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<uint64_t> left(volumes, writes);
  uint64_t t = 1'600'000'000'000'000ull;
  std::vector<char> line(256);
  std::string out;
  out.reserve(1 << 20);
  while (true) {
    uint32_t v = static_cast<uint32_t>(rng() % volumes);
    if (left[v] == 0) {
      v = static_cast<uint32_t>(std::find_if(left.begin(), left.end(), [](uint64_t l) { return l > 0; }) - left.begin());
      if (v == volumes) break;
    }
    t += 1 + rng() % 200;
    const uint64_t rank = static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    const uint64_t lba = perm[std::min<uint64_t>(rank, wss - 1)];
    uint64_t n = 1 + rng() % max_blocks;
    n = std::min({n, left[v], wss - lba});
    const bool read = rng() % 100 < read_pct;
    int len = std::snprintf(line.data(), line.size(), "%u,%c,%llu,%llu,%llu\n", v, read ? 'R' : 'W',
                            (unsigned long long)(lba * 4096), (unsigned long long)(n * 4096), (unsigned long long)t);
    out.append(line.data(), static_cast<size_t>(len));
    if (!read) left[v] -= n;
    if (out.size() > (1 << 20) - 256) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
