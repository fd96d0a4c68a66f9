// Drives replaced (rebuilt onto a new file, device or export) and re-added (the same
// drive back after an outage, resynced): the array directory's side — opening the new
// flash, waiting out a remote drive's late writes, swapping the objects and the manifest.
#include <filesystem>

#include "tools/server/array_dir_internal.h"

namespace eraid {

using namespace array_dir_internal;  // NOLINT: the directory's own helpers

Status ArrayDir::Replace(DeviceIndex id, const std::string& with, uint64_t rate_bytes_per_sec,
                         const std::function<void(const RebuildProgress&)>& progress) {
  const uint32_t d = id.value;
  std::lock_guard lock(replace_mu_);
  if (d >= drives_.size()) return Status::InvalidArgument("no device " + std::to_string(d));
  // A remote drive is rebuilt in place onto its own export only when asked (`--with` the
  // same URI); without --with, a local drive goes to a new file renamed over its own.
  if (with.empty() && NbdBackend::IsUri(paths_[d])) {
    return Status::InvalidArgument("drive " + std::to_string(d) +
                                   " is remote: give --with URI (or a path)");
  }
  const bool in_place = with.empty();
  const std::string target = in_place ? paths_[d] + ".new" : with;
  const bool remote = NbdBackend::IsUri(target);
  if (!in_place && !remote && std::filesystem::exists(target) &&
      !std::filesystem::is_block_file(target)) {
    return Status::InvalidArgument(target + " exists; give a new file or a block device");
  }
  uint64_t size = BlocksToBytes(files_[d]->capacity_blocks());
  for (size_t k = 0; size == 0 && k < files_.size(); ++k)
    size = BlocksToBytes(files_[k]->capacity_blocks());  // never reached
  if (!NbdBackend::IsUri(paths_[d]) && !std::filesystem::is_block_file(paths_[d])) {
    std::error_code ec;
    const uint64_t file_size = std::filesystem::file_size(paths_[d], ec);
    if (!ec) size = file_size;
  }
  if (target == paths_[d])
    ERAID_RETURN_IF_ERROR(WaitForLateWrites(d, "rebuilt onto its own export"));
  ERAID_ASSIGN_OR_RETURN(auto file, OpenFlash(target, remote ? 0 : size, io_timeout_ms_));
  // The geometry of the drive it replaces (or, for one that was never reached, of the others).
  const CompressedDrive* like = drives_[d].get();
  for (size_t k = 0; like == nullptr && k < drives_.size(); ++k) like = drives_[k].get();
  DriveOptions format = drive_options_;
  format.erase_unit_blocks = like->erase_unit_blocks();
  format.expansion = like->expansion();
  std::unique_ptr<DriveTiming> timing;
  Backend& flash = TimedFlashOf(drive_model_, *file, &timing, &format);
  ERAID_ASSIGN_OR_RETURN(auto drive, CompressedDrive::Format(flash, format));
  ERAID_RETURN_IF_ERROR(
      array_->Replace(id, DeviceOf(*drive, timing.get()), rate_bytes_per_sec, progress));
  ERAID_RETURN_IF_ERROR(drive->Flush());
  // The array no longer touches the old drive: swap the objects, then the files.
  std::unique_lock lock_devices(devices_mu_);
  // The old drive's counters stay in the array's lifetime figures.
  if (drives_[d]) replaced_.Add(drives_[d]->stats());
  std::swap(drives_[d], drive);
  std::swap(timing_[d], timing);
  std::swap(files_[d], file);
  drive.reset();
  timing.reset();
  file.reset();
  if (in_place) {
    std::error_code ec;
    std::filesystem::rename(target, paths_[d], ec);
    if (ec)
      return Status::IoError("rebuilt onto " + target + " but cannot rename it: " + ec.message());
  } else {
    paths_[d] = target;
    std::lock_guard lock_manifest(manifest_mu_);
    manifest_["drive." + std::to_string(d)] = target;
    ERAID_RETURN_IF_ERROR(WriteManifestFile());
  }
  return Status::Ok();
}

Status ArrayDir::WaitForLateWrites(uint32_t d, const std::string& what) {
  // Writes the old connection abandoned at the failure may still be carried out by the
  // host (a hung one that resumes, a cut link restored): nothing may be written to the
  // export until they can no longer land, or one could overwrite newer data.
  auto* nbd = dynamic_cast<NbdBackend*>(files_[d].get());
  if (nbd == nullptr) return Status::Ok();
  Status s = nbd->WaitDrained(io_timeout_ms_);
  if (s.ok()) return s;
  return Status::Busy("device " + std::to_string(d) + " cannot be " + what +
                      " yet: " + s.message() +
                      "; try again once the host answers, or replace it onto another export");
}

Result<ReAddReport> ArrayDir::ReAdd(DeviceIndex id, uint64_t rate_bytes_per_sec,
                                    const std::function<void(const RebuildProgress&)>& progress) {
  const uint32_t d = id.value;
  std::lock_guard lock(replace_mu_);
  if (d >= drives_.size()) return Status::InvalidArgument("no device " + std::to_string(d));
  if (array_->stats().devices[d].state != DeviceState::kFailed) {
    return Status::InvalidArgument("device " + std::to_string(d) +
                                   " is not failed: nothing to re-add");
  }
  ERAID_RETURN_IF_ERROR(WaitForLateWrites(d, "re-added"));
  // A new connection (or file handle), and the drive recovered from its flash as after a
  // crash: the old objects are those of a failed device and stay until the swap.
  ERAID_ASSIGN_OR_RETURN(auto file, OpenFlash(paths_[d], 0, io_timeout_ms_));
  std::unique_ptr<DriveTiming> timing;
  DriveOptions options = drive_options_;
  Backend& flash = TimedFlashOf(drive_model_, *file, &timing, &options);
  auto drive = CompressedDrive::Open(flash, options);
  if (!drive.ok()) {
    return Status::InvalidArgument("device " + std::to_string(d) + " came back unreadable (" +
                                   drive.status().ToString() + "): use replace");
  }
  ERAID_ASSIGN_OR_RETURN(ReAddReport report, array_->ReAdd(id, DeviceOf(**drive, timing.get()),
                                                           rate_bytes_per_sec, progress));
  ERAID_RETURN_IF_ERROR((*drive)->Flush());
  std::unique_lock lock_devices(devices_mu_);
  std::unique_ptr<CompressedDrive> old_drive = std::move(*drive);
  std::swap(drives_[d], old_drive);
  std::swap(timing_[d], timing);
  std::swap(files_[d], file);
  old_drive.reset();
  timing.reset();
  file.reset();
  return report;
}

}  // namespace eraid
