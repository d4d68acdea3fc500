// main() of the suites that link LibTorch: as GoogleTest's own, or, with STRATA_WARM_TEST_SERVE
// set, a server that forks one process per test run (support/warm_test_client.cc is its client).
//
// Why: LibTorch registers its operators when it is loaded (0.2 s of CPU before main()) and
// tears its registries down at exit (0.14 s more), and ctest starts a process per test: about
// 380 times a suite. A fork of a process that has loaded it (and has run nothing else) costs
// a few milliseconds. Each run is still a process of its own, with the caller's argv, working
// folder, environment and stdin/stdout/stderr (passed as descriptors), and the client exits
// with its exit code; the child ran no test before. It ends with _exit once its output is
// flushed: the static destructors would copy the pages it shares with the server to free
// memory nobody reads again (the tests clean up in their own scope).
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/local_server.h"

namespace {

constexpr int kIdleSeconds = 20;  // the server's life without a request

// One request: the caller's descriptors 0-2 and its argv, folder and environment, each string
// ended by '\0': cwd, argc, argv..., envc, env... (support/warm_test_client.cc writes it).
struct Request {
  int fds[3] = {-1, -1, -1};
  std::vector<std::string> words;
};

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool Receive(int conn, Request* r) {
  uint32_t size = 0;
  iovec iov{&size, sizeof size};
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof size)) return false;
  const cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(3 * sizeof(int))) return false;
  std::memcpy(r->fds, CMSG_DATA(c), 3 * sizeof(int));
  std::string blob(size, '\0');
  if (!ReadAll(conn, blob.data(), size)) return false;
  for (size_t at = 0; at < blob.size();) {
    const size_t end = blob.find('\0', at);
    if (end == std::string::npos) return false;
    r->words.push_back(blob.substr(at, end - at));
    at = end + 1;
  }
  return r->words.size() >= 3;
}

// In the forked child: becomes the caller's test process; never returns.
[[noreturn]] void RunAsCaller(Request& r) {
  ::setpgid(0, 0);  // its own group, so that a caller that goes away takes all of it along
  for (int i = 0; i < 3; ++i) ::dup2(r.fds[i], i);
  ::close_range(3, ~0U, 0);
  size_t at = 0;
  if (::chdir(r.words[at++].c_str()) != 0) _exit(126);
  const int argc = std::atoi(r.words[at++].c_str());
  std::vector<char*> argv;
  for (int i = 0; i < argc && at < r.words.size(); ++i) argv.push_back(r.words[at++].data());
  argv.push_back(nullptr);
  ::clearenv();
  const size_t envc = at < r.words.size() ? std::strtoul(r.words[at++].c_str(), nullptr, 10) : 0;
  for (size_t i = 0; i < envc && at < r.words.size(); ++i) ::putenv(r.words[at++].data());
  int n = static_cast<int>(argv.size()) - 1;
  testing::InitGoogleTest(&n, argv.data());
  const int rc = RUN_ALL_TESTS();
  std::fflush(nullptr);
  _exit(rc);
}

// In the handler (a fork per connection): runs the request's child and sends back how it
// ended, or kills its group when the caller goes first (a ctest timeout).
void Handle(int conn) {
  Request r;
  if (!Receive(conn, &r)) return;
  const pid_t child = ::fork();
  if (child < 0) return;
  if (child == 0) RunAsCaller(r);
  for (int fd : r.fds) ::close(fd);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  int status = 0;
  for (;;) {
    pollfd p[2] = {{conn, POLLIN, 0}, {pidfd, POLLIN, 0}};
    ::poll(p, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 50);
    if (::waitpid(child, &status, WNOHANG) == child) break;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {  // the caller is gone
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return;
    }
  }
  const int32_t code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  (void)!::write(conn, &code, sizeof code);
}

int Serve(const char* name) {
  const int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr;
  const socklen_t len = strata::testing::AbstractAddress(name, &addr);
  if (server < 0 || ::bind(server, reinterpret_cast<sockaddr*>(&addr), len) != 0) return 0;  // another server has it
  ::listen(server, 64);
  ::signal(SIGCHLD, SIG_IGN);  // handlers are reaped by the kernel
  for (;;) {
    pollfd p{server, POLLIN, 0};
    if (::poll(&p, 1, kIdleSeconds * 1000) <= 0) return 0;
    const int conn = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    if (::fork() == 0) {
      ::close(server);
      ::signal(SIGCHLD, SIG_DFL);  // (the handler waits for its child)
      Handle(conn);
      _exit(0);
    }
    ::close(conn);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* name = std::getenv("STRATA_WARM_TEST_SERVE")) return Serve(name);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
