#include "compress/timed_backend.h"

#include <algorithm>
#include <mutex>

#include "common/check.h"

namespace eraid {

namespace {
// A TimedDrive read under way on this thread: the flash reads below it add their ready
// times here instead of sleeping (see timed_backend.h).
struct DeferredWait {
  bool active = false;
  uint64_t until = 0;
};
thread_local DeferredWait t_deferred;

// Leaves the wait until `ready` to the TimedDrive read this thread is inside, if it is
// inside one: true then.
bool Defer(uint64_t ready) {
  if (!t_deferred.active) return false;
  t_deferred.until = std::max(t_deferred.until, ready);
  return true;
}
// Sleeps until `ready`, or leaves it to the TimedDrive read this thread is inside.
void WaitOrDefer(const DriveModel& model, uint64_t ready) {
  if (!Defer(ready)) model.WaitUntil(ready);
}

// TimedDrive's side: collects the flash part's ready time of the reads made in scope.
class DeferScope {
 public:
  DeferScope() : outer_(t_deferred) { t_deferred = {true, 0}; }
  ~DeferScope() { t_deferred = outer_; }
  uint64_t until() const { return t_deferred.until; }

 private:
  const DeferredWait outer_;
};
}  // namespace

TimedLayer::TimedLayer(Backend& inner, DriveModel& model)
    : inner_(inner), model_(model), held_(model.clock()) {}

IoCallback TimedLayer::HoldUntil(uint64_t ready_ns, IoCallback done) {
  return [this, ready_ns, done = std::move(done)](Status s) mutable {
    held_.Push(std::move(done), std::move(s), ready_ns);
  };
}

void TimedLayer::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  inner_.SubmitTrim(lba, count_blocks, HoldUntil(0, std::move(done)));
}

size_t TimedLayer::Poll(bool wait) {
  for (;;) {
    inner_.Poll(false);  // what the inner device finished moves into held_
    const size_t n = held_.Poll(false);
    if (n > 0 || !wait) return n;
    if (held_.size() > 0) return held_.Poll(true);  // sleeps until the first is due
    if (inner_.in_flight() == 0) return 0;
    inner_.Poll(true);
  }
}

Status TimedLayer::FlashAlloc(Lba lba, uint64_t count_blocks) {
  return inner_.FlashAlloc(lba, count_blocks);
}

std::optional<RangeUsage> TimedLayer::Usage(Lba lba, uint64_t count_blocks) const {
  return inner_.Usage(lba, count_blocks);
}

// ---- TimedFlash ----

void TimedFlash::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  const uint64_t ready = model_.FlashRead(BlocksToBytes(lba.value), buf.size());
  inner_.SubmitRead(lba, buf, HoldUntil(ready, std::move(done)));
}

void TimedFlash::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  const uint64_t ready = model_.FlashWrite(BlocksToBytes(lba.value), buf.size());
  inner_.SubmitWrite(lba, buf, HoldUntil(ready, std::move(done)));
}

void TimedFlash::SubmitFlush(IoCallback done) {
  // Asked before the inner flush: it covers the programs of every write submitted so far.
  const uint64_t ready = model_.FlashFlush();
  inner_.SubmitFlush(HoldUntil(ready, std::move(done)));
}

Status TimedFlash::Read(Lba lba, std::span<std::byte> buf) {
  const uint64_t ready = model_.FlashRead(BlocksToBytes(lba.value), buf.size());
  Status s = inner_.Read(lba, buf);
  WaitOrDefer(model_, ready);
  return s;
}

Status TimedFlash::ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) {
  const uint64_t ready = model_.FlashRead(offset_bytes, out.size());
  Status s = inner_.ReadBytes(offset_bytes, out);
  WaitOrDefer(model_, ready);
  return s;
}

