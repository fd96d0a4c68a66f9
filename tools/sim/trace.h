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
// Reading runs at the speed of memory: a plain file is mapped and scanned in place, a
// compressed one is decompressed by a thread of the reader's own into large buffers
// while the caller parses the previous one; lines are parsed in place (NextView) without
// copying or allocating.
//
// Thread-safety: one reader per thread (the decompression thread is the reader's own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace eraid {

enum class TraceFormat { kAlibaba, kTencent, kMsr };
Result<TraceFormat> ParseTraceFormat(const std::string& name);

struct TraceRecord {
  std::string volume;
  bool write = false;
  uint64_t lba = 0;     // first 4 KiB block
  uint32_t blocks = 0;  // 4 KiB blocks touched
  uint64_t timestamp_us = 0;
};

// A parsed line whose volume id still points into the line: no copy, no allocation. The
// id is `volume`, or for MSR `volume` + "_" + `volume_suffix` (hostname and disk).
struct TraceLineView {
  std::string_view volume, volume_suffix;
  bool write = false;
  uint64_t lba = 0;
  uint32_t blocks = 0;
  uint64_t timestamp_us = 0;
  std::string VolumeId() const;
};

// Parses one line (no newline). Returns InvalidArgument with a reason on malformed input.
Status ParseTraceLine(TraceFormat format, std::string_view line, TraceRecord* out);
Status ParseTraceLine(TraceFormat format, std::string_view line, TraceLineView* out);

class TraceReader {
 public:
  // Plain, or compressed by name (.gz, .zst/.zstd) or by content (gzip's magic).
  static Result<std::unique_ptr<TraceReader>> Open(const std::string& path, TraceFormat format);
  ~TraceReader();
  // Next record; false at the end. Empty lines and lines starting with '#' are skipped.
  Result<bool> Next(TraceRecord* out);
  // The same, in place: `out`'s views stay valid until the next call.
  Result<bool> NextView(TraceLineView* out);
  uint64_t line_number() const { return line_; }
  // Bytes of the (possibly compressed) file consumed so far, for progress.
  uint64_t compressed_bytes_read() const;

  class Source;  // where the text comes from, a chunk at a time (trace.cc)

 private:
  TraceReader(std::string path, TraceFormat format, std::unique_ptr<Source> source);
  // The next line (without its newline), or false at the end.
  Result<bool> NextLine(std::string_view* line);

  std::string path_;
  TraceFormat format_;
  std::unique_ptr<Source> source_;
  std::string_view chunk_;  // what is left of the current chunk
  std::string carry_;       // a line that straddles two chunks
  uint64_t line_ = 0;
};

}  // namespace eraid
