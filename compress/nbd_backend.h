// NbdBackend: a drive's flash on another host, reached over NBD with libnbd — the
// remote counterpart of FileBackend. The emulated compressing drive runs on the array's
// host over it exactly as over a local file, so the bytes on the wire are its compressed
// records (docs/remote-drives.md).
//
// URIs as libnbd takes them: nbd://HOST[:PORT]/EXPORT, nbds://... (TLS; tls-psk-file=,
// tls-certificates= in the query), nbd+unix:///EXPORT?socket=PATH.
//
// Requests are asynchronous (libnbd's aio API, up to queue_depth in flight on the
// connection); a thread per connection drives the socket and takes completions in, which
// Poll() then delivers (the Backend contract: callbacks run only from Poll()). Write data
// is copied into the request, and reads land in the request's own buffer, so a request
// given up on (below) never touches the caller's memory afterwards.
//
// Deadlines: every request, and the connect, has `timeout_ms` (checked at least every
// 100 ms). A request that misses it, a connection that breaks, or an error answer fails
// the backend for good: every request in flight and every later one completes with
// IoError at once (the array above goes degraded and
// carries on).
//
// Late writes. Writes (and trims) in flight at the failure were abandoned, not undone: a
// hung host that resumes works through its queue, and a cut link, restored, delivers
// what TCP still held. So the connection is not dropped: libnbd goes on driving it,
// sending whole what it had started and taking answers in (to nobody), until every
// request it sent has been answered — then none can still be carried out — or the
// connection dies. drained() says whether that has happened (at once if no write was
// abandoned); re-adding the drive, or rebuilding it onto the same export, waits for it,
// so no abandoned write can land on data written after it (docs/remote-drives.md).
// (Hanging up instead, or half-closing, does not do: a server may end the connection
// before its workers finish, and nbdkit 1.32 then aborts at their answer.)
//
// Read lanes. A synchronous read (Read, ReadBytes: the drive's record reads, which a
// user's read waits on) handed to the poller costs a hand-off each way — on the array's
// two cores, 4-6 context switches and ~70 µs of CPU per 4 KiB read. So when the server
// offers multi-conn, such a read goes instead on a connection of its own, a "lane" (up to
// kMaxLanes, opened on demand, one reader at a time), which the reading thread drives
// itself: it sends, sleeps in poll() on that socket, and takes the answer into its buffer.
// Multi-conn promises only that what a flush covered is seen by every connection, so a
// read goes on a lane only if no write or trim sent on the main connection overlaps it
// since the last flush that covers it; the others stay on the main connection. While
// lanes are in use, the poller flushes such writes after kLaneFlushMs, so reads of
// recently written data do not stay on the slow path. A lane's failure (an error answer,
// a lost connection, a missed deadline) fails the backend as the main connection's does;
// reads send nothing a returning host could carry out late, so lanes have nothing to drain.
//
// Trim is NBD's write-zeroes (the Backend contract says trimmed blocks read as zeros,
// which NBD's trim does not promise); flush is NBD's flush.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "compress/backend.h"

struct nbd_handle;

namespace eraid {

struct NbdBackendOptions {
  uint32_t timeout_ms = 30000;  // per request and for the connect (1 ms .. 1 day)
  uint32_t queue_depth = 64;    // requests in flight at most
};

// What `eraid status` shows of a remote drive.
struct NbdLinkStats {
  std::string uri;         // without secrets (Redact)
  std::string state;       // "connected" or "failed"
  std::string error;       // why it failed
  uint64_t abandoned = 0;  // writes and trims in flight at the failure
  bool draining = false;   // ...that the server may still carry out (drained() is false)
  uint64_t requests = 0;   // completed since open
  uint64_t timeouts = 0;
  uint64_t p50_us = 0, p99_us = 0;  // request latency, from a log-scale histogram (±10%)
  uint64_t lane_reads = 0;          // of the requests, reads on a lane (their own connection)
  uint32_t lanes = 0;               // lanes open
};

class NbdBackend final : public Backend {
 public:
  // True if `path` names an NBD export (nbd://, nbds://, nbd+unix://, nbds+unix://).
  static bool IsUri(const std::string& path);
  // The URI without what may be secret: user info and the query (a TLS key's path, a
  // socket path stays: it is what tells two drives apart).
  static std::string Redact(const std::string& uri);
  // Connects (within options.timeout_ms). InvalidArgument for a malformed URI or a
  // read-only export; IoError if the server cannot be reached.
  static Result<std::unique_ptr<NbdBackend>> Open(const std::string& uri,
                                                  const NbdBackendOptions& options);
  ~NbdBackend() override;

