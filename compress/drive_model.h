// DriveModel: the timing of an SSD, so that an emulated drive finishes each I/O when a
// real drive of its kind would, not as soon as the host's CPU has done the work.
// Benchmarks on it are bound by the modeled drives (stable from run to run, shaped like
// real SSDs: a degraded RAID5 read costs n device reads, a program blocks a die), not by
// the two cores they run on. docs/compressed-drive.md ("Timing model") has the profiles,
// their sources and where the model departs from a real drive.
//
// What is modeled (every duration multiplied by the profile's time_scale):
//   - The controller: each command occupies it for controller_{read,write}_us (one
//     command at a time): the drive's command-rate cap.
//   - The host link: bytes in and out at host_{read,write}_mb_s (the interface's cap).
//   - The compression engine (a computational drive compresses in hardware):
//     compress_mb_s / decompress_mb_s of logical bytes; 0 = no engine to charge.
//   - NAND: channels x dies_per_channel parallel units. A flash byte offset lies in page
//     offset / page_bytes, on unit page % units, whose channel is unit % channels. A read
//     senses each page it touches (read_us on the unit), then moves the bytes wanted over
//     the channel; a program moves the page over the channel, then holds the unit for
//     program_us; an erase holds each unit of the erase block for erase_us.
//   - The write buffer (DRAM): a flash write completes once it is in the buffer; its
//     pages leave the buffer when their programs end. A write that does not fit waits
//     for room, first come first served. A flush waits for every program, unless the
//     buffer is power-loss protected (plp), when it completes at once.
//   - Queueing: each unit, channel, the controller, link and engine keeps a calendar of
//     its reservations; an operation takes the first gap that fits from when it is ready.
//     (A plain busy-until time would make a read that is ready late — queued on a busy
//     die — hold the channel and controller for every read ready before it.) With
//     program_suspend, a read that finds its unit programming or erasing suspends it
//     (suspend_us) instead of waiting; the program's resume delay is not modeled.
//
// The model holds no data and does no I/O: callers (TimedFlash, TimedDrive in
// timed_backend.h) ask it when an operation completes and release the operation then.
// Its own cost is a few hundred nanoseconds of arithmetic per I/O under its lock.
//
// Thread-safety: all methods may be called concurrently (one mutex, held for the
// arithmetic only).
#pragma once

#include <cstdint>
#include <mutex>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/types.h"
#include "compress/backend.h"

namespace eraid {

struct DriveProfile {
  std::string name = "none";  // "none": no model (the drive finishes at the CPU's pace)
  uint32_t channels = 8;
  uint32_t dies_per_channel = 4;
  uint32_t page_bytes = 16384;  // the program unit (all planes of a die)
  double read_us = 60;          // tR: sense one page
  double program_us = 700;      // tPROG
  double erase_us = 3500;       // tBERS
  double channel_mb_s = 1200;   // each channel's transfer rate (MB = 10^6 bytes)
  double host_read_mb_s = 3500, host_write_mb_s = 3000;
  double controller_read_us = 1, controller_write_us = 1;
  double compress_mb_s = 0, decompress_mb_s = 0;  // 0: no engine time
  uint64_t write_buffer_bytes = 8ull << 20;
  bool plp = true;              // the buffer survives power loss: flush at once
  bool program_suspend = true;  // reads suspend programs and erases
  double suspend_us = 10;       // what a suspend and resume cost the read
  double time_scale = 1;        // every duration times this (>= 1 slows the drive)

