#include "tools/server/array_dir.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "common/crc32c.h"
#include "common/thread_priority.h"
#include "compress/completion_queue.h"
#include "tools/server/array_dir_internal.h"

namespace eraid {

using namespace array_dir_internal;  // NOLINT: the directory's own helpers

namespace {
// The array compresses each full row once, outside its locks, and hands the drives the
// records (ElasticArray::set_row_codec), so the two copies of a mirrored block cost one
// compression; the drives compress only what comes without records (parity). The rows
// are written by the array's row writer (ElasticArray::StartRowWriter), which thereby
// does the drives' appends too: the drives keep no write cache of their own, whose worker
// threads cost a wake-up per row and drive (0.55 context switches per random write
// against 0.35 without, docs/block-device.md). An open erase unit goes to its flash file
// when it fills, or at a flush, in one write. Erase units that hold only garbage (a
// freed segment's, with FlashAlloc) are erased by each drive's own thread ahead of need,
// its flash flush and erases made without the drive's lock: done inline, by whichever
// writer opened an EU when fewer than 4 were free, they held the drive's lock for 2-3 ms
// of fdatasync and header writes, and the volume lock's holder (a GC read, a segment's
// trims) waited behind them (docs/block-device.md).
void SetServingDriveOptions(DriveOptions* d) {
  d->write_cache_blocks = 0;
  d->write_batch_blocks = std::numeric_limits<uint32_t>::max();
  d->background_free_eus = 16;
}
VolumeOptions ServingVolumeOptions(VolumeOptions vo) {
  NamedVolumes::SetOptions(&vo);  // the LBA space named volumes take extents of
  return vo;
}
// A drive's flash file: reads from a mapping of it (compress/file_backend.h), the rest
// through io_uring.
FileBackendOptions FlashFileOptions() {
  FileBackendOptions fo;
  fo.mapped_reads = true;
  return fo;
}

// A remote drive that could not be reached when the array opened: every request fails,
// so the array opens without it, degraded (ElasticArray::Open), and `replace` brings it
// back once its host is up.
class UnreachableBackend final : public Backend {
 public:
  UnreachableBackend(std::string uri, std::string why)
      : uri_(std::move(uri)), why_(std::move(why)) {}
  uint64_t capacity_blocks() const override { return 0; }
  uint32_t queue_depth() const override { return 1; }
  std::string name() const override { return "nbd:" + NbdBackend::Redact(uri_); }
  void SubmitRead(Lba, std::span<std::byte>, IoCallback done) override { Fail(std::move(done)); }
  void SubmitWrite(Lba, std::span<const std::byte>, IoCallback done) override {
    Fail(std::move(done));
  }
  void SubmitTrim(Lba, uint64_t, IoCallback done) override { Fail(std::move(done)); }
  void SubmitFlush(IoCallback done) override { Fail(std::move(done)); }
  size_t Poll(bool wait) override { return completions_.Poll(wait); }
  size_t in_flight() const override { return completions_.size(); }
  NbdLinkStats link_stats() const {
    NbdLinkStats l;
    l.uri = NbdBackend::Redact(uri_);
    l.state = "unreachable";
    l.error = why_;
    return l;
  }

