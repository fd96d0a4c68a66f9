#include "log/trace.h"

#include <zlib.h>
#include <zstd.h>

#include <charconv>
#include <cstdio>
#include <vector>

#include "common/types.h"

namespace eraid {

Result<TraceFormat> ParseTraceFormat(const std::string& name) {
  if (name == "alibaba" || name == "ali") return TraceFormat::kAlibaba;
  if (name == "tencent") return TraceFormat::kTencent;
  if (name == "msr") return TraceFormat::kMsr;
  return Status::InvalidArgument("trace format must be alibaba, tencent or msr, got '" + name + "'");
}

namespace {

// Splits on commas into at most `n` fields; false if the count differs.
bool Split(std::string_view line, size_t n, std::string_view* fields) {
  size_t count = 0, start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      if (count == n) return false;
      fields[count++] = line.substr(start, i - start);
      start = i + 1;
    }
  }
  return count == n;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool Number(std::string_view s, uint64_t* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

Status Bad(const std::string& why) { return Status::InvalidArgument(why); }

Status ToBlocks(uint64_t offset_bytes, uint64_t length_bytes, TraceRecord* out) {
  if (length_bytes == 0) return Bad("zero-length request");
  if (offset_bytes > UINT64_MAX - length_bytes) return Bad("offset + length overflows");
  // The last byte, not one past it rounded up: that sum overflows for a request ending
  // within 4 KiB of 2^64 (the fuzzer found it: a huge length became zero blocks).
  const uint64_t first = offset_bytes / kBlockSize;
  const uint64_t last = (offset_bytes + length_bytes - 1) / kBlockSize;
  if (last - first >= UINT32_MAX) return Bad("request too large");
  out->lba = first;
  out->blocks = static_cast<uint32_t>(last - first + 1);
  return Status::Ok();
}

}  // namespace

Status ParseTraceLine(TraceFormat format, std::string_view line, TraceRecord* out) {
  std::string_view f[7];
  uint64_t a = 0, b = 0, t = 0, type = 0;
  switch (format) {
    case TraceFormat::kAlibaba: {
      if (!Split(line, 5, f)) return Bad("expected 5 fields: device_id,opcode,offset,length,timestamp");
      std::string_view op = Trim(f[1]);
      if (op != "R" && op != "W") return Bad("opcode must be R or W");
      if (!Number(f[2], &a) || !Number(f[3], &b) || !Number(f[4], &t)) return Bad("offset, length and timestamp must be integers");
      out->volume = std::string(Trim(f[0]));
      out->write = op == "W";
      out->timestamp_us = t;
      return ToBlocks(a, b, out);
    }
    case TraceFormat::kTencent: {
      if (!Split(line, 5, f)) return Bad("expected 5 fields: timestamp,offset,size,io_type,volume_id");
      if (!Number(f[0], &t) || !Number(f[1], &a) || !Number(f[2], &b) || !Number(f[3], &type)) {
        return Bad("timestamp, offset, size and io_type must be integers");
      }
      if (type > 1) return Bad("io_type must be 0 (read) or 1 (write)");
      out->volume = std::string(Trim(f[4]));
      out->write = type == 1;
      out->timestamp_us = t * 1000000;
      if (a > UINT64_MAX / 512 || b > UINT64_MAX / 512) return Bad("sector numbers overflow");
      return ToBlocks(a * 512, b * 512, out);
    }
    case TraceFormat::kMsr: {
      if (!Split(line, 7, f)) return Bad("expected 7 fields: timestamp,hostname,disk,type,offset,size,response_time");
      std::string_view op = Trim(f[3]);
      if (op != "Read" && op != "Write") return Bad("type must be Read or Write");
      if (!Number(f[0], &t) || !Number(f[2], &type) || !Number(f[4], &a) || !Number(f[5], &b)) {
        return Bad("timestamp, disk, offset and size must be integers");
      }
      out->volume = std::string(Trim(f[1])) + "_" + std::string(Trim(f[2]));
      out->write = op == "Write";
      out->timestamp_us = t / 10;
      return ToBlocks(a, b, out);
    }
  }
  return Bad("unknown format");
}

namespace {

// Line sources: gzip (which also reads plain files) and zstd.
class LineReader : public TraceReader {
 public:
  LineReader(std::string path, TraceFormat format) : path_(std::move(path)), format_(format) {}
  Result<bool> Next(TraceRecord* out) override {
    std::string line;
    for (;;) {
      ERAID_ASSIGN_OR_RETURN(bool got, ReadLine(&line));
      if (!got) return false;
      ++line_;
      std::string_view v = Trim(line);
      if (v.empty() || v.front() == '#') continue;
      Status s = ParseTraceLine(format_, v, out);
      if (!s.ok()) return Status::InvalidArgument(path_ + ":" + std::to_string(line_) + ": " + s.message());
      return true;
    }
  }
  uint64_t line_number() const override { return line_; }

