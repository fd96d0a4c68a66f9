// Block trace readers for eraid-sim: Alibaba Cloud, Tencent CBS and MSR Cambridge CSV
// formats, plain, gzip or zstd compressed (by file name: .gz, .zst).
//
//   alibaba  device_id,opcode,offset,length,timestamp
//            opcode R|W; offset, length in bytes; timestamp in microseconds
//   tencent  timestamp,offset,size,io_type,volume_id
//            timestamp in seconds; offset, size in 512-byte sectors; io_type 0 read, 1 write
//   msr      timestamp,hostname,disk,type,offset,size,response_time
//            timestamp in 100 ns Windows ticks; type Read|Write; offset, size in bytes;
//            the volume is "hostname_disk"
// Requests become 4 KiB block ranges: [offset / 4096, ceil((offset + length) / 4096)).
// A malformed line is an InvalidArgument naming the file and line number.
//
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace eraid {

enum class TraceFormat { kAlibaba, kTencent, kMsr };
Result<TraceFormat> ParseTraceFormat(const std::string& name);

struct TraceRecord {
  std::string volume;
  bool write = false;
  uint64_t lba = 0;      // first 4 KiB block
  uint32_t blocks = 0;   // 4 KiB blocks touched
  uint64_t timestamp_us = 0;
};

// Parses one line (no newline). Returns InvalidArgument with a reason on malformed input.
Status ParseTraceLine(TraceFormat format, std::string_view line, TraceRecord* out);

class TraceReader {
 public:
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path, TraceFormat format);
  virtual ~TraceReader() = default;
  // Next record; false at the end. Empty lines and lines starting with '#' are skipped.
  virtual Result<bool> Next(TraceRecord* out) = 0;
  virtual uint64_t line_number() const = 0;
  // Bytes of the (possibly compressed) file consumed so far, for progress.
  virtual uint64_t compressed_bytes_read() const = 0;
};

}  // namespace eraid