 private:
  void Fail(IoCallback done) {
    completions_.Push(std::move(done), Status::IoError(name() + " unreachable: " + why_));
  }
  const std::string uri_, why_;
  CompletionQueue completions_;
};

std::string DrivePath(const std::string& dir, uint32_t i) {
  return dir + "/drive" + std::to_string(i);
}

}  // namespace

Backend& array_dir_internal::TimedFlashOf(const DriveProfile& profile, Backend& file,
                                          std::unique_ptr<DriveTiming>* timing,
                                          DriveOptions* options) {
  if (!profile.enabled()) return file;
  *timing = DriveTiming::Make(profile, file);
  options->timing = &(*timing)->model();
  return (*timing)->flash();
}

Result<DriveProfile> array_dir_internal::ParseDriveModel(
    const std::map<std::string, std::string>& kv, const std::string& where) {
  auto it = kv.find("drive_model");
  if (it == kv.end()) return DriveProfile{};
  auto p = ParseDriveProfile(it->second);
  if (!p.ok()) return Status::Corruption(where + ": " + p.status().message());
  return p;
}

Result<std::unique_ptr<Backend>> array_dir_internal::OpenFlash(const std::string& path,
                                                               uint64_t create_size,
                                                               uint32_t io_timeout_ms) {
  if (NbdBackend::IsUri(path)) {
    NbdBackendOptions no;
    no.timeout_ms = io_timeout_ms;
    ERAID_ASSIGN_OR_RETURN(auto nbd, NbdBackend::Open(path, no));
    return std::unique_ptr<Backend>(std::move(nbd));
  }
  FileBackendOptions fo = FlashFileOptions();
  if (create_size > 0) {
    fo.create = !std::filesystem::exists(path) || !std::filesystem::is_block_file(path);
    fo.size_bytes = create_size;
  }
  ERAID_ASSIGN_OR_RETURN(auto file, FileBackend::Open(path, fo));
  return std::unique_ptr<Backend>(std::move(file));
}

namespace {
// Removes the drive files a failed Create made (not files or devices that were there).
struct CreatedFiles {
  std::vector<std::string> paths;
  bool keep = false;
  ~CreatedFiles() {
    if (keep) return;
    std::error_code ec;
    for (const auto& p : paths) std::filesystem::remove(p, ec);
  }
};
}  // namespace

Result<std::unique_ptr<ArrayDir>> ArrayDir::Create(const std::string& dir, const ArrayDirOptions& o,
                                                   bool force) {
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
  if (!o.device_paths.empty() && o.device_paths.size() != o.devices) {
    return Status::InvalidArgument("give --device once per drive (" + std::to_string(o.devices) +
                                   ")");
  }
  auto a = std::unique_ptr<ArrayDir>(new ArrayDir());
  a->dir_ = dir;
  ERAID_RETURN_IF_ERROR(a->Lock());
  a->drive_options_ = o.drive;
  SetServingDriveOptions(&a->drive_options_);
  a->drive_model_ = o.drive_model;
  std::vector<Backend*> devs;
  CreatedFiles created;
  if (o.io_timeout_ms == 0 || o.io_timeout_ms > 86400000u) {
    return Status::InvalidArgument("--io-timeout must be more than 0 and at most a day");
  }
  a->io_timeout_ms_ = o.io_timeout_ms;
  for (uint32_t i = 0; i < o.devices; ++i) {
    const std::string path = o.device_paths.empty() ? DrivePath(dir, i) : o.device_paths[i];
    a->paths_.push_back(path);
    if (!NbdBackend::IsUri(path) && !std::filesystem::exists(path)) created.paths.push_back(path);
    ERAID_ASSIGN_OR_RETURN(auto file, OpenFlash(path, o.device_size_bytes, o.io_timeout_ms));
    std::unique_ptr<DriveTiming> timing;
    DriveOptions options = a->drive_options_;
    Backend& flash = TimedFlashOf(o.drive_model, *file, &timing, &options);
    ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(flash, options));
    devs.push_back(DeviceOf(*drive, timing.get()));
    a->files_.push_back(std::move(file));
    a->drives_.push_back(std::move(drive));
    a->timing_.push_back(std::move(timing));
  }
  ERAID_ASSIGN_OR_RETURN(a->array_, ElasticArray::Create(devs, o.array));
  a->array_->set_row_codec(a->drive_options_.codec);
  a->array_->StartRowWriter();
  ERAID_ASSIGN_OR_RETURN(a->volume_, LogVolume::Create(*a->array_, ServingVolumeOptions(o.volume)));
  ERAID_RETURN_IF_ERROR(a->OpenVolumes(NamedVolumes::DefaultTable(a->volume_->capacity_blocks())));
  std::map<std::string, std::string> kv{
      {"devices", std::to_string(o.devices)},
      {"compression",
       o.drive.codec.enabled ? "zstd:" + std::to_string(o.drive.codec.zstd_level) : "none"},
      {"flashalloc", o.drive.flashalloc ? "on" : "off"},
      {"placement", o.volume.placement},
      {"gp", std::to_string(o.volume.gp_threshold)},
      {"gc", o.volume.gc_when == GcTrigger::kFreeSpace ? "free-space" : "gp"},
      {"policy", PolicyName(o.scheduler.policy)},
      {"beta", std::to_string(o.scheduler.beta)},
      {"convert_rate", std::to_string(o.scheduler.rate_bytes_per_sec)},
      {"hot_half_life_ms", std::to_string(o.scheduler.hotness.half_life_ms)},
      {"conversion_share", std::to_string(o.scheduler.conversion_share)},
      {"scheme", raid_format::SchemeName(o.volume.scheme)},
      {"io_timeout_ms", std::to_string(o.io_timeout_ms)},
      {"drive_model", o.drive_model.Spec()}};
  if (!o.device_paths.empty()) {
    for (uint32_t i = 0; i < o.devices; ++i) kv["drive." + std::to_string(i)] = o.device_paths[i];
  }
  a->manifest_ = kv;
  a->scheduler_options_ = o.scheduler;
  ERAID_RETURN_IF_ERROR(a->WriteManifestFile());
  a->lifetime_base_.since_unix = UnixNow();
  a->lifetime_base_.opens = 1;
  ERAID_RETURN_IF_ERROR(a->SaveLifetime());  // over any left by an array this one replaces
  created.keep = true;
  return a;
}