  uint64_t capacity_blocks() const override { return capacity_blocks_; }
  uint32_t queue_depth() const override { return options_.queue_depth; }
  std::string name() const override { return "nbd:" + Redact(uri_); }

  void SubmitRead(Lba lba, std::span<std::byte> buf, IoCallback done) override;
  void SubmitWrite(Lba lba, std::span<const std::byte> buf, IoCallback done) override;
  void SubmitTrim(Lba lba, uint64_t count_blocks, IoCallback done) override;
  void SubmitFlush(IoCallback done) override;
  size_t Poll(bool wait) override;
  size_t in_flight() const override;
  // Synchronous, without the completion queue.
  Status Read(Lba lba, std::span<std::byte> buf) override;
  // Exactly the bytes asked for (a record, not the blocks around it).
  Status ReadBytes(uint64_t offset_bytes, std::span<std::byte> out) override;
  // Many at once: extents lying close together (a drive's records of one array segment
  // sit side by side on its flash) are read as one range, and the ranges all go on the
  // main connection together, so a batch costs a few round trips instead of one per
  // extent (GC and rebuild read through here).
  void ReadBytesMany(std::span<const ByteExtent> extents, std::span<const std::span<std::byte>> out,
                     std::span<Status> results) override;
  static constexpr uint64_t kCoalesceGapBytes = 16 * 1024;  // read through gaps up to this
  static constexpr uint64_t kMaxRangeBytes = 1 << 20;       // one range's size at most

  // Changes the deadline of requests from now on (and of those in flight: the poller
  // measures each against the current one). 1 ms .. 1 day.
  Status SetTimeout(uint32_t timeout_ms);
  uint32_t timeout_ms() const { return timeout_ms_.load(std::memory_order_relaxed); }
  // Fails the backend as a missed deadline would (tests; an operator's "fail").
  void Fail(const std::string& why);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // After a failure: true once no write abandoned by it can still reach the server's
  // disk (the server ended the connection, or nothing was in flight). True before one.
  bool drained() const { return drained_.load(std::memory_order_acquire); }
  // Waits up to timeout_ms for drained(); Busy, saying what is outstanding, if it does
  // not come (the host is hung or unreachable).
  Status WaitDrained(uint32_t timeout_ms);
  NbdLinkStats link_stats() const;

  static constexpr uint32_t kMaxLanes = 8;       // read lanes per backend at most
  static constexpr uint32_t kLaneFlushMs = 200;  // writes left unflushed while lanes are used

 private:
  enum class Kind : uint8_t { kRead, kWrite, kZero, kFlush };
  struct Request;
  struct Token;
  struct Lane;
  // Where a write or trim sent on the main connection covers, and the completion order
  // (kInFlight until it completes); a flush sent after its completion clears it.
  struct Dirty {
    uint64_t end;
    uint64_t seq;
  };
  static constexpr uint64_t kInFlight = ~0ull;
  NbdBackend(nbd_handle* h, std::string uri, const NbdBackendOptions& options,
             uint64_t capacity_blocks, int event_fd);
  // Registers and issues a request; completes it with an error if it cannot be issued.
  void Issue(std::shared_ptr<Request> r);
  // Sends a registered request; completes it with an error if it cannot be sent.
  void Send(const std::shared_ptr<Request>& r);
  // Notes a request being registered in pending_ in dirty_ (writes, trims) or what it
  // covers (flushes). REQUIRES: mu_.
  void RegisterLocked(Request& r);
  void RecordLatencyLocked(uint64_t ns);  // REQUIRES: mu_
  // From libnbd's completion callback (on the poller thread, libnbd's lock held: no
  // nbd_* calls in here).
  void Complete(uint64_t id, int error);
  // Hands a finished request to its waiter or the completion queue. REQUIRES: mu_ not held.
  void Finish(const std::shared_ptr<Request>& r, Status s);

