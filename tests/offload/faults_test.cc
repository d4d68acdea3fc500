// Failures the tier must survive: injected write and read errors (fault hook), a file-size
// limit (RLIMIT_FSIZE -> EFBIG), short and EAGAIN completions, and swap folders left by a
// killed process. Each error names the tensor; nothing else is corrupted.
#include <gtest/gtest.h>

#include <mutex>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "offload/test_util.h"
#include "strata/nvme_tier.h"
#include "support/faulty_io_engine.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

using testing::Fault;
using testing::FaultKind;
using testing::RandomBytes;
using testing::TempDir;
using testing::TierOptions;

constexpr size_t kBlock = 1 << 20;

struct Faulted {
  std::unique_ptr<NvmeTier> tier;
  std::vector<std::vector<std::byte>> data;
  std::vector<ExtentId> ids;
};

// Opens a tier whose engine injects `faults`, registers 3 tensors of 3.5 blocks each.
Faulted OpenWithFaults(const std::string& dir, std::vector<Fault> faults) {
  auto opts = TierOptions(dir, kBlock, 4);
  opts.wrap_engine = [faults](std::unique_ptr<IoEngine> inner) -> std::unique_ptr<IoEngine> {
    return std::make_unique<testing::FaultyIoEngine>(std::move(inner), faults);
  };
  Faulted f;
  auto tier = NvmeTier::Open(opts);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  f.tier = std::move(tier).value();
  for (int i = 0; i < 3; ++i) {
    f.data.push_back(RandomBytes(3 * kBlock + kBlock / 2, 10 + i));
    auto id = f.tier->Allocate("block" + std::to_string(i) + ".adam_m", f.data.back().size());
    EXPECT_TRUE(id.ok());
    f.ids.push_back(*id);
  }
  return f;
}

bool ReadsBack(Faulted& f, int i) {
  std::vector<std::byte> dst(f.data[i].size());
  return f.tier->Read(f.ids[i], dst).Wait().ok() && dst == f.data[i];
}

TEST(Faults, InjectedWriteErrorNamesTheTensorAndSparesTheOthers) {
  TempDir dir;
  // Tensor 0 takes write requests 0..3; request 5 belongs to tensor 1.
  Faulted f = OpenWithFaults(dir.path(), {{IoOp::kWrite, 5, FaultKind::kError, EFBIG}});
  ASSERT_TRUE(f.tier->Write(f.ids[0], f.data[0]).Wait().ok());
  Status s = f.tier->Write(f.ids[1], f.data[1]).Wait();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("block1.adam_m"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(f.tier->file_path()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("errno 27"), std::string::npos) << s.message();  // EFBIG
  ASSERT_TRUE(f.tier->Write(f.ids[2], f.data[2]).Wait().ok());
  // The failed tensor is refused, not read as valid; the others are intact.
  std::vector<std::byte> dst(f.data[1].size());
  Status r = f.tier->Read(f.ids[1], dst).Wait();
  EXPECT_EQ(r.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.message().find("last write failed"), std::string::npos);
  EXPECT_TRUE(ReadsBack(f, 0));
  EXPECT_TRUE(ReadsBack(f, 2));
  // Writing it again (the fault was one-shot) makes it valid.
  ASSERT_TRUE(f.tier->Write(f.ids[1], f.data[1]).Wait().ok());
  EXPECT_TRUE(ReadsBack(f, 1));
}

TEST(Faults, InjectedReadErrorNamesTheTensorAndARetrySucceeds) {
  TempDir dir;
  Faulted f = OpenWithFaults(dir.path(), {{IoOp::kRead, 2, FaultKind::kError, EIO}});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.tier->Write(f.ids[i], f.data[i]).Wait().ok());
  std::vector<std::byte> dst(f.data[0].size());
  Status s = f.tier->Read(f.ids[0], dst).Wait();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("block0.adam_m"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("offset"), std::string::npos) << s.message();
  EXPECT_TRUE(ReadsBack(f, 0));  // the data on disk is untouched
  EXPECT_TRUE(ReadsBack(f, 1));
  EXPECT_TRUE(ReadsBack(f, 2));
}

