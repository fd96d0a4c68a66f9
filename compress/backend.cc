#include "compress/backend.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "common/check.h"

namespace eraid {

Status Backend::FlashAlloc(Lba, uint64_t) {
  return Status::NotSupported("FlashAlloc is not supported by " + name());
}

std::optional<RangeUsage> Backend::Usage(Lba, uint64_t) const { return std::nullopt; }

Status Backend::CheckExtent(Lba lba, uint64_t size_bytes) const {
  if (size_bytes == 0 || !IsBlockAligned(size_bytes)) {
    return Status::InvalidArgument("length " + std::to_string(size_bytes) +
                                   " is not a positive multiple of 4096");
  }
  return CheckRange(lba, BytesToBlocks(size_bytes));
}

Status Backend::CheckRange(Lba lba, uint64_t count_blocks) const {
  if (count_blocks == 0) return Status::InvalidArgument("empty extent");
  if (lba.value >= capacity_blocks() || count_blocks > capacity_blocks() - lba.value) {
    return Status::InvalidArgument("extent [" + std::to_string(lba.value) + ", +" +
                                   std::to_string(count_blocks) + ") beyond capacity " +
                                   std::to_string(capacity_blocks()) + " blocks");
  }
  return Status::Ok();
}

namespace {
// Runs one asynchronous operation to completion on this thread.
template <typename SubmitFn>
Status RunSync(Backend& b, SubmitFn submit) {
  auto state = std::make_shared<std::pair<std::atomic<bool>, Status>>();
  state->first = false;
  submit([state](Status s) {
    state->second = std::move(s);
    state->first.store(true, std::memory_order_release);
  });
  while (!state->first.load(std::memory_order_acquire)) b.Poll(true);
  return state->second;
}
}  // namespace

Status Backend::Read(Lba lba, std::span<std::byte> buf) {
  return RunSync(*this, [&](IoCallback cb) { SubmitRead(lba, buf, std::move(cb)); });
}
Status Backend::ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) {
  if (out.empty()) return Status::Ok();
  const uint64_t first = offset_bytes / kBlockSize,
                 last = (offset_bytes + out.size() - 1) / kBlockSize;
  thread_local std::vector<std::byte> pages;
  pages.resize(BlocksToBytes(last - first + 1));
  ERAID_RETURN_IF_ERROR(Read(Lba(first), pages));
  std::memcpy(out.data(), pages.data() + offset_bytes % kBlockSize, out.size());
  return Status::Ok();
}
void Backend::SubmitReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                             std::span<Status> results, IoCallback done) {
  ERAID_CHECK(results.size() == blocks.size() && out.size() >= BlocksToBytes(blocks.size()));
  if (blocks.empty()) {
    done(Status::Ok());
    return;
  }
  // The last block's completion, on whichever thread polls it, runs `done`.
  struct Batch {
    std::atomic<size_t> left;
    IoCallback done;
  };
  auto batch = std::make_shared<Batch>();
  batch->left.store(blocks.size(), std::memory_order_relaxed);
  batch->done = std::move(done);
  for (size_t i = 0; i < blocks.size(); ++i) {
    SubmitRead(blocks[i], out.subspan(BlocksToBytes(i), kBlockSize),
               [batch, result = &results[i]](Status s) {
                 *result = std::move(s);
                 if (batch->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
                   batch->done(Status::Ok());
               });
  }
}
void Backend::ReadMany(std::span<const Lba> blocks, std::span<std::byte> out,
                       std::span<Status> results) {
  // Always Ok: each block's outcome is in `results`.
  ERAID_CHECK(results.size() == blocks.size() && out.size() >= BlocksToBytes(blocks.size()));
  (void)RunSync(*this, [&](IoCallback cb) { SubmitReadMany(blocks, out, results, std::move(cb)); });
}
void Backend::ReadBytesMany(std::span<const ByteExtent> extents,
                            std::span<const std::span<std::byte>> out, std::span<Status> results) {
  ERAID_CHECK(out.size() == extents.size() && results.size() == extents.size());
  for (size_t i = 0; i < extents.size(); ++i) results[i] = ReadBytes(extents[i].offset, out[i]);
}
Status Backend::Write(Lba lba, std::span<const std::byte> buf) {
  return RunSync(*this, [&](IoCallback cb) { SubmitWrite(lba, buf, std::move(cb)); });
}
void Backend::ReadStoredMany(std::span<const Lba> blocks, std::span<std::byte> out,
                             std::span<StoredBlock> stored, std::span<Status> results) {
  ERAID_CHECK(stored.size() == blocks.size());
  for (StoredBlock& b : stored) b.bytes.clear();
  ReadMany(blocks, out, results);
}
Status Backend::ReadStored(Lba lba, std::span<std::byte> out, StoredBlock* stored) {
  if (out.size() != kBlockSize) {
    stored->bytes.clear();
    return Status::InvalidArgument("ReadStored takes one block");
  }
  Status result;
  ReadStoredMany(std::span(&lba, 1), out, std::span(stored, 1), std::span(&result, 1));
  return result;
}
Status Backend::WriteStored(Lba lba, std::span<const std::byte> data,
                            std::span<const StoredBlock>) {
  return Write(lba, data);
}
Status Backend::Trim(Lba lba, uint64_t count_blocks) {
  return RunSync(*this, [&](IoCallback cb) { SubmitTrim(lba, count_blocks, std::move(cb)); });
}
Status Backend::Flush() {
  return RunSync(*this, [&](IoCallback cb) { SubmitFlush(std::move(cb)); });
}

}  // namespace eraid
