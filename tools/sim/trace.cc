#include "tools/sim/trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/types.h"

namespace eraid {

Result<TraceFormat> ParseTraceFormat(const std::string& name) {
  if (name == "alibaba" || name == "ali") return TraceFormat::kAlibaba;
  if (name == "tencent") return TraceFormat::kTencent;
  if (name == "msr") return TraceFormat::kMsr;
  return Status::InvalidArgument("trace format must be alibaba, tencent or msr, got '" + name +
                                 "'");
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
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool Number(std::string_view s, uint64_t* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

Status Bad(const std::string& why) { return Status::InvalidArgument(why); }

Status ToBlocks(uint64_t offset_bytes, uint64_t length_bytes, TraceLineView* out) {
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

// SWAR digits (as simdjson parses eight at once): the eight bytes at `p`, little-endian.
uint64_t Load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// How many of the eight bytes, from the first, are ASCII digits (0..8). Bytes after the
// first non-digit may be garbled by the borrow; they are not looked at.
int DigitRun(uint64_t v) {
  const uint64_t x = v - 0x3030303030303030ULL;
  const uint64_t bad = (x | (x + 0x7676767676767676ULL)) & 0x8080808080808080ULL;
  return bad ? std::countr_zero(bad) / 8 : 8;
}

// The value of the first k (1..8) digits of `v`.
uint64_t EightDigits(uint64_t v, int k) {
  uint64_t x = (v - 0x3030303030303030ULL) << (8 * (8 - k));  // leading zeros for k < 8
  x = (x * 10) + (x >> 8);                                    // pairs
  x = (((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
       (((x >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
      32;
  return x;
}

constexpr uint64_t kPow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// The Alibaba line as eraid-tracegen and the published traces write it — an id without
// blanks, R or W, three plain decimals — parsed in one pass with no field table. Anything
// else (blanks, signs, 20-digit numbers) returns nullptr and takes the general path, which
// also words the error; so the two agree on every line (tests/tools/trace_test.cc).
// Parses from `p`, reading no further than `end`, and returns where the last number
// stopped: the caller checks what ends the line there (the line's end, or a newline).
const char* FastAlibaba(const char* p, const char* const end, TraceLineView* out) {
  const char* const id = p;
  // The id by hand, not memchr: ids are a few bytes, and in a chunk the next comma may
  // lie on a later line.
  while (p < end && *p != ',') {
    if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') return nullptr;
    ++p;
  }
  if (p == end || p == id) return nullptr;
  const std::string_view volume(id, static_cast<size_t>(p - id));
  ++p;
  if (end - p < 2 || (p[0] != 'R' && p[0] != 'W') || p[1] != ',') return nullptr;
  const bool write = p[0] == 'W';
  p += 2;
  uint64_t v[3];
  for (int f = 0; f < 3; ++f) {
    const char* const first = p;
    uint64_t n = 0;
    // Eight digits at a time while eight bytes are left, then one at a time.
    while (end - p >= 8) {
      const uint64_t w = Load8(p);
      const int k = DigitRun(w);
      if (k > 0) n = n * kPow10[k] + EightDigits(w, k);
      p += k;
      if (k < 8 || p - first > 19) break;
    }
    if (end - p < 8) {
      while (p < end && static_cast<unsigned char>(*p - '0') < 10)
        n = n * 10 + uint64_t(*p++ - '0');
    }
    // 19 digits cannot overflow; longer numbers take the general path's checked parse.
    if (p == first || p - first > 19) return nullptr;
    if (f < 2) {
      if (p == end || *p != ',') return nullptr;
      ++p;
    }
    v[f] = n;
  }
  out->volume = volume;
  out->volume_suffix = {};
  out->write = write;
  out->timestamp_us = v[2];
  // A bad length: the general path says why.
  return ToBlocks(v[0], v[1], out).ok() ? p : nullptr;
}

}  // namespace

std::string TraceLineView::VolumeId() const {
  std::string id(volume);
  if (!volume_suffix.empty()) id.append("_").append(volume_suffix);
  return id;
}

Status ParseTraceLine(TraceFormat format, std::string_view line, TraceLineView* out) {
  out->volume_suffix = {};
  // Before the field table below is set up (zeroing it was a fifth of this function).
  if (format == TraceFormat::kAlibaba &&
      FastAlibaba(line.data(), line.data() + line.size(), out) == line.data() + line.size()) {
    return Status::Ok();
  }
  std::string_view f[7];
  uint64_t a = 0, b = 0, t = 0, type = 0;
  switch (format) {
    case TraceFormat::kAlibaba: {
      if (!Split(line, 5, f))
        return Bad("expected 5 fields: device_id,opcode,offset,length,timestamp");
      std::string_view op = Trim(f[1]);
      if (op != "R" && op != "W") return Bad("opcode must be R or W");
      if (!Number(f[2], &a) || !Number(f[3], &b) || !Number(f[4], &t))
        return Bad("offset, length and timestamp must be integers");
      out->volume = Trim(f[0]);
      out->write = op == "W";
      out->timestamp_us = t;
      return ToBlocks(a, b, out);
    }
    case TraceFormat::kTencent: {
      if (!Split(line, 5, f))
        return Bad("expected 5 fields: timestamp,offset,size,io_type,volume_id");
      if (!Number(f[0], &t) || !Number(f[1], &a) || !Number(f[2], &b) || !Number(f[3], &type)) {
        return Bad("timestamp, offset, size and io_type must be integers");
      }
      if (type > 1) return Bad("io_type must be 0 (read) or 1 (write)");
      out->volume = Trim(f[4]);
      out->write = type == 1;
      out->timestamp_us = t * 1000000;
      if (a > UINT64_MAX / 512 || b > UINT64_MAX / 512) return Bad("sector numbers overflow");
      return ToBlocks(a * 512, b * 512, out);
    }
    case TraceFormat::kMsr: {
      if (!Split(line, 7, f))
        return Bad("expected 7 fields: timestamp,hostname,disk,type,offset,size,response_time");
      std::string_view op = Trim(f[3]);
      if (op != "Read" && op != "Write") return Bad("type must be Read or Write");
      if (!Number(f[0], &t) || !Number(f[2], &type) || !Number(f[4], &a) || !Number(f[5], &b)) {
        return Bad("timestamp, disk, offset and size must be integers");
      }
      out->volume = Trim(f[1]);
      out->volume_suffix = Trim(f[2]);
      out->write = op == "Write";
      out->timestamp_us = t / 10;
      return ToBlocks(a, b, out);
    }
  }
  return Bad("unknown format");
}

Status ParseTraceLine(TraceFormat format, std::string_view line, TraceRecord* out) {
  TraceLineView v;
  ERAID_RETURN_IF_ERROR(ParseTraceLine(format, line, &v));
  out->volume = v.VolumeId();
  out->write = v.write;
  out->lba = v.lba;
  out->blocks = v.blocks;
  out->timestamp_us = v.timestamp_us;
  return Status::Ok();
}

// ---- where the text comes from

class TraceReader::Source {
 public:
  virtual ~Source() = default;
  // The next chunk of text, valid until the next call; empty at the end.
  virtual Result<std::string_view> Next() = 0;
  // Bytes of the file behind the chunks handed out so far.
  virtual uint64_t consumed() const = 0;
};

namespace {

constexpr size_t kChunkBytes = 4 << 20;

// A plain file, mapped and handed out in slices of the mapping (no copy at all).
class MappedSource final : public TraceReader::Source {
 public:
  static Result<std::unique_ptr<MappedSource>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IoError("cannot open trace " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return Status::IoError("cannot stat trace " + path);
    }
    auto src = std::unique_ptr<MappedSource>(new MappedSource());
    src->size_ = static_cast<size_t>(st.st_size);
    if (src->size_ > 0) {
      void* p = ::mmap(nullptr, src->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return Status::IoError("cannot map trace " + path + ": " + std::strerror(errno));
      }
      ::madvise(p, src->size_, MADV_SEQUENTIAL);
      src->data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return src;
  }
  ~MappedSource() override {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  Result<std::string_view> Next() override {
    // The reader is done with the slice it had: its pages need not stay resident (a trace
    // may be far larger than memory, and a peak RSS should count the simulation's own).
    if (pos_ > released_) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      const size_t upto = pos_ / page * page;
      if (upto > released_)
        ::madvise(const_cast<char*>(data_) + released_, upto - released_, MADV_DONTNEED);
      released_ = upto;
    }
    const size_t n = std::min(kChunkBytes, size_ - pos_);
    std::string_view chunk(data_ + pos_, n);
    pos_ += n;
    return chunk;
  }
  uint64_t consumed() const override { return pos_; }

 private:
  MappedSource() = default;
  const char* data_ = nullptr;
  size_t size_ = 0, pos_ = 0, released_ = 0;
};

// A compressed file: a thread of its own decompresses into a few large buffers while the
// reader parses the one it was handed last.
class DecompressingSource final : public TraceReader::Source {
 public:
  // Decompresses into `buf` up to `cap` bytes; 0 at the end. Runs on the source's thread.
  using Decoder = std::function<Result<size_t>(char* buf, size_t cap)>;

  DecompressingSource(Decoder decode, std::function<uint64_t()> consumed)
      : decode_(std::move(decode)), consumed_fn_(std::move(consumed)) {
    for (auto& b : buffers_) b.data.resize(kChunkBytes);
    thread_ = std::thread([this] { Produce(); });
  }
  ~DecompressingSource() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Result<std::string_view> Next() override {
    std::unique_lock lock(mu_);
    if (held_ >= 0) {  // the caller is done with the buffer it had
      buffers_[held_].full = false;
      held_ = -1;
      cv_.notify_all();
    }
    Buffer& b = buffers_[next_];
    cv_.wait(lock, [&] { return b.full || b.last; });
    if (!b.status.ok()) return b.status;
    if (!b.full) return std::string_view();
    held_ = next_;
    next_ = (next_ + 1) % kBuffers;
    return std::string_view(b.data.data(), b.size);
  }
  uint64_t consumed() const override { return consumed_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kBuffers = 3;
  struct Buffer {
    std::vector<char> data;
    size_t size = 0;
    bool full = false;  // handed to the reader (or waiting for it)
    bool last = false;  // the end, or an error in `status`
    Status status;
  };
  void Produce() {
    for (int i = 0;; i = (i + 1) % kBuffers) {
      Buffer& b = buffers_[i];
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !b.full; });
        if (stop_) return;
      }
      auto n = decode_(b.data.data(), b.data.size());
      consumed_.store(consumed_fn_(), std::memory_order_relaxed);
      std::lock_guard lock(mu_);
      if (!n.ok() || *n == 0) {
        b.status = n.ok() ? Status::Ok() : n.status();
        b.last = true;
        cv_.notify_all();
        return;
      }
      b.size = *n;
      b.full = true;
      cv_.notify_all();
    }
  }

  Decoder decode_;
  std::function<uint64_t()> consumed_fn_;
  std::atomic<uint64_t> consumed_{0};
  Buffer buffers_[kBuffers];
  std::mutex mu_;
  std::condition_variable cv_;
  int next_ = 0, held_ = -1;
  bool stop_ = false;
  std::thread thread_;
};

Result<std::unique_ptr<TraceReader::Source>> OpenGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::IoError("cannot open trace " + path);
  gzbuffer(f, 1 << 20);
  auto file = std::shared_ptr<gzFile_s>(f, [](gzFile g) { gzclose(g); });
  auto decode = [file, path](char* buf, size_t cap) -> Result<size_t> {
    size_t got = 0;
    while (got < cap) {
      const int n = gzread(file.get(), buf + got,
                           static_cast<unsigned>(std::min<size_t>(cap - got, 1 << 30)));
      if (n < 0) {
        int err = 0;
        const char* msg = gzerror(file.get(), &err);
        return Status::IoError(path + ": " + msg);
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  };
  return std::unique_ptr<TraceReader::Source>(new DecompressingSource(
      decode, [file] { return static_cast<uint64_t>(gzoffset(file.get())); }));
}

Result<std::unique_ptr<TraceReader::Source>> OpenZstd(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::IoError("cannot open trace " + path);
  struct State {
    FILE* f;
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    std::vector<char> in = std::vector<char>(ZSTD_DStreamInSize());
    size_t in_size = 0, in_pos = 0;
    uint64_t consumed = 0;
    bool frame_done = true;
    ~State() {
      ZSTD_freeDCtx(dctx);
      std::fclose(f);
    }
  };
  auto st = std::make_shared<State>();
  st->f = f;
  auto decode = [st, path](char* buf, size_t cap) -> Result<size_t> {
    size_t got = 0;
    while (got < cap) {
      if (st->in_pos == st->in_size) {
        st->in_size = std::fread(st->in.data(), 1, st->in.size(), st->f);
        st->in_pos = 0;
        st->consumed += st->in_size;
        if (st->in_size == 0) {
          if (std::ferror(st->f)) return Status::IoError(path + ": read error");
          if (!st->frame_done) return Status::Corruption(path + ": truncated zstd stream");
          break;
        }
      }
      ZSTD_inBuffer in{st->in.data(), st->in_size, st->in_pos};
      ZSTD_outBuffer out{buf + got, cap - got, 0};
      const size_t r = ZSTD_decompressStream(st->dctx, &out, &in);
      if (ZSTD_isError(r)) return Status::Corruption(path + ": " + ZSTD_getErrorName(r));
      st->frame_done = r == 0;
      st->in_pos = in.pos;
      got += out.pos;
    }
    return got;
  };
  return std::unique_ptr<TraceReader::Source>(
      new DecompressingSource(decode, [st] { return st->consumed; }));
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool LooksGzipped(const std::string& path) {
  unsigned char magic[2] = {0, 0};
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const size_t n = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path,
                                                       TraceFormat format) {
  std::unique_ptr<Source> source;
  if (EndsWith(path, ".zst") || EndsWith(path, ".zstd")) {
    ERAID_ASSIGN_OR_RETURN(source, OpenZstd(path));
  } else if (EndsWith(path, ".gz") || LooksGzipped(path)) {
    ERAID_ASSIGN_OR_RETURN(source, OpenGzip(path));
  } else {
    ERAID_ASSIGN_OR_RETURN(auto mapped, MappedSource::Open(path));
    source = std::move(mapped);
  }
  return std::unique_ptr<TraceReader>(new TraceReader(path, format, std::move(source)));
}

TraceReader::TraceReader(std::string path, TraceFormat format, std::unique_ptr<Source> source)
    : path_(std::move(path)), format_(format), source_(std::move(source)) {}

TraceReader::~TraceReader() = default;

uint64_t TraceReader::compressed_bytes_read() const { return source_->consumed(); }

Result<bool> TraceReader::NextLine(std::string_view* line) {
  carry_.clear();
  for (;;) {
    if (chunk_.empty()) {
      ERAID_ASSIGN_OR_RETURN(chunk_, source_->Next());
      if (chunk_.empty()) {  // the end: a last line without a newline, if any
        if (carry_.empty()) return false;
        *line = carry_;
        return true;
      }
    }
    const void* nl = std::memchr(chunk_.data(), '\n', chunk_.size());
    if (nl == nullptr) {  // the line goes on in the next chunk
      carry_.append(chunk_);
      chunk_ = {};
      continue;
    }
    const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - chunk_.data());
    if (carry_.empty()) {
      *line = chunk_.substr(0, len);
    } else {
      carry_.append(chunk_.substr(0, len));
      *line = carry_;
    }
    chunk_.remove_prefix(len + 1);
    return true;
  }
}

Result<bool> TraceReader::NextView(TraceLineView* out) {
  // An Alibaba line wholly inside the chunk is parsed where it lies: no search for its
  // newline, no trimming (the fast parse takes no blanks), half a one-block trace's
  // decoding. Comments, blanks, '\r' and lines across chunks take the general path.
  if (format_ == TraceFormat::kAlibaba && !chunk_.empty() && chunk_.front() != '#') {
    const char* const end = chunk_.data() + chunk_.size();
    const char* p = FastAlibaba(chunk_.data(), end, out);
    if (p != nullptr && p < end && *p == '\n') {
      ++line_;
      chunk_.remove_prefix(static_cast<size_t>(p + 1 - chunk_.data()));
      return true;
    }
  }
  std::string_view line;
  for (;;) {
    ERAID_ASSIGN_OR_RETURN(bool got, NextLine(&line));
    if (!got) return false;
    ++line_;
    std::string_view v = Trim(line);
    if (v.empty() || v.front() == '#') continue;
    Status s = ParseTraceLine(format_, v, out);
    if (!s.ok())
      return Status::InvalidArgument(path_ + ":" + std::to_string(line_) + ": " + s.message());
    return true;
  }
}

Result<bool> TraceReader::Next(TraceRecord* out) {
  TraceLineView v;
  ERAID_ASSIGN_OR_RETURN(bool got, NextView(&v));
  if (!got) return false;
  out->volume = v.VolumeId();
  out->write = v.write;
  out->lba = v.lba;
  out->blocks = v.blocks;
  out->timestamp_us = v.timestamp_us;
  return true;
}

}  // namespace eraid