  bool enabled() const { return name != "none"; }
  uint32_t units() const { return channels * dies_per_channel; }
  // The profile's own figures, derived (unscaled): what a datasheet would print.
  double RandomReadIops() const;   // 4 KiB, at a queue depth that fills every unit
  double RandomWriteIops() const;  // 4 KiB, sustained (the buffer draining to NAND)
  double ReadLatencyUs() const;    // 4 KiB at queue depth 1, idle drive
  // The curve the model should give for 4 KiB random I/O at queue depth `qd` (unscaled
  // IOPS): mean value analysis of the drive as a closed queueing network (units and
  // channels chosen at random, one controller, link and engine); writes capped by the
  // NAND's program rate. Random choice makes units collide: at a queue depth equal to the
  // unit count about half of them are busy, not all.
  double ExpectedIops(uint32_t qd, bool reads) const;
  // "name[,key=value...]" as `--drive-model` takes it; Spec() writes it back.
  std::string Spec() const;
};

// The model's own curve for 4 KiB random reads at queue depth `qd`: the model run on a
// virtual clock, `qd` clients each reading a random incompressible block (a record of
// 4 KiB and its header, packed as the drive stores them in `flash_bytes`) through the
// flash part and then the host part, as TimedDrive does, the next read issued when the
// last completes. No host cost at all: what a real-time run of the drive (threads,
// sleeps, the emulated drive's own work) is validated against. ExpectedIops is the
// closed form; it assumes random service times and so departs from this at depth.
// Scaled by the profile's time_scale, like everything the model returns.
struct ModelCurve {
  double iops = 0, mean_latency_us = 0;
};
ModelCurve SimulateRandomReads(const DriveProfile& p, uint32_t qd, uint64_t flash_bytes,
                               uint64_t reads = 200000, uint64_t seed = 1);
// The same for 4 KiB writes, their host part only (controller, link, engine): a write
// completes once in the drive's buffer, so while the NAND keeps up this is the curve; when
// it does not, the NAND's program rate is (a caller measures that: it depends on the
// drive's own GC).
ModelCurve SimulateRandomWrites(const DriveProfile& p, uint32_t qd, uint64_t writes = 200000);

// The named profiles: nvme-tlc, csd, sata-ssd, none.
std::vector<std::string> DriveProfileNames();
// A named profile with key=value overrides, "csd,read_us=80,time_scale=20", or
// InvalidArgument naming the bad key or value. Keys are DriveProfile's field names.
Result<DriveProfile> ParseDriveProfile(const std::string& spec);

// Counters of a modeled drive since it was made: ops and where their time went.
struct DriveModelStats {
  uint64_t ops = 0;                                          // host and flash operations charged
  uint64_t flash_reads = 0, flash_programs = 0, erases = 0;  // NAND operations (pages, blocks)
  uint64_t latency_ns = 0;    // sum over ops of (completion - submission)
  uint64_t service_ns = 0;    // of which the op's own work (its longest path)
  uint64_t unit_busy_ns = 0;  // sum over the NAND units of their busy time
  uint64_t elapsed_ns = 0;    // since the model was made
  uint32_t units = 0;
  uint32_t in_flight = 0;  // operations not yet complete now
  // Share of the NAND units' time spent busy since the model was made.
  double utilization() const {
    return elapsed_ns && units ? static_cast<double>(unit_busy_ns) / (double(elapsed_ns) * units)
                               : 0.0;
  }
  // Mean operations in the drive (Little's law over the whole run).
  double mean_queue_depth() const {
    return elapsed_ns ? static_cast<double>(latency_ns) / elapsed_ns : 0.0;
  }
  // Share of the ops' time spent waiting for a busy resource, not served.
  double queued_share() const {
    return latency_ns ? 1.0 - static_cast<double>(service_ns) / latency_ns : 0.0;
  }
};

// A resource's reservations: [start, end) intervals, sorted and disjoint.
class Calendar {
 public:
  // The earliest start >= at where [start, start + ns) overlaps no reservation.
  uint64_t FirstGap(uint64_t at, uint64_t ns) const;
  bool Covers(uint64_t t) const;  // a reservation holds time t
  void Add(uint64_t start, uint64_t ns);
  void Prune(uint64_t now);  // forgets the reservations that have ended
  size_t size() const { return r_.size(); }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> r_;
};

class DriveModel {
 public:
  // REQUIRES: profile.enabled(). `clock` must outlive the model.
  explicit DriveModel(const DriveProfile& profile, const Clock& clock = SystemClock::Default());