namespace {
// The lifetime counters: missing (an array from before they existed) or damaged, they
// start again from zero, and `note` says since when and why.
LifetimeCounters LoadLifetime(const std::string& dir, std::string* note) {
  LifetimeCounters base;
  if (auto st = ReadKeyValues(dir, kStatsFile, kStatsMagic); st.ok()) {
    try {
      for (const auto& [name, field] : CounterFields()) base.*field = std::stoull(st->at(name));
      base.since_unix = std::stoull(st->at("since_unix"));
      base.opens = std::stoull(st->at("opens"));
    } catch (...) {
      base = LifetimeCounters{};
      *note = dir + "/" + kStatsFile + ": a field is missing or bad; counting again from now";
    }
  } else {
    *note = st.status().code() == StatusCode::kNotFound
                ? std::string("no lifetime counters before this open (") + kStatsFile + " missing)"
                : st.status().message() + "; counting again from now";
  }
  if (base.since_unix == 0) base.since_unix = UnixNow();
  ++base.opens;
  return base;
}

// What a manifest says the drives, the volume and the scheduler are.
struct ManifestOptions {
  uint32_t devices = 0;
  DriveOptions drive;
  VolumeOptions volume;
  SchedulerOptions scheduler;  // its defaults where a manifest from before it says nothing
};

Result<SchedulerOptions> SchedulerOptionsOf(std::map<std::string, std::string>& kv,
                                            const std::string& where) {
  SchedulerOptions so;
  if (kv.count("policy")) {
    auto p = ParsePolicy(kv["policy"]);
    if (!p.ok()) return Status::Corruption(where + ": " + p.status().message());
    so.policy = *p;
  }
  try {
    if (kv.count("beta")) so.beta = std::stod(kv["beta"]);
    if (kv.count("convert_rate")) so.rate_bytes_per_sec = std::stoull(kv["convert_rate"]);
    if (kv.count("hot_half_life_ms")) so.hotness.half_life_ms = std::stoull(kv["hot_half_life_ms"]);
    if (kv.count("conversion_share")) so.conversion_share = std::stod(kv["conversion_share"]);
  } catch (...) {
    return Status::Corruption(where +
                              ": bad beta, convert_rate, hot_half_life_ms or conversion_share");
  }
  if (!(so.conversion_share >= 0 && so.conversion_share <= 1))
    return Status::Corruption(where + ": conversion_share is not 0..1");
  if (so.hotness.half_life_ms == 0) return Status::Corruption(where + ": hot_half_life_ms is 0");
  return so;
}

Result<ManifestOptions> ManifestOptionsOf(std::map<std::string, std::string>& kv,
                                          const std::string& dir) {
  const std::string where = dir + "/" + kManifest;
  for (const char* key : {"devices", "compression", "flashalloc", "placement", "gp", "scheme"}) {
    if (!kv.count(key)) return Status::Corruption(where + ": no " + key);
  }
  ManifestOptions o;
  double gp = 0;
  try {
    o.devices = static_cast<uint32_t>(std::stoul(kv["devices"]));
    gp = std::stod(kv["gp"]);
  } catch (...) {
    return Status::Corruption(where + ": bad devices or gp");
  }
  if (o.devices < kMinDevices || o.devices > kMaxDevices)
    return Status::Corruption("manifest: bad device count");
  ERAID_ASSIGN_OR_RETURN(o.drive.codec, ParseCodecConfig(kv["compression"]));
  o.drive.flashalloc = kv["flashalloc"] != "off";
  SetServingDriveOptions(&o.drive);
  o.volume.placement = kv["placement"];
  // Absent in manifests written before the key existed: those volumes collected by GP.
  if (kv.count("gc") && kv["gc"] != "free-space" && kv["gc"] != "gp") {
    return Status::Corruption(where + ": gc must be free-space or gp");
  }
  o.volume.gc_when = kv.count("gc") && kv["gc"] == "free-space" ? GcTrigger::kFreeSpace
                                                                : GcTrigger::kGarbageProportion;
  o.volume.gp_threshold = gp;
  o.volume.scheme = kv["scheme"] == "raid10" ? SegmentScheme::kRaid10 : SegmentScheme::kRaid5;
  ERAID_ASSIGN_OR_RETURN(o.scheduler, SchedulerOptionsOf(kv, where));
  return o;
}
}  // namespace