TEST(Faults, ShortAndEagainCompletionsAreResubmitted) {
  TempDir dir;
  Faulted f = OpenWithFaults(dir.path(), {{IoOp::kWrite, -1, FaultKind::kShort, 0},
                                          {IoOp::kRead, 1, FaultKind::kEagain, 0},
                                          {IoOp::kRead, 4, FaultKind::kShort, 0}});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.tier->Write(f.ids[i], f.data[i]).Wait().ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ReadsBack(f, i)) << i;
  EXPECT_GT(f.tier->stats().resubmissions, 10u);
}

TEST(Faults, FileSizeLimitIsReportedAtReservationWithTheTensorName) {
  TempDir dir;
  // In a child, so the limit and the ignored SIGXFSZ stay there.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{8 << 20, 8 << 20};
    setrlimit(RLIMIT_FSIZE, &lim);
    auto tier = NvmeTier::Open(TierOptions(dir.path()));
    if (!tier.ok()) _exit(10);
    auto a = (*tier)->Allocate("fits", 4 << 20);
    if (!a.ok()) _exit(11);
    auto src = RandomBytes(4 << 20, 1);
    if (!(*tier)->Write(*a, src).Wait().ok()) _exit(12);
    auto b = (*tier)->Allocate("too.big", 8 << 20);
    if (b.ok()) _exit(13);
    if (b.status().code() != StatusCode::kResourceExhausted) _exit(14);
    if (b.status().message().find("too.big") == std::string::npos) _exit(15);
    if (b.status().message().find("errno 27") == std::string::npos) _exit(16);
    std::vector<std::byte> dst(4 << 20);
    if (!(*tier)->Read(*a, dst).Wait().ok() || dst != src) _exit(17);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child check " << WEXITSTATUS(status) << " failed";
}

TEST(Faults, SwapFolderOfAKilledProcessIsReportedAndNeverRead) {
  TempDir dir;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto tier = NvmeTier::Open(TierOptions(dir.path()));
    if (!tier.ok()) _exit(10);
    auto a = (*tier)->Allocate("doomed", 1 << 20);
    auto src = RandomBytes(1 << 20, 1);
    if (!a.ok() || !(*tier)->Write(*a, src).Wait().ok()) _exit(11);
    kill(getpid(), SIGKILL);  // no destructor runs
    _exit(12);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));

  // Without removal: reported, left alone.
  auto keep = TierOptions(dir.path());
  keep.remove_stale = false;
  auto t1 = NvmeTier::Open(keep);
  ASSERT_TRUE(t1.ok());
  ASSERT_EQ((*t1)->stale_folders().size(), 1u);
  const auto stale = (*t1)->stale_folders()[0];
  EXPECT_GE(stale.bytes, 1u << 20);
  EXPECT_FALSE(stale.removed);
  EXPECT_NE(stale.path, (*t1)->folder());  // a fresh folder, never the old data
  EXPECT_TRUE(std::filesystem::exists(stale.path));
  // A live tier's folder is not stale for another opener.
  auto t2 = NvmeTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(t2.ok());
  ASSERT_EQ((*t2)->stale_folders().size(), 1u);
  EXPECT_TRUE((*t2)->stale_folders()[0].removed);
  EXPECT_FALSE(std::filesystem::exists(stale.path));
  EXPECT_TRUE(std::filesystem::exists((*t1)->folder()));
}

