// Strong ids and addresses, and the named constants they relate to.
//
// Mixing up an LBA on a drive with an LBA of the user volume, or a device index with a
// segment id, is the classic storage bug; distinct types make it a compile error.
// Units go last in names: `_blocks`, `_bytes`.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace eraid {

// The unit of every address in the stack: drives, the array and the volume all speak
// 4 KiB blocks.
inline constexpr uint32_t kBlockSize = 4096;
inline constexpr uint32_t kBlockShift = 12;
static_assert((1u << kBlockShift) == kBlockSize);

template <typename Tag, typename Rep = uint64_t>
struct StrongId {
  Rep value{};

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : value(v) {}
  constexpr auto operator<=>(const StrongId&) const = default;
  constexpr StrongId operator+(Rep d) const { return StrongId(value + d); }
};

struct LbaTag {};
struct SegmentIdTag {};
struct DeviceIndexTag {};

// A 4 KiB block address on one device (a drive, or the flash under an emulated drive).
using Lba = StrongId<LbaTag>;
// An elastic segment of the array (and the log segment stored in it).
using SegmentId = StrongId<SegmentIdTag, uint32_t>;
// One of the n+1 backends of an array.
using DeviceIndex = StrongId<DeviceIndexTag, uint32_t>;

inline constexpr uint64_t BlocksToBytes(uint64_t blocks) { return blocks << kBlockShift; }
inline constexpr uint64_t BytesToBlocks(uint64_t bytes) { return bytes >> kBlockShift; }
inline constexpr bool IsBlockAligned(uint64_t bytes) { return (bytes & (kBlockSize - 1)) == 0; }

}  // namespace eraid

template <typename Tag, typename Rep>
struct std::hash<eraid::StrongId<Tag, Rep>> {
  size_t operator()(const eraid::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>()(id.value);
  }
};
