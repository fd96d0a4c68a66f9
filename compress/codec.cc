#include "compress/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>


namespace eraid {

namespace {
struct ZstdContexts {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  int level = INT32_MIN;
  ~ZstdContexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};
ZstdContexts& Contexts() {
  thread_local ZstdContexts contexts;
  return contexts;
}
}  // namespace

Result<CodecConfig> ParseCodecConfig(const std::string& text) {
  CodecConfig config;
  if (text == "none") {
    config.enabled = false;
    return config;
  }
  if (text == "zstd") return config;
  if (text.rfind("zstd:", 0) == 0) {
    std::string level = text.substr(5);
    char* end = nullptr;
    long v = std::strtol(level.c_str(), &end, 10);
    if (level.empty() || *end != '\0' || v < ZSTD_minCLevel() || v > ZSTD_maxCLevel()) {
      return Status::InvalidArgument("zstd level must be an integer in [" +
                                     std::to_string(ZSTD_minCLevel()) + ", " +
                                     std::to_string(ZSTD_maxCLevel()) + "], got '" + level + "'");
    }
    config.zstd_level = static_cast<int>(v);
    return config;
  }
  return Status::InvalidArgument("compression must be 'none', 'zstd' or 'zstd:LEVEL', got '" +
                                 text + "'");
}

Compressed CompressBlock(const CodecConfig& config, const std::byte* in, std::byte* out) {
  if (config.enabled) {
    ZstdContexts& z = Contexts();
    if (z.level != config.zstd_level) {
      ZSTD_CCtx_reset(z.cctx, ZSTD_reset_session_and_parameters);
      ZSTD_CCtx_setParameter(z.cctx, ZSTD_c_compressionLevel, config.zstd_level);
      // Frames carry no checksum or size fields we do not need: the record has a CRC.
      ZSTD_CCtx_setParameter(z.cctx, ZSTD_c_checksumFlag, 0);
      ZSTD_CCtx_setParameter(z.cctx, ZSTD_c_contentSizeFlag, 0);
      ZSTD_CCtx_setParameter(z.cctx, ZSTD_c_dictIDFlag, 0);
      z.level = config.zstd_level;
    }
    size_t n = ZSTD_compress2(z.cctx, out, kBlockSize - 1, in, kBlockSize);
    if (!ZSTD_isError(n) && n < kBlockSize) return {Codec::kZstd, static_cast<uint32_t>(n)};
  }
  std::memcpy(out, in, kBlockSize);
  return {Codec::kRaw, kBlockSize};
}

struct CompressionMemo::Entry {
  std::mutex mu;
  uint8_t uses = 0;  // Compress() calls the entry still answers; 0 = empty
  bool enabled = false;
  int level = 0;
  Compressed result{Codec::kRaw, 0};
  // Left uninitialised: pages of a memo never filled are never touched.
  std::byte input[kBlockSize];
  std::byte output[kMaxCompressedBlockBytes];

  void Store(const CodecConfig& config, const std::byte* in, const std::byte* out, Compressed c, uint8_t n) {
    uses = n;
    enabled = config.enabled;
    level = config.zstd_level;
    result = c;
    std::memcpy(input, in, kBlockSize);
    std::memcpy(output, out, c.size_bytes);
  }
};

CompressionMemo::CompressionMemo(size_t entries)
    : size_(std::max<size_t>(entries, 1)), entries_(new Entry[size_]) {}

CompressionMemo::~CompressionMemo() = default;

uint64_t CompressionMemo::SlotHash(const std::byte* in) {
  // One word of each 64-byte line, at a different place in each of 8 lines running: a
  // sample, which is enough to pick a slot (a CRC of the whole block cost more than the
  // rest of a lookup).
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t a[4] = {1, 2, 3, 4};
  for (size_t line = 0; line < kBlockSize / 64; line += 4) {
    for (size_t k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, in + (line + k) * 64 + 8 * ((line + k) % 8), sizeof w);
      a[k] = (a[k] ^ w) * kMul;
    }
  }
  const uint64_t h = a[0] ^ (a[1] >> 7) ^ (a[2] >> 19) ^ (a[3] >> 31);
  return h ^ (h >> 29);
}

Compressed CompressionMemo::Compress(const CodecConfig& config, const std::byte* in, std::byte* out) {
  Entry& e = entries_[SlotHash(in) % size_];
  {
    std::lock_guard lock(e.mu);
    if (e.uses > 0 && e.enabled == config.enabled && e.level == config.zstd_level &&
        std::memcmp(e.input, in, kBlockSize) == 0) {
      std::memcpy(out, e.output, e.result.size_bytes);
      --e.uses;
      hits_.fetch_add(1, std::memory_order_relaxed);
      return e.result;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  const Compressed c = CompressBlock(config, in, out);  // outside the entry's lock
  std::lock_guard lock(e.mu);
  e.Store(config, in, out, c, 1);  // for the other copy of a mirrored pair
  return c;
}

void CompressionMemo::Prime(const CodecConfig& config, const std::byte* in) {
  std::byte out[kMaxCompressedBlockBytes];
  const Compressed c = CompressBlock(config, in, out);  // outside the entry's lock
  Entry& e = entries_[SlotHash(in) % size_];
  std::lock_guard lock(e.mu);
  e.Store(config, in, out, c, 2);
  primed_.fetch_add(1, std::memory_order_relaxed);
}

Status DecompressBlock(Codec codec, std::span<const std::byte> payload, std::byte* out) {
  if (codec == Codec::kRaw) {
    if (payload.size() != kBlockSize) return Status::Corruption("raw block of wrong size");
    std::memcpy(out, payload.data(), kBlockSize);
    return Status::Ok();
  }
  if (codec != Codec::kZstd) return Status::Corruption("unknown codec");
  size_t n = ZSTD_decompressDCtx(Contexts().dctx, out, kBlockSize, payload.data(), payload.size());
  if (ZSTD_isError(n) || n != kBlockSize) {
    return Status::Corruption(std::string("zstd block does not decode to 4096 bytes: ") +
                              (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
  }
  return Status::Ok();
}

}  // namespace eraid
