// The suite's warm servers (warm_python.cc's Python, warm_test_client.cc's LibTorch suites): each
// listens on an abstract Unix socket of its own name (no file to clean up), and is started
// detached by the first client that finds none, then serves the others until it idles out.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

// The abstract address of `name` (sun_path[0] = 0, the name after it, cut to fit) and its length.
inline socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  const size_t len = std::min(name.size(), sizeof addr->sun_path - 1);
  std::memcpy(addr->sun_path + 1, name.data(), len);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

// A connection to the server of `name`; -1 if none listens.
inline int ConnectLocal(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Runs `argv` (with `env`, "KEY=VALUE", added where not empty) detached: its own session, no
// terminal, /dev/null on 0-2 and none of our other descriptors, so that it outlives the caller
// and holds none of its pipes.
inline void StartDetached(const std::vector<std::string>& argv, const std::string& env = "") {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return;
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) _exit(0);
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    ::close_range(3, ~0U, 0);
    if (!env.empty()) ::putenv(const_cast<char*>(env.c_str()));
    ::execv(args[0], args.data());
    _exit(127);
  }
  int status;
  ::waitpid(child, &status, 0);
}

// A connection to the server of `name`, starting it (StartDetached(argv, env)) when none answers
// and waiting up to `wait` for it to bind; -1 if it never did.
inline int ConnectOrStart(const std::string& name, const std::vector<std::string>& argv, const std::string& env,
                          std::chrono::seconds wait) {
  int fd = ConnectLocal(name);
  if (fd >= 0) return fd;
  StartDetached(argv, env);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fd = ConnectLocal(name);
  }
  return fd;
}

// Writes all of `data` (false if the peer went away).
inline bool SendAll(int fd, const char* data, size_t n) {
  for (size_t at = 0; at < n;) {
    const ssize_t sent = ::send(fd, data + at, n - at, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    at += static_cast<size_t>(sent);
  }
  return true;
}

}  // namespace strata::testing
