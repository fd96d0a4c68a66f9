#include "tools/array_dir.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/crc32c.h"

namespace eraid {

namespace {
constexpr const char* kManifest = "eraid.conf";
constexpr const char* kMagicLine = "eraid-array-dir 1";

std::string DrivePath(const std::string& dir, uint32_t i) { return dir + "/drive" + std::to_string(i); }

std::string Hex(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

Status WriteManifest(const std::string& dir, const std::map<std::string, std::string>& kv) {
  std::string body = std::string(kMagicLine) + "\n";
  for (const auto& [k, v] : kv) body += k + "=" + v + "\n";
  body += "crc32c=" + Hex(Crc32c(body.data(), body.size())) + "\n";
  const std::string tmp = dir + "/" + kManifest + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << body;
    f.flush();
    if (!f) return Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir + "/" + kManifest, ec);
  return ec ? Status::IoError("cannot rename " + tmp + ": " + ec.message()) : Status::Ok();
}

Result<std::map<std::string, std::string>> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::ifstream f(path);
  if (!f) return Status::NotFound("no array in " + dir + " (" + path + " missing)");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t crc_at = text.rfind("crc32c=");
  if (text.rfind(kMagicLine, 0) != 0 || crc_at == std::string::npos) {
    return Status::Corruption(path + " is not an eraid manifest");
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
}  // namespace

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
  if (unit == "K" || unit == "KiB") shift = 10;
  else if (unit == "M" || unit == "MiB") shift = 20;
  else if (unit == "G" || unit == "GiB") shift = 30;
  else if (unit == "T" || unit == "TiB") shift = 40;
  else if (!unit.empty()) return Status::InvalidArgument("bad size unit in '" + text + "' (use K, M, G, T)");
  if (v > (UINT64_MAX >> shift)) return Status::InvalidArgument("size too large");
  return v << shift;
}

Result<std::unique_ptr<ArrayDir>> ArrayDir::Create(const std::string& dir, const ArrayDirOptions& o, bool force) {
  if (o.devices < kMinDevices || o.devices > kMaxDevices) {
    return Status::InvalidArgument("--devices must be 3..16");
  }
  if (o.device_size_bytes < (32ull << 20) || !IsBlockAligned(o.device_size_bytes)) {
    return Status::InvalidArgument("--device-size must be at least 32M and a multiple of 4K");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  if (std::filesystem::exists(dir + "/" + kManifest) && !force) {
    return Status::InvalidArgument(dir + " already holds an array (use --force to overwrite)");
  }
  auto a = std::unique_ptr<ArrayDir>(new ArrayDir());
  a->dir_ = dir;
  std::vector<Backend*> devs;
  for (uint32_t i = 0; i < o.devices; ++i) {
    FileBackendOptions fo;
    fo.create = true;
    fo.size_bytes = o.device_size_bytes;
    ERAID_ASSIGN_OR_RETURN(auto file, FileBackend::Open(DrivePath(dir, i), fo));
    ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(*file, o.drive));
    a->files_.push_back(std::move(file));
    a->drives_.push_back(std::move(drive));
    devs.push_back(a->drives_.back().get());
  }
  ERAID_ASSIGN_OR_RETURN(a->array_, ElasticArray::Create(devs, o.array));
  ERAID_ASSIGN_OR_RETURN(a->volume_, Volume::Create(*a->array_, o.volume));
  std::map<std::string, std::string> kv{
      {"devices", std::to_string(o.devices)},
      {"compression", o.drive.codec.enabled ? "zstd:" + std::to_string(o.drive.codec.zstd_level) : "none"},
      {"flashalloc", o.drive.flashalloc ? "on" : "off"},
      {"placement", o.volume.placement},
      {"gp", std::to_string(o.volume.gp_threshold)},
      {"scheme", raid_format::SchemeName(o.volume.scheme)}};
  ERAID_RETURN_IF_ERROR(WriteManifest(dir, kv));
  return a;
}

Result<std::unique_ptr<ArrayDir>> ArrayDir::Open(const std::string& dir) {
  ERAID_ASSIGN_OR_RETURN(auto kv, ReadManifest(dir));
  const uint32_t devices = static_cast<uint32_t>(std::stoul(kv["devices"]));
  DriveOptions drive;
  ERAID_ASSIGN_OR_RETURN(drive.codec, ParseCodecConfig(kv["compression"]));
  drive.flashalloc = kv["flashalloc"] != "off";
  VolumeOptions vo;
  vo.placement = kv["placement"];
  vo.gp_threshold = std::stod(kv["gp"]);
  vo.scheme = kv["scheme"] == "raid10" ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
  auto a = std::unique_ptr<ArrayDir>(new ArrayDir());
  a->dir_ = dir;
  std::vector<Backend*> devs;
  for (uint32_t i = 0; i < devices; ++i) {
    ERAID_ASSIGN_OR_RETURN(auto file, FileBackend::Open(DrivePath(dir, i), {}));
    ERAID_ASSIGN_OR_RETURN(auto d, CompressedDrive::Open(*file, drive));
    a->files_.push_back(std::move(file));
    a->drives_.push_back(std::move(d));
    devs.push_back(a->drives_.back().get());
  }
  ERAID_ASSIGN_OR_RETURN(a->array_, ElasticArray::Open(devs));
  ERAID_ASSIGN_OR_RETURN(a->volume_, Volume::Open(*a->array_, vo));
  return a;
}

Status ArrayDir::Close() {
  if (volume_) ERAID_RETURN_IF_ERROR(volume_->Flush());
  for (auto& d : drives_) ERAID_RETURN_IF_ERROR(d->Close());
  return Status::Ok();
}

ArrayDir::~ArrayDir() {
  volume_.reset();
  array_.reset();
  drives_.clear();
  files_.clear();
}

}  // namespace eraid