void TimedFlash::SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                                std::span<Status> results, IoCallback done) {
  ERAID_CHECK(results.size() == blocks.size() && out.size() >= BlocksToBytes(blocks.size()));
  std::vector<ByteExtent> extents(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    extents[i] = {BlocksToBytes(blocks[i].value), kBlockSize};
  const uint64_t ready = model_.FlashReadMany(extents);
  inner_.ReadMany(blocks, out, results);
  if (Defer(ready)) {  // inside a TimedDrive read: its wait, not this one's
    done(Status::Ok());
  } else {
    held_.Push(std::move(done), Status::Ok(), ready);
  }
}

void TimedFlash::ReadBytesMany(std::span<const ByteExtent> extents,
                               std::span<const std::span<std::byte>> out,
                               std::span<Status> results) {
  const uint64_t ready = model_.FlashReadMany(extents);
  inner_.ReadBytesMany(extents, out, results);
  WaitOrDefer(model_, ready);
}

// ---- TimedDrive ----

void TimedDrive::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  // The drive reads inside Submit; its flash part's wait is deferred (not slept) and the
  // completion held until the host part after it is done, so that reads submitted to
  // several drives wait together. Whichever comes second — the inner completion (run by
  // any thread's Poll) or this thread learning the flash part's time — holds it.
  struct Read {
    std::mutex mu;
    bool have_flash = false, have_status = false;
    uint64_t flash_done = 0;
    Status status;
    IoCallback done;
  };
  auto r = std::make_shared<Read>();
  r->done = std::move(done);
  const uint64_t submitted = model_.clock().NowNanos();
  const uint64_t bytes = buf.size();
  auto hold = [this, r, submitted, bytes] {  // REQUIRES: r->mu held, both halves known
    held_.Push(std::move(r->done), std::move(r->status),
               model_.HostRead(bytes, true, submitted, r->flash_done));
  };
  {
    DeferScope flash;
    inner_.SubmitRead(lba, buf, [r, hold](Status s) {
      std::lock_guard lock(r->mu);
      r->status = std::move(s);
      r->have_status = true;
      if (r->have_flash) hold();
    });
    std::lock_guard lock(r->mu);
    r->flash_done = flash.until();
    r->have_flash = true;
    if (r->have_status) hold();
  }
}

void TimedDrive::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  const uint64_t ready = model_.HostWrite(buf.size(), /*engine=*/true);
  inner_.SubmitWrite(lba, buf, HoldUntil(ready, std::move(done)));
}

void TimedDrive::SubmitWritePacked(Lba lba, std::span<const std::byte> buf,
                                   std::shared_ptr<const PackedBlocks> packed, uint32_t first,
                                   IoCallback done) {
  // The host compressed these already (once for both copies of a mirror): an emulation
  // shortcut. A real drive compresses each copy in its engine, so the model charges it.
  const uint64_t ready = model_.HostWrite(buf.size(), /*engine=*/true);
  inner_.SubmitWritePacked(lba, buf, std::move(packed), first, HoldUntil(ready, std::move(done)));
}

void TimedDrive::SubmitFlush(IoCallback done) {
  inner_.SubmitFlush(HoldUntil(0, std::move(done)));  // TimedFlash below waits for NAND
}

Status TimedDrive::Read(Lba lba, std::span<std::byte> buf) {
  const uint64_t submitted = model_.clock().NowNanos();
  DeferScope flash;
  Status s = inner_.Read(lba, buf);
  model_.WaitUntil(model_.HostRead(buf.size(), true, submitted, flash.until()));
  return s;
}

void TimedDrive::SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                                std::span<Status> results, IoCallback done) {
  // As SubmitRead: the drive reads now, at the CPU's pace, and the completion is held
  // until the modeled time, so that batches submitted to several drives wait together.
  const uint64_t submitted = model_.clock().NowNanos();
  uint64_t flash_done = 0;
  {
    DeferScope flash;
    inner_.ReadMany(blocks, out, results);
    flash_done = flash.until();
  }
  held_.Push(std::move(done), Status::Ok(),
             model_.HostRead(BlocksToBytes(blocks.size()), true, submitted, flash_done));
}

void TimedDrive::ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                                std::span<StoredBlock> stored, std::span<Status> results) {
  const uint64_t submitted = model_.clock().NowNanos();
  DeferScope flash;
  inner_.ReadStoredMany(blocks, out, stored, results);
  model_.WaitUntil(
      model_.HostRead(BlocksToBytes(blocks.size()), /*engine=*/false, submitted, flash.until()));
}

Status TimedDrive::WriteStored(Lba lba, std::span<const std::byte> data,
                               std::span<const StoredBlock> stored) {
  const uint64_t ready = model_.HostWrite(data.size(), /*engine=*/false);
  Status s = inner_.WriteStored(lba, data, stored);
  model_.WaitUntil(ready);
  return s;
}

// ---- DriveTiming ----

std::unique_ptr<DriveTiming> DriveTiming::Make(const DriveProfile& profile, Backend& flash,
                                               const Clock& clock) {
  auto t = std::unique_ptr<DriveTiming>(new DriveTiming());
  t->model_ = std::make_unique<DriveModel>(profile, clock);
  t->flash_ = std::make_unique<TimedFlash>(flash, *t->model_);
  return t;
}

Backend& DriveTiming::Attach(Backend& drive) {
  host_ = std::make_unique<TimedDrive>(drive, *model_);
  return *host_;
}

}  // namespace eraid