Result<std::unique_ptr<ArrayDir>> ArrayDir::Open(const std::string& dir) {
  ERAID_ASSIGN_OR_RETURN(auto kv, ReadManifest(dir));
  std::string counters_note;
  const LifetimeCounters base = LoadLifetime(dir, &counters_note);
  ERAID_ASSIGN_OR_RETURN(const ManifestOptions o, ManifestOptionsOf(kv, dir));
  auto a = std::unique_ptr<ArrayDir>(new ArrayDir());
  a->dir_ = dir;
  ERAID_RETURN_IF_ERROR(a->Lock());
  a->manifest_ = kv;
  a->lifetime_base_ = base;
  a->counters_note_ = counters_note;
  a->scheduler_options_ = o.scheduler;
  a->drive_options_ = o.drive;
  ERAID_ASSIGN_OR_RETURN(a->io_timeout_ms_, ParseTimeoutMs(kv, dir + "/" + kManifest));
  ERAID_ASSIGN_OR_RETURN(a->drive_model_, ParseDriveModel(kv, dir + "/" + kManifest));
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const Clock::time_point t_open = Clock::now();
  for (uint32_t i = 0; i < o.devices; ++i) {
    auto p = kv.find("drive." + std::to_string(i));
    a->paths_.push_back(p == kv.end() ? DrivePath(dir, i) : p->second);
  }
  ERAID_RETURN_IF_ERROR(a->OpenDrives(o.drive));
  std::vector<Backend*> devs;
  for (uint32_t i = 0; i < o.devices; ++i)
    devs.push_back(a->drives_[i] ? DeviceOf(*a->drives_[i], a->timing_[i].get())
                                 : a->files_[i].get());
  a->open_times_.drives_seconds = since(t_open);
  for (const auto& d : a->drives_)
    if (d && d->opened_after_crash()) ++a->open_times_.crashed_drives;
  const Clock::time_point t_array = Clock::now();
  ERAID_ASSIGN_OR_RETURN(a->array_, ElasticArray::Open(devs));
  a->array_->set_row_codec(o.drive.codec);
  a->array_->StartRowWriter();
  a->open_times_.array_seconds = since(t_array);
  const Clock::time_point t_volume = Clock::now();
  ERAID_ASSIGN_OR_RETURN(a->volume_, LogVolume::Open(*a->array_, ServingVolumeOptions(o.volume)));
  a->open_times_.volume_seconds = since(t_volume);
  // An array from before named volumes has no table: its volume is the default one.
  auto table = LoadVolumes(dir);
  if (!table.ok() && table.status().code() != StatusCode::kNotFound) return table.status();
  ERAID_RETURN_IF_ERROR(a->OpenVolumes(
      table.ok() ? *table : NamedVolumes::DefaultTable(a->volume_->capacity_blocks())));
  a->open_times_.total_seconds = since(t_open);
  // Recovery's working sets (the summaries' tags, the blocks found per segment, the
  // drives' checkpoint payloads) are freed by now, but the heap keeps their pages: give
  // them back, so a restarted server holds what a fresh one would for the same data.
  ::malloc_trim(0);
  a->ReadThroughMappings();
  return a;
}

