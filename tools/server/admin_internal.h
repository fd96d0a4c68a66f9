// The admin commands' shared parts (admin.cc runs the commands, admin_report.cc writes
// the status, inspect and volume reports): the number formats and the reports.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "tools/json.h"
#include "tools/server/admin.h"

namespace eraid::admin_internal {

inline const char* StateName(DeviceState s) {
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

inline double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// A write-amplification figure over less than 1 MiB of the I/O it divides by says
// nothing (a fresh array's device WAF was 838): it is not given — null in JSON, "-" in
// text — rather than shown as a number: NaN here.
constexpr double kMinWaBytes = 1 << 20;
inline double Wa(double written, double over_bytes) {
  return over_bytes < kMinWaBytes ? std::numeric_limits<double>::quiet_NaN() : written / over_bytes;
}

inline std::string Fixed(double v, int digits = 3) {  // NaN: "-"
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

inline std::string Mib(uint64_t bytes) { return Fixed(double(bytes) / 1048576.0, 1) + " MiB"; }

inline AdminReply Error(int rc, const std::string& message) { return {rc, message + "\n"}; }

inline Result<uint32_t> ParseIndex(const std::string& text, uint32_t limit, const char* what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v >= limit) {
    return Status::InvalidArgument(std::string("bad ") + what + " '" + text + "' (0.." +
                                   std::to_string(limit - 1) + ")");
  }
  return static_cast<uint32_t>(v);
}

// A drive's flash as shown: a remote one's URI without secrets.
inline std::string Shown(const std::string& path) {
  return NbdBackend::IsUri(path) ? NbdBackend::Redact(path) : path;
}

// The reports (admin_report.cc).
AdminReply StatusReport(ArrayDir& a, AdminState& state, bool json);
AdminReply InspectReport(ArrayDir& a, bool json, uint32_t bins);
// volume create NAME SIZE | resize NAME SIZE | delete NAME | list
AdminReply VolumeCommand(ArrayDir& a, const std::vector<std::string>& words, bool json);

}  // namespace eraid::admin_internal
