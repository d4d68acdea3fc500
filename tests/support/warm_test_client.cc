// strata_warm_test BINARY ARGS...: runs a LibTorch suite's test as `BINARY ARGS` would, through a
// warm server of that binary (support/warm_test_main.cc), started here on first use; ctest
// calls it in front of each such test (the suites' CROSSCOMPILING_EMULATOR). One server per
// binary build and environment. Where no server can be reached, or STRATA_TEST_COLD=1, it
// becomes the binary itself.
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support/local_server.h"

extern char** environ;

namespace {

[[noreturn]] void RunCold(char** argv) {
  ::execv(argv[0], argv);
  std::fprintf(stderr, "strata_warm_test: cannot run %s: %s\n", argv[0], std::strerror(errno));
  std::exit(127);
}

// The binary as built (its path, inode and time) and the whole environment.
std::string ServerName(const char* binary) {
  struct stat st {};
  if (::stat(binary, &st) != 0) return "";
  char real[PATH_MAX];
  std::string key = (::realpath(binary, real) ? real : binary) + std::string("\n") + std::to_string(st.st_ino) + "." +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n";
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::sort(env.begin(), env.end());
  for (const std::string& v : env) key += v + "\n";
  char name[64];
  std::snprintf(name, sizeof name, "strata-warm-test-%d-%016zx", static_cast<int>(::getuid()),
                std::hash<std::string>{}(key));
  return name;
}

bool Send(int conn, char** argv, int argc) {
  std::string blob;
  auto add = [&](const std::string& s) { blob.append(s).push_back('\0'); };
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return false;
  add(cwd);
  add(std::to_string(argc));
  for (int i = 0; i < argc; ++i) add(argv[i]);
  size_t envc = 0;
  for (char** e = environ; *e; ++e) ++envc;
  add(std::to_string(envc));
  for (char** e = environ; *e; ++e) add(*e);
  uint32_t size = static_cast<uint32_t>(blob.size());
  int fds[3];
  for (int i = 0; i < 3; ++i) fds[i] = ::fcntl(i, F_GETFD) == -1 ? ::open("/dev/null", O_RDWR) : i;
  iovec iov{&size, sizeof size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  return ::sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof size) &&
         strata::testing::SendAll(conn, blob.data(), blob.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: strata_warm_test BINARY [ARGS...]\n");
    return 2;
  }
  char** run = argv + 1;
  const char* cold = std::getenv("STRATA_TEST_COLD");
  const std::string name = (cold && *cold == '1') ? "" : ServerName(run[0]);
  if (name.empty()) RunCold(run);
  // Its start is LibTorch's (under a second); a loaded machine may take longer.
  const int conn = strata::testing::ConnectOrStart(name, {run[0]}, "STRATA_WARM_TEST_SERVE=" + name,
                                                   std::chrono::seconds(15));
  if (conn < 0 || !Send(conn, run, argc - 1)) RunCold(run);
  // The test runs in the server's child, on our descriptors; we wait for how it ended.
  int32_t code = 0;
  size_t got = 0;
  while (got < sizeof code) {
    const ssize_t n = ::read(conn, reinterpret_cast<char*>(&code) + got, sizeof code - got);
    if (n <= 0) {
      std::fprintf(stderr, "strata_warm_test: the server of %s went away during the test\n", run[0]);
      return 1;
    }
    got += static_cast<size_t>(n);
  }
  return code;
}
