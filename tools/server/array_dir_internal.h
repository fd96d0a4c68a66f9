// The array directory's shared parts: array_dir.cc creates and opens the stack,
// array_dir_files.cc reads and writes the directory's files, array_dir_rebuild.cc
// replaces and re-adds drives.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tools/server/array_dir.h"

namespace eraid::array_dir_internal {

// The manifest (docs/format/array-dir.md).
inline constexpr const char* kManifest = "eraid.conf";
inline constexpr const char* kMagicLine = "eraid-array-dir 1";
// The lifetime counters' file, saved this often while served.
inline constexpr const char* kStatsFile = "eraid.stats";
inline constexpr const char* kStatsMagic = "eraid-array-stats 1";
inline constexpr auto kStatsSaveEvery = std::chrono::seconds(10);

// A drive's flash: a remote export (NBD URI) or a local file or block device.
// `create_size`: a local file missing (or a regular file) is made this size; 0 opens.
Result<std::unique_ptr<Backend>> OpenFlash(const std::string& path, uint64_t create_size,
                                           uint32_t io_timeout_ms);

// A drive's timing layers (compress/timed_backend.h), when the array has a model: made
// around `file` into *timing, with options->timing set; returns the flash the drive is
// formatted or opened on (`file` itself without a model).
Backend& TimedFlashOf(const DriveProfile& profile, Backend& file,
                      std::unique_ptr<DriveTiming>* timing, DriveOptions* options);
// What the array uses of a drive: its host-side timing layer, or the drive itself.
inline Backend* DeviceOf(CompressedDrive& drive, DriveTiming* timing) {
  return timing ? &timing->Attach(drive) : &drive;
}
// The manifest's drive_model (none for manifests from before the timing model).
Result<DriveProfile> ParseDriveModel(const std::map<std::string, std::string>& kv,
                                     const std::string& where);

// The files' layout: a magic line, key=value lines, a CRC32C line; written to a temporary
// file, made durable and renamed into place.
Status WriteKeyValues(const std::string& dir, const char* name, const char* magic,
                      const std::map<std::string, std::string>& kv);
Result<std::map<std::string, std::string>> ReadKeyValues(const std::string& dir, const char* name,
                                                         const char* magic);
Status WriteManifest(const std::string& dir, const std::map<std::string, std::string>& kv);
Result<std::map<std::string, std::string>> ReadManifest(const std::string& dir);
// The table of named volumes.
Status SaveVolumes(const std::string& dir, const std::vector<VolumeRecord>& table);
Result<std::vector<VolumeRecord>> LoadVolumes(const std::string& dir);
// The manifest's io_timeout_ms (30 s for manifests from before remote drives).
Result<uint32_t> ParseTimeoutMs(const std::map<std::string, std::string>& kv,
                                const std::string& where);

uint64_t UnixNow();
// The fields of LifetimeCounters, by their names in the file and in `status --json`.
std::vector<std::pair<const char*, uint64_t LifetimeCounters::*>> CounterFields();

}  // namespace eraid::array_dir_internal
