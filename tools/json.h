// JSON for the admin protocol's `--json` replies and the tools' reports: nlohmann::json
// (Debian's nlohmann-json3-dev), keys in the order written. Writing goes through the
// library (quoting, escapes, NaN as null); reading a reply takes a JSON pointer, so a
// figure is named by its place ("/wa/log"), not by the first key that happens to match.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace eraid {

using Json = nlohmann::ordered_json;

// A measured figure as shown: six significant digits (as the replies have always given
// them), NaN kept (written as null: "not measured").
inline double Figure(double v) {
  if (!std::isfinite(v)) return v;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return std::strtod(buf, nullptr);
}

// The number at `pointer` (e.g. "/scrub/mismatches") in a JSON text, or `fallback` when
// the text is not JSON, the place is missing, or holds no number (null included).
inline double JsonNumberAt(const std::string& text, const std::string& pointer,
                           double fallback = 0) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fallback;
  const Json::json_pointer p(pointer);
  if (!j.contains(p)) return fallback;
  const Json& v = j.at(p);
  return v.is_number() ? v.get<double>() : fallback;
}

}  // namespace eraid
