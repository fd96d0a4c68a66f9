// The timing model's two layers around an emulated drive (DriveModel, drive_model.h):
//
//   host (the array) -> TimedDrive -> CompressedDrive -> TimedFlash -> flash (file, RAM, NBD)
//
//   - TimedFlash, under the drive, charges the NAND: a read of the drive's records waits
//     for its units and channels, a page write completes when the write buffer takes it
//     (its program runs on after), a flush waits for the programs (unless the buffer is
//     power-loss protected). The drive's own GC reads and programs pass here too, and
//     its erases reach the model through DriveOptions::timing.
//   - TimedDrive, over the drive, charges the host side: the controller's command, the
//     link, and the compression engine (a computational drive compresses in hardware).
//
// Each layer does the real I/O first, at the CPU's pace, and then releases the operation
// at its modeled time: a synchronous call sleeps until then; an asynchronous one's
// callback is held in a CompletionQueue with that ready time and delivered by the Poll()
// that finds it due (a poller with nothing due sleeps until the first is, no busy wait).
// A synchronous read through both layers sleeps once: TimedFlash, called inside
// TimedDrive's read on the same thread, leaves its wait to TimedDrive, which sleeps until
// the host part that follows the flash part is done (one wake-up per read, not two).
// Data, errors and durability are the inner device's: a model changes only when.
//
// Thread-safety: as Backend — every method may be called from several threads.
// Neither layer owns the device it wraps nor the model; all must outlive it.
#pragma once

#include <memory>

#include "compress/backend.h"
#include "compress/completion_queue.h"
#include "compress/drive_model.h"

namespace eraid {

// What both layers share: the inner device, the model, the held completions.
class TimedLayer : public Backend {
 public:
  TimedLayer(Backend& inner, DriveModel& model);

  uint64_t capacity_blocks() const override { return inner_.capacity_blocks(); }
  uint32_t queue_depth() const override { return inner_.queue_depth(); }
  std::string name() const override { return inner_.name(); }
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  size_t Poll(bool wait) override;
  size_t in_flight() const override { return inner_.in_flight() + held_.size(); }
  Status FlashAlloc(Lba lba, uint64_t count_blocks) override;
  std::optional<RangeUsage> Usage(Lba lba, uint64_t count_blocks) const override;
  void Prefetch(std::span<const Lba> blocks) override { inner_.Prefetch(blocks); }
  void PrefetchBytes(std::span<const ByteExtent> extents) override {
    inner_.PrefetchBytes(extents);
  }

  Backend& inner() { return inner_; }
  DriveModel& model() { return model_; }

 protected:
  // A callback for the inner device that holds `done` until `ready_ns`.
  IoCallback HoldUntil(uint64_t ready_ns, IoCallback done);

  Backend& inner_;
  DriveModel& model_;
  CompletionQueue held_;
};

// The NAND side: below a CompressedDrive, over its flash.
class TimedFlash final : public TimedLayer {
 public:
  using TimedLayer::TimedLayer;
  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  Status Read(Lba lba, std::span<std::byte> buf) override;
  Status ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) override;
  void SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<Status> results, IoCallback done) override;
  void ReadBytesMany(std::span<const ByteExtent> extents, std::span<const std::span<std::byte>> out,
                     std::span<Status> results) override;
};

// The host side: over a CompressedDrive, what the array reads and writes.
class TimedDrive final : public TimedLayer {
 public:
  using TimedLayer::TimedLayer;
  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitWritePacked(Lba lba, std::span<const std::byte> buf,
                         std::shared_ptr<const PackedBlocks> packed, uint32_t first,
                         IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  Status Read(Lba lba, std::span<std::byte> buf) override;
  void SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<Status> results, IoCallback done) override;
  // Records copied as they are (a conversion's copy offload): link time, no engine.
  void ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                      std::span<StoredBlock> stored, std::span<Status> results) override;
  Status WriteStored(Lba lba, std::span<const std::byte> data,
                     std::span<const StoredBlock> stored) override;
};

// One modeled drive: its model and both layers. Make() it over the flash, give flash()
// to CompressedDrive::Format/Open (and model() as DriveOptions::timing), then Attach()
// the drive: host() is what the array uses.
class DriveTiming {
 public:
  static std::unique_ptr<DriveTiming> Make(const DriveProfile& profile, Backend& flash,
                                           const Clock& clock = SystemClock::Default());
  Backend& flash() { return *flash_; }
  DriveModel& model() { return *model_; }
  Backend& Attach(Backend& drive);
  Backend* host() { return host_.get(); }

 private:
  std::unique_ptr<DriveModel> model_;
  std::unique_ptr<TimedFlash> flash_;
  std::unique_ptr<TimedDrive> host_;
};

}  // namespace eraid
