// The admin commands' shared parts (admin.cc runs the commands, admin_report.cc writes
// the status, inspect and volume reports): a small JSON writer and the number formats.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tools/server/admin.h"

namespace eraid::admin_internal {

// A tiny JSON object writer: enough for flat and nested objects of numbers and strings.
class Json {
 public:
  Json& Num(const std::string& k, double v) {  // NaN: null
    if (std::isnan(v)) return Null(k);
    std::ostringstream o;
    o.precision(6);
    o << v;
    return Raw(k, o.str());
  }
  Json& Int(const std::string& k, uint64_t v) { return Raw(k, std::to_string(v)); }
  Json& Bool(const std::string& k, bool v) { return Raw(k, v ? "true" : "false"); }
  Json& Str(const std::string& k, const std::string& v) { return Raw(k, Quote(v)); }
  Json& Obj(const std::string& k, const Json& v) { return Raw(k, v.str()); }
  Json& Null(const std::string& k) { return Raw(k, "null"); }
  Json& Ints(const std::string& k, const std::vector<uint32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size();
         ++i) {  // (not `(i ? "," : "") + ...`: GCC 12's -Wrestrict at -O3)
      if (i) s += ',';
      s += std::to_string(v[i]);
    }
    return Raw(k, s + "]");
  }
  Json& Arr(const std::string& k, const std::vector<Json>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ',';
      s += v[i].str();
    }
    return Raw(k, s + "]");
  }
  std::string str() const { return "{" + body_ + "}"; }

  static std::string Quote(const std::string& v) {
    std::string s = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') s += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        s += buf;
        continue;
      }
      s += c;
    }
    return s + "\"";
  }

 private:
  Json& Raw(const std::string& k, const std::string& v) {
    if (!body_.empty()) body_ += ",";
    body_ += Quote(k) + ":" + v;
    return *this;
  }
  std::string body_;
};

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
