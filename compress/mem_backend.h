// MemBackend: a device in memory. Blocks are allocated on first write and freed by trim,
// so a large, sparsely used device costs only what is written. Used by every test that
// does not need a real file, and as the "flash" of emulated drives in tests.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "compress/backend.h"
#include "compress/completion_queue.h"

namespace eraid {

class MemBackend final : public Backend {
 public:
  explicit MemBackend(uint64_t capacity_blocks, uint32_t queue_depth = 128);

  uint64_t capacity_blocks() const override { return capacity_blocks_; }
  uint32_t queue_depth() const override { return queue_depth_; }
  std::string name() const override { return "mem"; }

  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  size_t Poll(bool wait) override { return completions_.Poll(wait); }
  size_t in_flight() const override { return completions_.size(); }

  // Blocks currently holding data (not unwritten, not trimmed).
  uint64_t allocated_blocks() const;

 private:
  using Block = std::unique_ptr<std::byte[]>;
  const uint64_t capacity_blocks_;
  const uint32_t queue_depth_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // nullptr: reads as zeros
  CompletionQueue completions_;
};

}  // namespace eraid
