// Explicit little-endian encoding for every on-disk structure, independent of the host.
// Writer appends into a caller-owned buffer; Reader consumes with bounds checks and
// reports a short buffer through ok() rather than reading past the end.
//
// Thread-safety: none; one Writer/Reader per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace eraid {

inline void PutLe16(std::byte* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void PutLe32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void PutLe64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline uint16_t GetLe16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) | std::to_integer<uint16_t>(p[1])
                                                                     << 8);
}
inline uint32_t GetLe32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<uint32_t>(p[i]);
  return v;
}
inline uint64_t GetLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

class Writer {
 public:
  explicit Writer(std::span<std::byte> out) : out_(out) {}
  void U8(uint8_t v) {
    if (Room(1)) out_[pos_++] = static_cast<std::byte>(v);
  }
  void U16(uint16_t v) {
    if (Room(2)) {
      PutLe16(&out_[pos_], v);
      pos_ += 2;
    }
  }
  void U32(uint32_t v) {
    if (Room(4)) {
      PutLe32(&out_[pos_], v);
      pos_ += 4;
    }
  }
  void U64(uint64_t v) {
    if (Room(8)) {
      PutLe64(&out_[pos_], v);
      pos_ += 8;
    }
  }
  void Bytes(const void* p, size_t n) {
    if (Room(n)) {
      std::memcpy(&out_[pos_], p, n);
      pos_ += n;
    }
  }
  size_t position() const { return pos_; }
  bool ok() const { return ok_; }

 private:
  bool Room(size_t n) {
    if (pos_ + n > out_.size()) ok_ = false;
    return ok_;
  }
  std::span<std::byte> out_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint8_t U8() { return Room(1) ? std::to_integer<uint8_t>(in_[pos_++]) : 0; }
  uint16_t U16() {
    if (!Room(2)) return 0;
    pos_ += 2;
    return GetLe16(&in_[pos_ - 2]);
  }
  uint32_t U32() {
    if (!Room(4)) return 0;
    pos_ += 4;
    return GetLe32(&in_[pos_ - 4]);
  }
  uint64_t U64() {
    if (!Room(8)) return 0;
    pos_ += 8;
    return GetLe64(&in_[pos_ - 8]);
  }
  void Bytes(void* p, size_t n) {
    if (Room(n)) {
      std::memcpy(p, &in_[pos_], n);
      pos_ += n;
    }
  }
  size_t position() const { return pos_; }
  bool ok() const { return ok_; }

 private:
  bool Room(size_t n) {
    if (pos_ + n > in_.size()) ok_ = false;
    return ok_;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace eraid