  const DriveProfile& profile() const { return p_; }
  const Clock& clock() const { return clock_; }

  // Each returns the clock time (ns) at which the operation, submitted now, completes.
  // Flash side (TimedFlash, under the emulated drive): byte ranges of its flash.
  uint64_t FlashRead(uint64_t offset_bytes, uint64_t length_bytes);
  // Byte ranges read together (one batch): each page they touch is sensed once and serves
  // every range in it from the page register, as a drive reads the records of a page.
  // (Read one by one, sixteen small records of one page sensed it sixteen times on one
  // unit: a conversion's chunk held that unit for 56 ms at csd x50.)
  uint64_t FlashReadMany(std::span<const ByteExtent> extents);
  uint64_t FlashWrite(uint64_t offset_bytes, uint64_t length_bytes);
  uint64_t FlashErase(uint64_t offset_bytes, uint64_t length_bytes);
  uint64_t FlashFlush();
  // Host side (TimedDrive, over the emulated drive): the commands (one per 4 KiB), their
  // link transfer and (engine) their (de)compression. A read was submitted at
  // `submitted_ns` (0 = now; its whole latency is counted from then) and its flash part
  // ends at `flash_done_ns` (0 = now): the host part follows it.
  uint64_t HostRead(uint64_t logical_bytes, bool engine, uint64_t submitted_ns = 0,
                    uint64_t flash_done_ns = 0);
  uint64_t HostWrite(uint64_t logical_bytes, bool engine);

  // Sleeps until the clock reads `ready_ns` (a SystemClock: the thread sleeps with a
  // small timer slack; a ManualClock: returns at once, the test moves time).
  void WaitUntil(uint64_t ready_ns) const;

  DriveModelStats stats() const;

 private:
  struct Page {
    uint32_t unit;
    uint32_t channel;
  };
  Page PageAt(uint64_t page) const;
  uint64_t Ns(double us) const;                            // scaled microseconds
  uint64_t TransferNs(uint64_t bytes, double mb_s) const;  // scaled; 0 when mb_s is 0
  // Reserves `ns` in the first gap from `at` free on every calendar given (the first is
  // where it is added): returns the end.
  uint64_t Take(Calendar* c, uint64_t at, uint64_t ns, Calendar* also = nullptr);
  // Senses `page` from `now` and moves `bytes` of it over its channel; returns the end.
  // REQUIRES: mu_ held.
  uint64_t SensePage(uint64_t page, uint64_t bytes, uint64_t now);
  // A read's sense on unit u from `at` for `ns`, suspending a program there if allowed.
  uint64_t TakeUnitForRead(uint32_t u, uint64_t at, uint64_t ns);  // REQUIRES: mu_ held
  // A program or erase on unit u. REQUIRES: mu_ held.
  uint64_t TakeUnitForProgram(uint32_t u, uint64_t at, uint64_t ns);
  void Account(uint64_t now, uint64_t end, uint64_t service_ns);  // REQUIRES: mu_ held

  const DriveProfile p_;
  const Clock& clock_;
  const uint64_t start_ns_;
  mutable std::mutex mu_;
  std::vector<Calendar> unit_reads_, unit_programs_;  // programs and erases
  std::vector<Calendar> channels_;
  Calendar controller_, link_in_, link_out_, engine_;
  uint64_t now_ = 0;  // the clock at the call under way: reservations before it are pruned
  // The write buffer: bytes held now, the programs that release them (end, bytes), and
  // the last admission (first come, first served).
  uint64_t buffered_bytes_ = 0;
  std::priority_queue<std::pair<uint64_t, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>,
                      std::greater<>>
      programs_;
  uint64_t last_admit_ = 0, last_program_end_ = 0;
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> ends_;  // in flight
  DriveModelStats stats_;
};

}  // namespace eraid