Status ArrayDir::OpenDrives(const DriveOptions& drive) {
  const auto devices = static_cast<uint32_t>(paths_.size());
  files_.resize(devices);
  drives_.resize(devices);
  timing_.resize(devices);
  std::vector<Status> opened(devices);
  std::vector<std::thread> openers;
  for (uint32_t i = 0; i < devices; ++i) {
    openers.emplace_back([&, i] {
      const std::string& path = paths_[i];
      auto file = OpenFlash(path, 0, io_timeout_ms_);
      if (!file.ok() && NbdBackend::IsUri(path) && file.status().code() == StatusCode::kIoError) {
        // A drive host that is down: the array opens without it (if it can do without).
        files_[i] = std::make_unique<UnreachableBackend>(path, file.status().message());
        return;
      }
      if (!file.ok()) {
        opened[i] = file.status();
        return;
      }
      // The open reads its checkpoints and summaries on the ring (see FileBackend).
      if (auto* f = dynamic_cast<FileBackend*>(file->get())) f->set_reads_through_mapping(false);
      DriveOptions options = drive;
      Backend& flash = TimedFlashOf(drive_model_, **file, &timing_[i], &options);
      auto d = CompressedDrive::Open(flash, options);
      if (!d.ok()) {
        timing_[i].reset();
        opened[i] = d.status().WithContext(path);
        return;
      }
      files_[i] = std::move(*file);
      drives_[i] = std::move(*d);
    });
  }
  for (auto& t : openers) t.join();
  for (const Status& s : opened) ERAID_RETURN_IF_ERROR(s);
  return Status::Ok();
}

void ArrayDir::ReadThroughMappings() {
  // Serving reads through the mappings again. (The pages an open read through them,
  // before it read on the ring, were ~110 MiB for four 16 GiB drives with 4 GiB written:
  // should any have been, they are let go.)
  for (const auto& f : files_) {
    if (auto* file = dynamic_cast<FileBackend*>(f.get())) {
      file->ReleaseMappedPages();
      file->set_reads_through_mapping(true);
    }
  }
}

std::vector<std::optional<NbdLinkStats>> ArrayDir::links() const {
  std::shared_lock lock(devices_mu_);
  std::vector<std::optional<NbdLinkStats>> v;
  for (const auto& f : files_) {
    if (const auto* nbd = dynamic_cast<const NbdBackend*>(f.get())) {
      v.push_back(nbd->link_stats());
    } else if (const auto* gone = dynamic_cast<const UnreachableBackend*>(f.get())) {
      v.push_back(gone->link_stats());
    } else {
      v.push_back(std::nullopt);
    }
  }
  return v;
}

// The I/O timeout's bounds, for every way of setting it.
Status ArrayDir::Probe(const std::string& dir) {
  ERAID_ASSIGN_OR_RETURN(auto kv, ReadManifest(dir));
  (void)kv;
  const std::string lock_path = dir + "/eraid.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("cannot open " + lock_path + ": " + std::strerror(errno));
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);  // and with it the lock, if taken
  return free ? Status::Ok() : Status::Busy("the array in " + dir + " is in use");
}

static Status CheckIoTimeout(uint32_t timeout_ms) {
  if (timeout_ms == 0 || timeout_ms > 86400000u) {
    return Status::InvalidArgument("--io-timeout must be more than 0 and at most a day");
  }
  return Status::Ok();
}

namespace {
// Sets one manifest key of a stopped array.
Status SetStoppedManifestKey(const std::string& dir, const std::string& key,
                             const std::string& value) {
  // Held like an open: not while a server has the array (it reads the manifest at open).
  const std::string lock_path = dir + "/eraid.lock";
  ERAID_ASSIGN_OR_RETURN(auto kv, ReadManifest(dir));
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError("cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return Status::Busy("the array in " + dir + " is in use (stop the server, then set it)");
  }
  kv[key] = value;
  Status s = WriteManifest(dir, kv);
  ::close(fd);
  return s;
}
}  // namespace

Status SetIoTimeout(const std::string& dir, uint32_t timeout_ms) {
  ERAID_RETURN_IF_ERROR(CheckIoTimeout(timeout_ms));
  return SetStoppedManifestKey(dir, "io_timeout_ms", std::to_string(timeout_ms));
}

Status SetDriveModel(const std::string& dir, const DriveProfile& profile) {
  return SetStoppedManifestKey(dir, "drive_model", profile.Spec());
}

Status ArrayDir::SetIoTimeout(uint32_t timeout_ms) {
  ERAID_RETURN_IF_ERROR(CheckIoTimeout(timeout_ms));
  {
    std::lock_guard lock(manifest_mu_);
    auto kv = manifest_;
    kv["io_timeout_ms"] = std::to_string(timeout_ms);
    ERAID_RETURN_IF_ERROR(WriteManifest(dir_, kv));
    manifest_ = std::move(kv);
  }
  io_timeout_ms_.store(timeout_ms, std::memory_order_relaxed);
  std::shared_lock lock(devices_mu_);
  for (const auto& f : files_) {
    if (auto* nbd = dynamic_cast<NbdBackend*>(f.get()))
      ERAID_RETURN_IF_ERROR(nbd->SetTimeout(timeout_ms));
  }
  return Status::Ok();
}

