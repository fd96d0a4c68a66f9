// libFuzzer target: the block-trace line parsers (Alibaba, Tencent, MSR). The first input
// byte picks the format; the rest is split into lines. Property: no crash, no sanitizer
// report; an accepted line describes at least one block, and a write of the first block.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto format = static_cast<eraid::TraceFormat>(data[0] % 3);
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    eraid::TraceRecord r;
    if (eraid::ParseTraceLine(format, line, &r).ok() && r.blocks == 0) std::abort();
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return 0;
}
