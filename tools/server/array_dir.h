// An array directory: what `eraid create --dir DIR` makes and `eraid serve` / the nbdkit
// plugin open. DIR holds one flash file per emulated drive (drive0 .. driveN-1) and a
// manifest, DIR/eraid.conf (docs/format/array-dir.md): a first line
// "eraid-array-dir 1", key=value lines, and a last line "crc32c=XXXXXXXX" over the rest.
//
// Opening brings up the whole stack: FileBackend (io_uring) -> CompressedDrive ->
// ElasticArray -> LogVolume. Thread-safety: as the LogVolume (all methods may be called
// concurrently); Open/Create are not.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "compress/compressed_drive.h"
#include "compress/file_backend.h"
#include "compress/nbd_backend.h"
#include "compress/timed_backend.h"
#include "log/log_volume.h"
#include "log/named_volumes.h"
#include "raid/array.h"
#include "scheduler/scheduler.h"

namespace eraid {

struct ArrayDirOptions {
  uint32_t devices = 4;
  // Where each drive's flash lives: empty = DIR/drive0 .. DIR/driveN-1. Otherwise one
  // path per drive: files (created with device_size_bytes if missing), block devices, or
  // NBD URIs (nbd://, nbds://, nbd+unix://: the export's size is the flash's).
  std::vector<std::string> device_paths;
  uint64_t device_size_bytes = 256ull << 20;  // flash per emulated drive
  // A remote drive's request (or connect) that takes longer fails the drive (kept in the
  // manifest; `eraid set --io-timeout` changes it).
  uint32_t io_timeout_ms = 30000;
  DriveOptions drive;
  // The drives' timing model (compress/drive_model.h): "none" finishes each I/O at the
  // CPU's pace. Kept in the manifest; `eraid set --drive-model` changes it while stopped.
  DriveProfile drive_model;
  ArrayOptions array;
  VolumeOptions volume;
  SchedulerOptions scheduler;  // policy, beta and rate are kept in the manifest
};

// Write counters over the array's whole life, kept in DIR/eraid.stats (saved every 10 s
// while served and at a clean close: a crash loses at most the last seconds' counts).
struct LifetimeCounters {
  uint64_t user_written_bytes = 0;  // the volume's user writes (4 KiB blocks)
  uint64_t gc_written_bytes = 0;    // the log's GC rewrites
  uint64_t raid_written_bytes =
      0;  // what the array wrote to the drives (data, parity, mirrors, metadata)
  uint64_t device_stored_bytes = 0;  // the compressed records those writes became
  uint64_t flash_written_bytes = 0;  // everything the drives wrote to flash
  uint64_t trimmed_bytes = 0;
  uint64_t since_unix = 0;  // when counting began (creation; or a lost stats file)
  uint64_t opens = 0;
};
// Calls fn(name, value) for each byte counter, named as in the file and `status --json`.
void ForEachCounter(const LifetimeCounters& c,
                    const std::function<void(const char*, uint64_t)>& fn);

class ArrayDir {
 public:
  // Refuses to overwrite an existing array unless `force`.
  static Result<std::unique_ptr<ArrayDir>> Create(const std::string& dir,
                                                  const ArrayDirOptions& options, bool force);
  // Takes DIR/eraid.lock exclusively: one process opens an array at a time (Busy else).
  static Result<std::unique_ptr<ArrayDir>> Open(const std::string& dir);
  // What Open would refuse at once, without opening: no array (or a damaged manifest) in
  // DIR, or the array in use. Starts no thread (nbdkit's get_ready, before it forks).
  static Status Probe(const std::string& dir);
  ~ArrayDir();

  const std::string& dir() const { return dir_; }
  std::string device_path(uint32_t d) const {
    std::shared_lock lock(devices_mu_);
    return paths_.at(d);
  }
  // The link of each drive whose flash is remote (nullopt for local ones).
  std::vector<std::optional<NbdLinkStats>> links() const;
  uint32_t io_timeout_ms() const { return io_timeout_ms_.load(std::memory_order_relaxed); }
  // Changes the remote drives' I/O timeout while serving: each connection's deadline at
  // once, and the manifest for the next open.
  Status SetIoTimeout(uint32_t timeout_ms);
  // Rebuilds device `d` onto a freshly formatted drive at `with` (empty: a new file that
  // replaces the device's own, renamed into place when the rebuild is done), online. The
  // manifest records the new path. `progress` as ElasticArray::Replace.
  Status Replace(DeviceIndex d, const std::string& with, uint64_t rate_bytes_per_sec,
                 const std::function<void(const RebuildProgress&)>& progress);

  // Brings back device `d`, failed by an outage, on its own flash (paths_[d], reached
  // afresh): the drive is opened (recovering it), checked to be the one that left, and
  // resynced — only the segments it may lack are rebuilt (ElasticArray::ReAdd). A remote
  // drive whose old connection may still deliver writes it abandoned is waited for (up
  // to the I/O timeout), then refused with Busy (as is a rebuild onto its own export).
  Result<ReAddReport> ReAdd(DeviceIndex d, uint64_t rate_bytes_per_sec,
                            const std::function<void(const RebuildProgress&)>& progress);

