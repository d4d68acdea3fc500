// The monitors' files and writer thread (src/monitor): CRC-32C and TFRecord framing against
// known answers; a slow monitor never holds up Write, nor a stuck one another monitor; a failing
// one warns once and counts what it lost while the others go on; an event file is never one that exists; a folder that cannot
// be created is an error naming it; the wandb client's protocol, against stand-in clients: the
// scalars as JSON lines, a client that dies is a failed write (no SIGPIPE), one that cannot
// start is an error saying how to mend it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "src/monitor/monitors.h"
#include "src/monitor/tfevents.h"
#include "src/monitor/wandb_sink.h"
#include "support/temp_dir.h"

namespace strata::monitor {
namespace {

TEST(TfEvents, Crc32cAndItsMaskAreTensorFlows) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t c = Crc32c("abc");
  EXPECT_EQ(MaskedCrc32c("abc"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TfEvents, ARecordIsLengthCrcDataCrc) {
  const std::string r = TfRecord("hello");
  ASSERT_EQ(r.size(), 8u + 4 + 5 + 4);
  uint64_t len;
  std::memcpy(&len, r.data(), 8);
  EXPECT_EQ(len, 5u);
  uint32_t crc_len, crc_data;
  std::memcpy(&crc_len, r.data() + 8, 4);
  std::memcpy(&crc_data, r.data() + 17, 4);
  EXPECT_EQ(crc_len, MaskedCrc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 5), "hello");
  EXPECT_EQ(crc_data, MaskedCrc32c("hello"));
}

class FakeSink : public Sink {
 public:
  FakeSink(std::atomic<int>* written, int fail_from, int delay_ms)
      : written_(written), fail_from_(fail_from), delay_ms_(delay_ms) {}
  Status Write(const Scalar&, double) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (fail_from_ >= 0 && *written_ >= fail_from_) return Status(StatusCode::kResourceExhausted, "disk full");
    ++*written_;
    return Status();
  }
  Status Flush() override { return Status(); }
  std::string Describe() const override { return "fake"; }

 private:
  std::atomic<int>* written_;
  int fail_from_, delay_ms_;
};

TEST(Monitors, ASlowMonitorNeverHoldsUpTheStep) {
  std::atomic<int> written{0};
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<FakeSink>(&written, -1, 50));
  Monitors m(std::move(sinks));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) m.Write({{"Train/Samples/lr", 1.0, i}});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.1);  // 4 x 50 ms queued
  m.Drain();
  EXPECT_EQ(written.load(), 4);
  EXPECT_EQ(m.lost(), 0);
}

// A monitor stuck in a write (a W&B client that stopped reading, a stalled disk) holds up no
// other: each has a writer of its own. Both are stamped with the time of the Write.
TEST(Monitors, AStuckMonitorHoldsUpNoOther) {
  class StuckSink : public Sink {
   public:
    explicit StuckSink(std::atomic<bool>* release) : release_(release) {}
    Status Write(const Scalar&, double) override {
      while (!*release_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Status();
    }
    Status Flush() override { return Status(); }
    std::string Describe() const override { return "stuck"; }

   private:
    std::atomic<bool>* release_;
  };
  std::atomic<bool> release{false};
  std::atomic<int> healthy{0};
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<StuckSink>(&release));
  sinks.push_back(std::make_unique<FakeSink>(&healthy, -1, 0));
  Monitors m(std::move(sinks));
  for (int i = 0; i < 3; ++i) m.Write({{"Train/Samples/lr", 1.0, i}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (healthy.load() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(healthy.load(), 3);  // written while the other is still stuck in its first
  release = true;
  m.Drain();
  EXPECT_EQ(m.lost(), 0);
}

TEST(Monitors, AFailingMonitorIsCountedAndTheOthersGoOn) {
  std::atomic<int> failing{0}, healthy{0};
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<FakeSink>(&failing, 2, 0));
  sinks.push_back(std::make_unique<FakeSink>(&healthy, -1, 0));
  Monitors m(std::move(sinks));
  for (int i = 0; i < 5; ++i) m.Write({{"a", 1.0, i}, {"b", 2.0, i}});
  m.Drain();
  EXPECT_EQ(healthy.load(), 10);
  EXPECT_EQ(failing.load(), 2);
  EXPECT_EQ(m.lost(), 8);  // the batch it failed in and the three after, 2 scalars each
}

TEST(Monitors, EventFilesAreNewAndAFolderInTheWayIsAnError) {
  testing::TempDir dir;
  auto a = OpenTensorBoardSink(dir.path() + "/tb");
  auto b = OpenTensorBoardSink(dir.path() + "/tb");
  ASSERT_TRUE(a.ok() && b.ok());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/tb"))
    files += e.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_EQ(files, 2);
  std::ofstream(dir.path() + "/file") << "x";
  auto bad = OpenTensorBoardSink(dir.path() + "/file/job");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensorboard: cannot create the folder '" + dir.path() + "/file/job'"),
            std::string::npos) << bad.status().message();
  auto csv = OpenCsvSink(dir.path() + "/file");
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.status().message().find("csv_monitor"), std::string::npos);
}

