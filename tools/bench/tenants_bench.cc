// eraid-tenants-bench: two tenants (volumes) of different hotness in one log — are
// placement classes better shared (one SepBIT over both, what log/named_volumes.h does) or
// per volume (a SepBIT of its own for each tenant, twice the classes, one segment pool)?
// Replays synthetic writes through the log engine on a CountingStore with the live
// volume's free-space GC trigger, and prints the WA of each way, per tenant and in all.
//   eraid-tenants-bench [--lbas N] [--writes-per-lba K] [--hot-share P] [--seed S]
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>

#include "log/log_engine.h"
#include "log/placement.h"
#include "tools/cli/options.h"

namespace po = boost::program_options;
using namespace eraid;

namespace {

// Per-tenant placement: tenant t's blocks (LBAs below `split`: tenant 0) get their own
// instance of the scheme, classes [t * k, (t + 1) * k).
class PerTenant final : public Placement {
 public:
  PerTenant(const std::string& scheme, uint64_t split) : split_(split) {
    for (int t = 0; t < 2; ++t) p_[t] = std::move(MakePlacement(scheme)).value();
    k_ = p_[0]->classes();
  }
  const char* name() const override { return "per-tenant"; }
  uint32_t classes() const override { return 2 * k_; }
  void OnRequest(uint64_t lba, uint64_t blocks, const PlacementContext& c) override {
    P(lba).OnRequest(lba, blocks, c);
  }
  uint32_t UserWrite(uint64_t lba, const PlacementContext& c) override {
    return Base(lba) + P(lba).UserWrite(lba, c);
  }
  uint32_t GcWrite(uint64_t lba, uint64_t user_time, uint32_t from,
                   const PlacementContext& c) override {
    return Base(lba) + P(lba).GcWrite(lba, user_time, from % k_, c);
  }
  void SegmentCollected(uint32_t cls, uint64_t created, const PlacementContext& c) override {
    p_[cls / k_]->SegmentCollected(cls % k_, created, c);
  }
  SealDecision OnSealed(uint32_t cls, const PlacementContext& c) override {
    return p_[cls / k_]->OnSealed(cls % k_, c);
  }

 private:
  Placement& P(uint64_t lba) { return *p_[lba >= split_]; }
  uint32_t Base(uint64_t lba) const { return lba >= split_ ? k_ : 0; }
  uint64_t split_;
  uint32_t k_ = 0;
  std::unique_ptr<Placement> p_[2];
};

struct Outcome {
  double wa, wa_hot, wa_cold;
};

Outcome Run(Placement& placement, uint64_t lbas, uint64_t writes_per_lba, double hot_share,
            uint64_t seed) {
  // Tenant 0 (hot): 80% of its writes to 20% of its LBAs; tenant 1: uniform. Tenant 0
  // gets `hot_share` of all writes. Each tenant has `lbas` LBAs (a power of two: the
  // engine's extents are the tenants).
  const auto shift = static_cast<uint32_t>(std::log2(double(lbas)));
  constexpr uint32_t kSegmentBlocks = 1024;
  CountingStore store(kSegmentBlocks);
  EngineOptions o;
  o.segment_blocks = kSegmentBlocks;
  o.keep_victim_gps = false;
  o.extent_shift = shift;
  // As the live volume: the data is 75% of the room; GC keeps 1/32 of the segments free.
  o.total_segments = static_cast<uint32_t>(2 * lbas / kSegmentBlocks * 4 / 3);
  o.gc_free_segments = placement.classes() + std::max<uint32_t>(2, o.total_segments / 32);
  o.gc_step_blocks = 8;
  LogEngine engine(o, placement, store);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  // Fill both once, then the workload.
  for (uint64_t l = 0; l < 2 * lbas; ++l) (void)engine.Write(l, 1, l);
  const ExtentCounters h0 = engine.Extent(0), c0 = engine.Extent(1);
  const uint64_t user0 = engine.stats().user_blocks, gc0 = engine.stats().gc_blocks;
  for (uint64_t i = 0; i < 2 * lbas * writes_per_lba; ++i) {
    uint64_t lba;
    if (u(rng) < hot_share) {
      lba = u(rng) < 0.8 ? rng() % (lbas / 5) : lbas / 5 + rng() % (lbas - lbas / 5);
    } else {
      lba = lbas + rng() % lbas;
    }
    if (Status s = engine.Write(lba, 1, 2 * lbas + i); !s.ok()) {
      std::cerr << "eraid-tenants-bench: " << s.ToString() << "\n";
      std::exit(1);
    }
  }
  auto wa = [](uint64_t user, uint64_t gc) {
    return user ? double(user + gc) / double(user) : 1.0;
  };
  const ExtentCounters h = engine.Extent(0), c = engine.Extent(1);
  return {wa(engine.stats().user_blocks - user0, engine.stats().gc_blocks - gc0),
          wa(h.user_blocks - h0.user_blocks, h.gc_blocks - h0.gc_blocks),
          wa(c.user_blocks - c0.user_blocks, c.gc_blocks - c0.gc_blocks)};
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t lbas = 1 << 18, writes_per_lba = 10, seed = 1;
  double hot_share = 0.5;
  std::string scheme = "sepbit";
  po::options_description desc("eraid-tenants-bench [options]\noptions");
  desc.add_options()("help,h", "this text")("lbas", po::value(&lbas)->default_value(lbas),
                                            "LBAs (4 KiB blocks) per tenant, a power of two")(
      "writes-per-lba", po::value(&writes_per_lba)->default_value(writes_per_lba),
      "workload writes per LBA of both tenants")("hot-share",
                                                 po::value(&hot_share)->default_value(hot_share),
                                                 "share of writes to the hot tenant (0..1)")(
      "scheme", po::value(&scheme)->default_value(scheme),
      "the placement scheme (sepbit, dac, ...)")("seed", po::value(&seed)->default_value(seed),
                                                 "random seed");
  po::variables_map vm;
  if (int rc = ParseOptions("eraid-tenants-bench", desc, argc, argv, &vm); rc >= 0) return rc;
  if (lbas < 4096 || (lbas & (lbas - 1)) != 0) {
    std::cerr << "eraid-tenants-bench: --lbas must be a power of two, at least 4096\n";
    return 2;
  }
  if (!(hot_share >= 0 && hot_share <= 1)) {
    std::cerr << "eraid-tenants-bench: --hot-share must be in 0..1\n";
    return 2;
  }
  auto shared_p = MakePlacement(scheme);
  if (!shared_p.ok()) {
    std::cerr << "eraid-tenants-bench: " << shared_p.status().message() << "\n";
    return 2;
  }
  PerTenant per(scheme, lbas);
  std::printf(
      "seed=%llu scheme=%s lbas=%llu per tenant, %llu writes per LBA, %.0f%% of writes to the hot "
      "tenant\n",
      (unsigned long long)seed, scheme.c_str(), (unsigned long long)lbas,
      (unsigned long long)writes_per_lba, 100 * hot_share);
  const Outcome s = Run(**shared_p, lbas, writes_per_lba, hot_share, seed);
  const Outcome p = Run(per, lbas, writes_per_lba, hot_share, seed);
  std::printf("classes,wa,wa_hot_tenant,wa_uniform_tenant\n");
  std::printf("shared,%.3f,%.3f,%.3f\n", s.wa, s.wa_hot, s.wa_cold);
  std::printf("per-volume,%.3f,%.3f,%.3f\n", p.wa, p.wa_hot, p.wa_cold);
  return 0;
}