  // The log over the whole array (the default volume's LBAs are its first), and the
  // named volumes on it.
  LogVolume& volume() { return *volume_; }
  NamedVolumes& volumes() { return *volumes_; }
  ElasticArray& array() { return *array_; }
  // Each drive's counters (a replacement may swap a drive at any time: no references out).
  std::vector<DriveStats> drive_stats() const;
  // The drives' timing model (name "none" without one), and each drive's figures under it.
  const DriveProfile& drive_model() const { return drive_model_; }
  std::vector<DriveModelStats> drive_model_stats() const;
  // Checkpoints every drive (so the next open replays nothing). Call before exit.
  Status Close();
  // Starts the conversion scheduler's background workers and the thread that saves the
  // lifetime counters (the server does; offline commands do not). Stopped by Close().
  void StartServing();
  LifetimeCounters Lifetime() const;
  // Why the lifetime counters start later than the array (empty if they do not).
  const std::string& counters_note() const { return counters_note_; }
  Scheduler* scheduler() { return scheduler_.get(); }
  const SchedulerOptions& scheduler_options() const { return scheduler_options_; }
  PhysicalUse Physical() const;
  // How long Open took, by stage: the drives (their checkpoints and, after a crash, the
  // records written since), the array (superblocks, bitmap, every segment's summaries)
  // and the log (adopting the segments, mapping every LBA). Zero for a created array.
  struct OpenTimes {
    double drives_seconds = 0, array_seconds = 0, volume_seconds = 0, total_seconds = 0;
    // Drives that were not closed cleanly (a crash recovery, when not zero): they replayed
    // what their checkpoints did not cover, and the array completed its open segments.
    uint32_t crashed_drives = 0;
  };
  const OpenTimes& open_times() const { return open_times_; }

 private:
  // Waits until no write abandoned by device d's failed connection can land; Busy if it
  // does not come within the I/O timeout. `what`: for the message ("re-added").
  Status WaitForLateWrites(uint32_t d, const std::string& what);
  ArrayDir() = default;
  Status Lock();
  Status WriteManifestFile() const;
  Status SaveLifetime() const;
  Status OpenVolumes(std::vector<VolumeRecord> table);
  // Open's steps: the drives at paths_, side by side (one thread each: an open is mostly
  // waiting for reads), into files_, timing_ and drives_ (a drive host that is down: an
  // UnreachableBackend, the array opening without it); then, once open, the file
  // drives' reads through their mappings again.
  Status OpenDrives(const DriveOptions& drive);
  void ReadThroughMappings();
  void StopSaver();
  std::string dir_;
  int lock_fd_ = -1;
  std::vector<std::string> paths_;
  std::map<std::string, std::string> manifest_;
  DriveOptions drive_options_;
  std::mutex replace_mu_;  // one replacement at a time
  // Guards paths_, files_ and drives_ against a replacement swapping them while the
  // scheduler or an admin command reads them.
  mutable std::shared_mutex devices_mu_;
  std::vector<std::unique_ptr<Backend>>
      files_;  // each drive's flash: a FileBackend or an NbdBackend
  std::atomic<uint32_t> io_timeout_ms_{30000};
  std::mutex manifest_mu_;  // manifest_ and its file, changed by Replace and SetIoTimeout
  std::vector<std::unique_ptr<CompressedDrive>> drives_;
  // Each drive's timing layers (null entries without a model): around files_[i] and
  // drives_[i]; destroyed after the drive and before its flash.
  std::vector<std::unique_ptr<DriveTiming>> timing_;
  DriveProfile drive_model_;
  std::unique_ptr<ElasticArray> array_;
  std::unique_ptr<LogVolume> volume_;
  std::unique_ptr<NamedVolumes> volumes_;
  SchedulerOptions scheduler_options_;
  std::unique_ptr<Scheduler> scheduler_;
  LifetimeCounters lifetime_base_;  // as loaded at open (opens counted)
  std::string counters_note_;
  OpenTimes open_times_;
  DriveStats replaced_;         // counters of drives replaced since open (under devices_mu_)
  mutable std::mutex save_mu_;  // one writer of DIR/eraid.stats at a time
  std::thread saver_;
  std::mutex saver_mu_;
  std::condition_variable saver_cv_;
  bool saver_stop_ = false;
};

// Change settings kept in an array's manifest while nothing serves it (`eraid set`): the
// remote drives' I/O timeout, the drives' timing model. Busy while the array is open.
Status SetIoTimeout(const std::string& dir, uint32_t timeout_ms);
Status SetDriveModel(const std::string& dir, const DriveProfile& profile);

// Parses "256M", "1G", "4096" (bytes; K, M, G, T are powers of 1024).
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace eraid
