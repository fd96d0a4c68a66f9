#include "compress/codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

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