// A process killed between creating its hidden folder and naming it (or while removing
// it) leaves a hidden folder: reported and removed once its pid is gone and it is a minute
// old (one being removed: at once); a live process's, or a fresh one, is left alone.
TEST(Faults, HiddenFolderOfAProcessKilledMidCreationIsReported) {
  TempDir dir;
  pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  auto make = [&](const std::string& leaf, bool old) {
    const auto p = std::filesystem::path(dir.path()) / leaf;
    std::filesystem::create_directory(p);
    std::ofstream(p / "swap.bin") << std::string(4096, 'x');
    if (old) std::filesystem::last_write_time(p, std::filesystem::file_time_type::clock::now() - std::chrono::minutes(5));
    return p;
  };
  const auto abandoned = make(fmt::format(".strata-swap-r0-p{}-0badf00d", dead), true);
  const auto removing = make(fmt::format(".strata-swap-r1-p{}-0badf00d.removing", dead), true);
  const auto fresh = make(fmt::format(".strata-swap-r2-p{}-0badf00d", dead), false);
  const auto removing_fresh = make(fmt::format(".strata-swap-r6-p{}-0badf00d.removing", dead), false);
  const auto alive = make(fmt::format(".strata-swap-r3-p{}-0badf00d", getpid()), true);
  // In view without its lock: half swept in place by a process killed mid-way (the chaos test
  // met it once); judged by the same rule.
  const auto half_swept = make(fmt::format("strata-swap-r4-p{}-0badf00d", dead), true);
  const auto half_swept_fresh = make(fmt::format("strata-swap-r5-p{}-0badf00d", dead), false);
  auto tier = NvmeTier::Open(TierOptions(dir.path()));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_EQ((*tier)->stale_folders().size(), 4u);
  for (const auto& s : (*tier)->stale_folders()) {
    EXPECT_TRUE(s.path == abandoned.string() || s.path == removing.string() || s.path == half_swept.string() ||
                s.path == removing_fresh.string())
        << s.path;
    EXPECT_EQ(s.bytes, 4096u);
    EXPECT_TRUE(s.removed);
  }
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  EXPECT_FALSE(std::filesystem::exists(removing));
  EXPECT_FALSE(std::filesystem::exists(removing_fresh));
  EXPECT_TRUE(std::filesystem::exists(fresh));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_FALSE(std::filesystem::exists(half_swept));
  EXPECT_TRUE(std::filesystem::exists(half_swept_fresh));
  // The sweep left nothing of its own behind ("<name>.removing" folders are removed too).
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".removing"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Ranks of one node share nvme_path and open their tiers at the same moment: none may take
// another's folder, still being created, for one left by a dead process.
TEST(Faults, RanksOpeningTogetherNeverRemoveEachOthersFolders) {
  testing::TempDir dir;
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0}, stale{0};
    std::mutex mu;
    std::string why;  // what went wrong first
    auto fail = [&](const std::string& what) {
      failures++;
      std::lock_guard<std::mutex> lock(mu);
      if (why.empty()) why = what;
    };
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        auto o = testing::TierOptions(dir.path());
        o.rank = r;
        auto tier = NvmeTier::Open(o);
        if (!tier.ok()) return fail(tier.status().ToString());
        stale += static_cast<int>((*tier)->stale_folders().size());
        for (const auto& f : (*tier)->stale_folders()) fail("took for stale: " + f.path);
        auto id = (*tier)->Allocate("x", 8192);
        if (!id.ok()) return fail(id.status().ToString());
        auto src = testing::RandomBytes(8192, r);
        std::vector<std::byte> dst(8192);
        if (Status w = (*tier)->Write(*id, src).Wait(); !w.ok()) return fail(w.ToString());
        if (Status rd = (*tier)->Read(*id, dst).Wait(); !rd.ok()) return fail(rd.ToString());
        if (dst != src) fail("read back other bytes");
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(failures.load(), 0) << "round " << round << ": " << why;
    ASSERT_EQ(stale.load(), 0) << "round " << round << ": " << why;
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A rank whose run ends removes its folder while a sibling is still scanning nvme_path: the
// scanner may open the folder's lock just before the folder is renamed away and take it
// just after the owner lets it go. That folder was never stale (CI saw it once, as a
// 0-byte "stale" folder of the test's own pid).
TEST(Faults, AFolderRemovedWhileASiblingScansIsNeverTakenForStale) {
  testing::TempDir dir;
  std::atomic<bool> stop{false};
  std::atomic<int> closed{0};
  std::vector<std::thread> closers;  // more threads than cores, so a scanner is preempted mid-way
  for (int r = 1; r <= 6; ++r) {
    closers.emplace_back([&, r] {
      auto o = TierOptions(dir.path());
      o.rank = r;
      while (!stop) {
        auto tier = NvmeTier::Open(o);
        if (tier.ok()) closed++;
      }
    });
  }
  std::string first;
  int stale = 0, scans = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until || closed < 200) {
    auto tier = NvmeTier::Open(TierOptions(dir.path()));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    ++scans;
    for (const auto& f : (*tier)->stale_folders()) {
      ++stale;
      if (first.empty()) first = f.path;
    }
  }
  stop = true;
  for (auto& t : closers) t.join();
  EXPECT_EQ(stale, 0) << "of " << scans << " scans while " << closed << " tiers closed; first: " << first;
}