  void Poller();
  void Wake();
  // The poller's work once failed: drives the connection until libnbd has the answer to
  // every request it sent (or the connection dies), then EndDrain.
  void Drain();
  void EndDrain();
  void TakeWake();  // consumes the eventfd's wake-ups
  // A flush of the main connection's completed writes, from the poller, when lanes are in
  // use and the oldest unflushed write is kLaneFlushMs old. Never waits for a slot.
  void MaybeLaneFlush();

  // Lanes. The read on one: Ok, or IoError (the backend has failed); nullopt, with
  // nothing sent, if it may not or cannot go on a lane.
  std::optional<Status> ReadOnLane(uint64_t offset, std::span<std::byte> out);
  bool OverlapsDirtyLocked(uint64_t offset, uint64_t length) const;  // REQUIRES: mu_
  // An idle lane, or a new one (connected within the deadline); nullptr if none may be
  // had: all busy, lanes refused by the server (lanes_ok_ cleared), or the backend failed.
  Lane* TakeLane();
  void GiveLane(Lane* lane, bool broken);

  nbd_handle* const h_;
  const std::string uri_;
  const NbdBackendOptions options_;
  const uint64_t capacity_blocks_;
  const int event_fd_;
  int fd_ = -1;  // the connection's socket (libnbd's)
  bool can_zero_ = false, can_flush_ = false;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> drained_{true};
  std::atomic<uint32_t> timeout_ms_;  // options_.timeout_ms, until SetTimeout

  mutable std::mutex mu_;
  std::condition_variable cv_;  // completions queued, a slot free, or a request finished
  uint64_t next_id_ = 1;
  // In flight, by id (ids rise with submission time, so the first is the oldest).
  std::map<uint64_t, std::shared_ptr<Request>> pending_;
  size_t async_pending_ = 0;  // of pending_, those for the completion queue (not sync)
  uint64_t abandoned_ = 0;    // writes and trims in flight when it failed
  struct Done {
    IoCallback done;
    Status status;
  };
  std::deque<Done> completions_;
  std::string error_;
  uint64_t requests_ = 0, timeouts_ = 0;
  static constexpr int kBuckets = 128;  // bucket b: latency < 2^(b/4) µs
  uint64_t latency_[kBuckets] = {};
  // What the main connection wrote since the flushes that cover it (by offset).
  std::multimap<uint64_t, Dirty> dirty_;
  uint64_t dirty_max_length_ = 0;     // the longest of dirty_'s, for the overlap search
  uint64_t completed_writes_ = 0;     // the last completion seq given
  uint64_t flushed_writes_ = 0;       // every write with seq <= this is flushed
  uint64_t oldest_unflushed_ns_ = 0;  // when the first write after flushed_writes_ completed
  bool lane_flush_in_flight_ = false;
  uint64_t lane_reads_ = 0;

  std::atomic<bool> lanes_ok_{false};  // the server offers multi-conn and flush
  std::atomic<uint32_t> lanes_open_{0};
  mutable std::mutex lanes_mu_;               // after mu_ if both
  std::vector<std::unique_ptr<Lane>> lanes_;  // open, idle or busy
  std::vector<Lane*> idle_lanes_;
  uint32_t lanes_connecting_ = 0;

  std::thread poller_;
};

}  // namespace eraid