PhysicalUse ArrayDir::Physical() const {
  std::shared_lock lock(devices_mu_);
  return DrivesPhysicalUse(drives_);
}

std::vector<DriveStats> ArrayDir::drive_stats() const {
  std::shared_lock lock(devices_mu_);
  std::vector<DriveStats> v;
  for (const auto& d : drives_) v.push_back(d ? d->stats() : DriveStats{});
  return v;
}

std::vector<DriveModelStats> ArrayDir::drive_model_stats() const {
  std::shared_lock lock(devices_mu_);
  std::vector<DriveModelStats> v;
  for (const auto& t : timing_) v.push_back(t ? t->model().stats() : DriveModelStats{});
  return v;
}

Status ArrayDir::OpenVolumes(std::vector<VolumeRecord> table) {
  volumes_ = std::make_unique<NamedVolumes>(
      *volume_, std::move(table),
      [dir = dir_](const std::vector<VolumeRecord>& t) { return SaveVolumes(dir, t); });
  return SaveVolumes(dir_, volumes_->Table());
}

void ArrayDir::StartServing() {
  if (scheduler_) return;
  scheduler_ = std::make_unique<Scheduler>(
      *array_, *volume_, [this] { return Physical(); }, scheduler_options_);
  scheduler_->Start();
  saver_ = std::thread([this] {
    NameThisThread("eraid-stats");
    std::unique_lock lock(saver_mu_);
    while (!saver_cv_.wait_for(lock, kStatsSaveEvery, [this] { return saver_stop_; })) {
      lock.unlock();
      (void)SaveLifetime();  // a failed save loses at most the counts since the last one
      lock.lock();
    }
  });
}

LifetimeCounters ArrayDir::Lifetime() const {
  LifetimeCounters c = lifetime_base_;
  const EngineStats es = volume_->stats().engine;
  c.user_written_bytes += BlocksToBytes(es.user_blocks);
  c.gc_written_bytes += BlocksToBytes(es.gc_blocks);
  c.trimmed_bytes += BlocksToBytes(es.trimmed_blocks);
  std::shared_lock lock(devices_mu_);
  DriveStats sum = replaced_;
  for (const auto& d : drives_) {
    if (d) sum.Add(d->stats());
  }
  c.raid_written_bytes += sum.host_write_bytes;
  c.device_stored_bytes += sum.host_stored_bytes;
  c.flash_written_bytes += sum.flash_write_bytes;
  return c;
}

Status ArrayDir::SaveLifetime() const {
  const LifetimeCounters c = Lifetime();
  std::map<std::string, std::string> kv;
  ForEachCounter(c, [&](const char* name, uint64_t v) { kv[name] = std::to_string(v); });
  kv["since_unix"] = std::to_string(c.since_unix);
  kv["opens"] = std::to_string(c.opens);
  std::lock_guard lock(save_mu_);
  return WriteKeyValues(dir_, kStatsFile, kStatsMagic, kv);
}

void ArrayDir::StopSaver() {
  {
    std::lock_guard lock(saver_mu_);
    saver_stop_ = true;
  }
  saver_cv_.notify_all();
  if (saver_.joinable()) saver_.join();
}

Status ArrayDir::Close() {
  StopSaver();
  scheduler_.reset();  // stops its workers; a conversion in progress completes
  if (volume_) ERAID_RETURN_IF_ERROR(volume_->Flush());
  if (array_) ERAID_RETURN_IF_ERROR(array_->RecordOpenFrontiers());
  for (auto& d : drives_) {
    if (d) ERAID_RETURN_IF_ERROR(d->Close());
  }
  return volume_ ? SaveLifetime() : Status::Ok();
}

ArrayDir::~ArrayDir() {
  StopSaver();
  scheduler_.reset();
  volumes_.reset();
  volume_.reset();
  array_.reset();
  drives_.clear();
  timing_.clear();
  files_.clear();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status ArrayDir::Lock() {
  const std::string path = dir_ + "/eraid.lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::Busy("the array in " + dir_ +
                        " is in use by another process (is it being served?)");
  }
  return Status::Ok();
}

Status ArrayDir::WriteManifestFile() const { return WriteManifest(dir_, manifest_); }

}  // namespace eraid