 protected:
  virtual Result<bool> ReadLine(std::string* line) = 0;
  std::string path_;

 private:
  TraceFormat format_;
  uint64_t line_ = 0;
};

class GzLineReader final : public LineReader {
 public:
  GzLineReader(std::string path, TraceFormat format, gzFile f) : LineReader(std::move(path), format), f_(f) {
    gzbuffer(f_, 1 << 20);
  }
  ~GzLineReader() override { gzclose(f_); }
  uint64_t compressed_bytes_read() const override { return static_cast<uint64_t>(gzoffset(f_)); }

 private:
  Result<bool> ReadLine(std::string* line) override {
    line->clear();
    char buf[4096];
    for (;;) {
      if (gzgets(f_, buf, sizeof(buf)) == nullptr) {
        int err = 0;
        const char* msg = gzerror(f_, &err);
        if (err != Z_OK && err != Z_STREAM_END) return Status::IoError(path_ + ": " + msg);
        return !line->empty();
      }
      line->append(buf);
      if (!line->empty() && line->back() == '\n') {
        line->pop_back();
        return true;
      }
    }
  }
  gzFile f_;
};

class ZstdLineReader final : public LineReader {
 public:
  ZstdLineReader(std::string path, TraceFormat format, FILE* f)
      : LineReader(std::move(path), format), f_(f), dctx_(ZSTD_createDCtx()), in_(ZSTD_DStreamInSize()),
        out_(ZSTD_DStreamOutSize()) {}
  ~ZstdLineReader() override {
    ZSTD_freeDCtx(dctx_);
    std::fclose(f_);
  }
  uint64_t compressed_bytes_read() const override { return consumed_; }

 private:
  Result<bool> ReadLine(std::string* line) override {
    line->clear();
    for (;;) {
      while (pos_ < have_) {
        char c = out_[pos_++];
        if (c == '\n') return true;
        line->push_back(c);
      }
      ERAID_ASSIGN_OR_RETURN(bool more, Fill());
      if (!more) return !line->empty();
    }
  }
  Result<bool> Fill() {
    pos_ = have_ = 0;
    while (have_ == 0) {
      if (in_pos_ == in_size_) {
        in_size_ = std::fread(in_.data(), 1, in_.size(), f_);
        in_pos_ = 0;
        consumed_ += in_size_;
        if (in_size_ == 0) {
          if (std::ferror(f_)) return Status::IoError(path_ + ": read error");
          if (!frame_done_) return Status::Corruption(path_ + ": truncated zstd stream");
          return false;
        }
      }
      ZSTD_inBuffer in{in_.data(), in_size_, in_pos_};
      ZSTD_outBuffer out{out_.data(), out_.size(), 0};
      size_t r = ZSTD_decompressStream(dctx_, &out, &in);
      if (ZSTD_isError(r)) return Status::Corruption(path_ + ": " + ZSTD_getErrorName(r));
      frame_done_ = r == 0;
      in_pos_ = in.pos;
      have_ = out.pos;
    }
    return true;
  }
  FILE* f_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_, out_;
  size_t in_size_ = 0, in_pos_ = 0, have_ = 0, pos_ = 0;
  uint64_t consumed_ = 0;
  bool frame_done_ = true;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path, TraceFormat format) {
  if (EndsWith(path, ".zst") || EndsWith(path, ".zstd")) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return Status::IoError("cannot open trace " + path);
    return std::unique_ptr<TraceReader>(new ZstdLineReader(path, format, f));
  }
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) return Status::IoError("cannot open trace " + path);
  return std::unique_ptr<TraceReader>(new GzLineReader(path, format, f));
}

}  // namespace eraid
