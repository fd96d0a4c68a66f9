#include "log/placement.h"

#include "log/placement_internal.h"

namespace eraid {

std::vector<std::string> PlacementNames() {
  return {"sepbit", "nosep", "sepgc", "fk", "oracle", "dac", "fadac", "warcip", "hybrid"};
}

Result<std::unique_ptr<Placement>> MakePlacement(
    const std::string& name, std::shared_ptr<const std::vector<uint64_t>> future, bool paged) {
  if (name == "sepbit") return placement_internal::MakeSepBIT(paged);
  if (name == "hybrid") return placement_internal::MakeHybrid();
  ERAID_ASSIGN_OR_RETURN(auto p, placement_internal::MakeBaseline(name, std::move(future)));
  if (p) return p;
  std::string all;
  for (const auto& n : PlacementNames()) all += (all.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown placement '" + name + "' (one of: " + all + ")");
}

}  // namespace eraid
