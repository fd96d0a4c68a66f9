// An array directory: what `eraid create --dir DIR` makes and `eraid serve` / the nbdkit
// plugin open. DIR holds one flash file per emulated drive (drive0 .. driveN-1) and a
// manifest, DIR/eraid.conf (docs/format/array-dir.md): a first line
// "eraid-array-dir 1", key=value lines, and a last line "crc32c=XXXXXXXX" over the rest.
//
// Opening brings up the whole stack: FileBackend (io_uring) -> CompressedDrive ->
// ElasticArray -> Volume. Thread-safety: as the Volume (all methods may be called
// concurrently); Open/Create are not.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compress/compressed_drive.h"
#include "compress/file_backend.h"
#include "log/volume.h"
#include "raid/array.h"

namespace eraid {

struct ArrayDirOptions {
  uint32_t devices = 4;
  uint64_t device_size_bytes = 256ull << 20;  // flash per emulated drive
  DriveOptions drive;
  ArrayOptions array;
  VolumeOptions volume;
};

class ArrayDir {
 public:
  // Refuses to overwrite an existing array unless `force`.
  static Result<std::unique_ptr<ArrayDir>> Create(const std::string& dir, const ArrayDirOptions& options, bool force);
  static Result<std::unique_ptr<ArrayDir>> Open(const std::string& dir);
  ~ArrayDir();

  Volume& volume() { return *volume_; }
  ElasticArray& array() { return *array_; }
  const std::vector<std::unique_ptr<CompressedDrive>>& drives() const { return drives_; }
  // Checkpoints every drive (so the next open replays nothing). Call before exit.
  Status Close();

 private:
  ArrayDir() = default;
  std::string dir_;
  std::vector<std::unique_ptr<FileBackend>> files_;
  std::vector<std::unique_ptr<CompressedDrive>> drives_;
  std::unique_ptr<ElasticArray> array_;
  std::unique_ptr<Volume> volume_;
};

// Parses "256M", "1G", "4096" (bytes; K, M, G, T are powers of 1024).
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace eraid
