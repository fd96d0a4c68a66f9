#include "compress/mem_backend.h"

#include <cstring>

namespace eraid {

MemBackend::MemBackend(uint64_t capacity_blocks, uint32_t queue_depth)
    : capacity_blocks_(capacity_blocks), queue_depth_(queue_depth), blocks_(capacity_blocks) {}

void MemBackend::SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) {
  Status s = CheckExtent(lba, buf.size());
  if (s.ok()) {
    std::lock_guard lock(mu_);
    for (uint64_t i = 0; i < BytesToBlocks(buf.size()); ++i) {
      std::byte* dst = buf.data() + BlocksToBytes(i);
      const Block& b = blocks_[lba.value + i];
      if (b)
        std::memcpy(dst, b.get(), kBlockSize);
      else
        std::memset(dst, 0, kBlockSize);
    }
  }
  completions_.Push(std::move(done), std::move(s));
}

void MemBackend::SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) {
  Status s = CheckExtent(lba, buf.size());
  if (s.ok()) {
    std::lock_guard lock(mu_);
    for (uint64_t i = 0; i < BytesToBlocks(buf.size()); ++i) {
      Block& b = blocks_[lba.value + i];
      if (!b) b = std::make_unique<std::byte[]>(kBlockSize);
      std::memcpy(b.get(), buf.data() + BlocksToBytes(i), kBlockSize);
    }
  }
  completions_.Push(std::move(done), std::move(s));
}

void MemBackend::SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) {
  Status s = CheckRange(lba, count_blocks);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    for (uint64_t i = 0; i < count_blocks; ++i) blocks_[lba.value + i].reset();
  }
  completions_.Push(std::move(done), std::move(s));
}

void MemBackend::SubmitFlush(IoCallback done) { completions_.Push(std::move(done), Status::Ok()); }

uint64_t MemBackend::allocated_blocks() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& b : blocks_) n += b != nullptr;
  return n;
}

}  // namespace eraid