TEST(Monitors, CsvCellsAreWhatPythonsCsvWriterWrites) {
  testing::TempDir dir;
  auto sink = OpenCsvSink(dir.path());
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->Write({"Train/Samples/host memory", 67022848.0, 8}, 0).ok());
  ASSERT_TRUE((*sink)->Write({"Train/Samples/host memory", 1.5e-7, 16}, 0).ok());
  std::ifstream in(dir.path() + "/Train_Samples_host_memory.csv", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "step,host memory\r\n8,67022848.0\r\n16,1.5e-07\r\n");
}

// A stand-in for the Python client: a shell script run as STRATA_PYTHON would be.
class StandInClient {
 public:
  StandInClient(const testing::TempDir& dir, const std::string& body) : path_(dir.path() + "/client.sh") {
    std::ofstream(path_) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all);
    const char* old = std::getenv("STRATA_PYTHON");
    old_ = old ? std::optional<std::string>(old) : std::nullopt;
    ::setenv("STRATA_PYTHON", path_.c_str(), 1);
  }
  ~StandInClient() {
    if (old_) ::setenv("STRATA_PYTHON", old_->c_str(), 1);
    else ::unsetenv("STRATA_PYTHON");
  }

 private:
  std::string path_;
  std::optional<std::string> old_;
};

// The wandb section switched on, the rest as DeepSpeed's defaults.
WandbConfig WandbOn() {
  WandbConfig c;
  c.enabled = true;
  return c;
}

TEST(WandbMonitor, ScalarsReachTheClientAsJsonLines) {
  testing::TempDir dir;
  const std::string got = dir.path() + "/got.jsonl";
  StandInClient client(dir, "echo ready offline /runs/offline-run-1; cat > " + got);
  {
    auto sink = OpenWandbSink(WandbOn());
    ASSERT_TRUE(sink.ok()) << sink.status().ToString();
    EXPECT_EQ((*sink)->Describe(), "wandb offline '/runs/offline-run-1'");
    ASSERT_TRUE((*sink)->Write({"Train/Samples/train_loss", 0.1, 8}, 0).ok());
    ASSERT_TRUE((*sink)->Write({"Train/Samples/grad_norm", std::nan(""), 8}, 0).ok());
    ASSERT_TRUE((*sink)->Flush().ok());
  }  // the socket closed: the client finished, and was waited for
  std::ifstream in(got);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "{\"tag\": \"Train/Samples/train_loss\", \"step\": 8, \"value\": 0.1}\n"
            "{\"tag\": \"Train/Samples/grad_norm\", \"step\": 8, \"value\": NaN}\n");
}

TEST(WandbMonitor, AClientThatDiesIsAFailedWriteNotASignal) {
  testing::TempDir dir;
  StandInClient client(dir, "echo ready offline /runs/r");
  auto sink = OpenWandbSink(WandbOn());
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  Status s;
  for (int i = 0; i < 500 && s.ok(); ++i) {  // (until the client has exited)
    s = (*sink)->Write({"Train/Samples/lr", 1e-3, i}, 0);
    if (s.ok()) s = (*sink)->Flush();
    if (s.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the wandb client stopped reading"), std::string::npos) << s.message();
}

TEST(WandbMonitor, AClientThatCannotStartSaysHowToMendIt) {
  testing::TempDir dir;
  {
    StandInClient client(dir, "echo \"error ModuleNotFoundError: No module named 'wandb'\"; exit 1");
    auto sink = OpenWandbSink(WandbOn());
    ASSERT_FALSE(sink.ok());
    EXPECT_NE(sink.status().message().find("No module named 'wandb'"), std::string::npos) << sink.status().message();
    EXPECT_NE(sink.status().message().find("STRATA_PYTHON"), std::string::npos) << sink.status().message();
  }
  ::setenv("STRATA_PYTHON", (dir.path() + "/no-such-python").c_str(), 1);
  auto none = OpenWandbSink(WandbOn());
  ::unsetenv("STRATA_PYTHON");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("wandb: cannot start"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace strata::monitor
