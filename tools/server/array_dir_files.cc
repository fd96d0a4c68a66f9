// The array directory's own files (docs/format/array-dir.md): the manifest, the volume
// table and the lifetime counters, each a magic line, key=value lines and a CRC32C line,
// replaced atomically; and the parsers of sizes and timeouts they hold.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crc32c.h"
#include "tools/server/array_dir_internal.h"

namespace eraid {
namespace array_dir_internal {

Result<uint32_t> ParseTimeoutMs(const std::map<std::string, std::string>& kv,
                                const std::string& where) {
  auto it = kv.find("io_timeout_ms");
  if (it == kv.end()) return 30000u;  // manifests from before remote drives
  try {
    const unsigned long v = std::stoul(it->second);
    if (v > 0 && v <= 86400000ul) return static_cast<uint32_t>(v);
  } catch (...) {
  }
  return Status::Corruption(where + ": bad io_timeout_ms '" + it->second + "'");
}

std::string Hex(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// The manifest's layout, shared by the lifetime counters' file: a magic line, key=value
// lines, a CRC32C line; written to a temporary file and renamed into place.
Status WriteKeyValues(const std::string& dir, const char* name, const char* magic,
                      const std::map<std::string, std::string>& kv) {
  std::string body = std::string(magic) + "\n";
  for (const auto& [k, v] : kv) body += k + "=" + v + "\n";
  body += "crc32c=" + Hex(Crc32c(body.data(), body.size())) + "\n";
  const std::string tmp = dir + "/" + name + ".tmp";
  // Durable before it replaces the old one, and the rename durable before we return:
  // the volume table orders itself with the data by it (log/named_volumes.h).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("cannot create " + tmp + ": " + std::strerror(errno));
  const bool written = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) return Status::IoError("cannot write " + tmp + ": " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp, dir + "/" + name, ec);
  if (ec) return Status::IoError("cannot rename " + tmp + ": " + ec.message());
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status WriteManifest(const std::string& dir, const std::map<std::string, std::string>& kv) {
  return WriteKeyValues(dir, kManifest, kMagicLine, kv);
}

Result<std::map<std::string, std::string>> ReadKeyValues(const std::string& dir, const char* name,
                                                         const char* magic) {
  const std::string path = dir + "/" + name;
  std::ifstream f(path);
  if (!f) return Status::NotFound(path + " missing");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t crc_at = text.rfind("crc32c=");
  if (text.rfind(magic, 0) != 0 || crc_at == std::string::npos) {
    return Status::Corruption(path + " does not start with '" + magic + "'");
  }
  if (Hex(Crc32c(text.data(), crc_at)) != text.substr(crc_at + 7, 8)) {
    return Status::Corruption(path + ": CRC mismatch");
  }
  std::map<std::string, std::string> kv;
  std::istringstream lines(text.substr(0, crc_at));
  std::string line;
  std::getline(lines, line);  // magic
  while (std::getline(lines, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return Status::Corruption(path + ": bad line '" + line + "'");
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

Result<std::map<std::string, std::string>> ReadManifest(const std::string& dir) {
  auto kv = ReadKeyValues(dir, kManifest, kMagicLine);
  if (!kv.ok() && kv.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("no array in " + dir + " (" + dir + "/" + kManifest + " missing)");
  }
  return kv;
}

// The table of named volumes (docs/format/array-dir.md): volume.NAME=SIZE_BLOCKS EXTENT,...
constexpr const char* kVolumesFile = "volumes";
constexpr const char* kVolumesMagic = "eraid-volumes 1";

Status SaveVolumes(const std::string& dir, const std::vector<VolumeRecord>& table) {
  std::map<std::string, std::string> kv;
  for (const VolumeRecord& r : table) {
    std::string extents;
    for (uint32_t x : r.extents) extents += (extents.empty() ? "" : ",") + std::to_string(x);
    kv["volume." + r.name] = std::to_string(r.size_blocks) + " " + extents;
  }
  return WriteKeyValues(dir, kVolumesFile, kVolumesMagic, kv);
}

Result<std::vector<VolumeRecord>> LoadVolumes(const std::string& dir) {
  ERAID_ASSIGN_OR_RETURN(auto kv, ReadKeyValues(dir, kVolumesFile, kVolumesMagic));
  const std::string path = dir + "/" + kVolumesFile;
  std::vector<VolumeRecord> table;
  for (const auto& [k, v] : kv) {
    if (k.rfind("volume.", 0) != 0) return Status::Corruption(path + ": unknown key '" + k + "'");
    VolumeRecord r;
    r.name = k.substr(7);
    ERAID_RETURN_IF_ERROR(NamedVolumes::CheckName(r.name).WithContext(path));
    std::istringstream in(v);
    std::string extents;
    if (!(in >> r.size_blocks >> extents) || r.size_blocks == 0)
      return Status::Corruption(path + ": bad volume '" + r.name + "'");
    std::istringstream list(extents);
    std::string x;
    while (std::getline(list, x, ',')) {
      try {
        r.extents.push_back(static_cast<uint32_t>(std::stoul(x)));
      } catch (...) {
        return Status::Corruption(path + ": bad extent in volume '" + r.name + "'");
      }
    }
    if (r.extents.size() !=
        (r.size_blocks + NamedVolumes::kExtentBlocks - 1) / NamedVolumes::kExtentBlocks) {
      return Status::Corruption(path + ": volume '" + r.name +
                                "' has the wrong number of extents for its size");
    }
    table.push_back(std::move(r));
  }
  // The default volume first: its extents are the array's first.
  std::stable_partition(table.begin(), table.end(),
                        [](const VolumeRecord& r) { return r.name == NamedVolumes::kDefault; });
  return table;
}

uint64_t UnixNow() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The fields of LifetimeCounters, by their names in the file and in `status --json`.
std::vector<std::pair<const char*, uint64_t LifetimeCounters::*>> CounterFields() {
  return {{"user_written_bytes", &LifetimeCounters::user_written_bytes},
          {"gc_written_bytes", &LifetimeCounters::gc_written_bytes},
          {"raid_written_bytes", &LifetimeCounters::raid_written_bytes},
          {"device_stored_bytes", &LifetimeCounters::device_stored_bytes},
          {"flash_written_bytes", &LifetimeCounters::flash_written_bytes},
          {"trimmed_bytes", &LifetimeCounters::trimmed_bytes}};
}

}  // namespace array_dir_internal

using namespace array_dir_internal;  // NOLINT: this file implements them

void ForEachCounter(const LifetimeCounters& c,
                    const std::function<void(const char*, uint64_t)>& fn) {
  for (const auto& [name, field] : CounterFields()) fn(name, c.*field);
}

Result<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("empty size");
  size_t end = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &end);
  } catch (...) {
    return Status::InvalidArgument("bad size '" + text + "'");
  }
  const std::string unit = text.substr(end);
  int shift = 0;
  if (unit == "K" || unit == "KiB")
    shift = 10;
  else if (unit == "M" || unit == "MiB")
    shift = 20;
  else if (unit == "G" || unit == "GiB")
    shift = 30;
  else if (unit == "T" || unit == "TiB")
    shift = 40;
  else if (!unit.empty())
    return Status::InvalidArgument("bad size unit in '" + text + "' (use K, M, G, T)");
  if (v > (UINT64_MAX >> shift)) return Status::InvalidArgument("size too large");
  return v << shift;
}

}  // namespace eraid