// Killed after its hidden folder's lock file was made (mid-creation, or mid-removal): the
// free lock says so at once, whatever the pid, once the file is a few seconds old. A held
// lock, or a lock file just made (its owner may be about to lock it), is left alone.
TEST(Faults, HiddenFolderWhoseLockIsFreeIsReportedAtOnce) {
  TempDir dir;
  auto make = [&](const std::string& leaf, int age_s) {
    const auto p = std::filesystem::path(dir.path()) / leaf;
    std::filesystem::create_directory(p);
    std::ofstream(p / "owner.lock").flush();
    std::ofstream(p / "swap.bin") << std::string(4096, 'x');
    std::filesystem::last_write_time(p / "owner.lock",
                                     std::filesystem::file_time_type::clock::now() - std::chrono::seconds(age_s));
    return p;
  };
  // The pid in each name is this process's: alive, so only the lock can tell.
  const auto creating = make(fmt::format(".strata-swap-r0-p{}-0badf00d", getpid()), 30);
  const auto removing = make(fmt::format(".strata-swap-r1-p{}-0badf00d.removing", getpid()), 30);
  const auto just_made = make(fmt::format(".strata-swap-r2-p{}-0badf00d", getpid()), 0);
  const auto held = make(fmt::format(".strata-swap-r3-p{}-0badf00d", getpid()), 30);
  const int held_fd = open((held / "owner.lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held_fd, 0);
  ASSERT_EQ(flock(held_fd, LOCK_EX | LOCK_NB), 0);
  auto tier = NvmeTier::Open(TierOptions(dir.path()));
  close(held_fd);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  std::set<std::string> reported;
  for (const auto& s : (*tier)->stale_folders()) reported.insert(s.path);
  EXPECT_EQ(reported, (std::set<std::string>{creating.string(), removing.string()}));
  EXPECT_FALSE(std::filesystem::exists(creating));
  EXPECT_FALSE(std::filesystem::exists(removing));
  EXPECT_TRUE(std::filesystem::exists(just_made));
  EXPECT_TRUE(std::filesystem::exists(held));
}


// A signal's stop removes this process's folders; a tier still starting up on another thread
// must not make a new one after it (it would outlive the process in view). In a child
// process: the stop is for good.
TEST(Faults, NoSwapFolderIsMadeAfterTheStopRemovedThem) {
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {
    auto before = NvmeTier::Open(TierOptions(dir.path()));
    if (!before.ok()) _exit(2);
    if (RemoveThisProcessSwapFolders().size() != 1) _exit(3);
    auto after = NvmeTier::Open(TierOptions(dir.path()));
    const bool refused = !after.ok() && after.status().message().find("stopping") != std::string::npos;
    _exit(refused ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no tier; 3: not one folder removed; 4: a folder made after the stop";
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace strata
