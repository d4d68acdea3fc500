// The client of support/warm_python.py (warm_python.h).
#include "support/warm_python.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace strata::testing {
namespace {

constexpr int kIdleSeconds = 20;  // the server's life without a request

// The plain way: a process of its own.
int RunCold(const std::string& python, const std::string& script, const std::string& args, std::string* out) {
  const std::string cmd = python + " " + script + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int rc = pclose(p);
  if (out) *out = text;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

constexpr const char* kServer = STRATA_SOURCE_DIR "/tests/support/warm_python.py";

// One server per Python, server version and what its imports read from the environment.
std::string ServerName(const std::string& python) {
  struct stat st {};
  stat(kServer, &st);
  std::string key = python + "\n" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "\n";
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    for (const char* prefix : {"ATEN_", "OMP_", "MKL_", "ONEDNN_", "DNNL_", "KMP_", "LD_", "PYTHON", "CUDA_", "TORCH",
                               "HF_", "TRANSFORMERS_", "STRATA_FORCE_ISA"})
      if (v.rfind(prefix, 0) == 0) key += v + "\n";
  }
  char name[64];
  std::snprintf(name, sizeof name, "strata-warm-python-%d-%016zx", static_cast<int>(getuid()), std::hash<std::string>{}(key));
  return name;
}

int Connect(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] = 0
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Starts the server detached (its own session, no terminal, none of our pipes), once: a
// second one finds the name taken and exits.
void StartServer(const std::string& python, const std::string& name) {
  const std::string server = kServer;
  const std::string idle = std::to_string(kIdleSeconds);
  const pid_t child = fork();
  if (child < 0) return;
  if (child == 0) {
    setsid();
    if (fork() != 0) _exit(0);
    const int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    execl(python.c_str(), python.c_str(), server.c_str(), name.c_str(), idle.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status;
  waitpid(child, &status, 0);
}

bool SendAll(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int RunPythonScript(const std::string& python, const std::string& script, const std::string& args, std::string* out) {
  const char* cold = std::getenv("STRATA_TEST_COLD_PYTHON");
  if (cold && std::string(cold) == "1") return RunCold(python, script, args, out);
  const std::string name = ServerName(python);
  int fd = Connect(name);
  if (fd < 0) {
    StartServer(python, name);
    // It binds its name first thing; give a loaded machine time to start Python.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      fd = Connect(name);
    }
    if (fd < 0) return RunCold(python, script, args, out);
  }
  nlohmann::json env = nlohmann::json::object();
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    const size_t eq = v.find('=');
    if (eq != std::string::npos) env[v.substr(0, eq)] = v.substr(eq + 1);
  }
  char cwd[4096];
  const nlohmann::json request = {
      {"script", script}, {"args", args}, {"cwd", getcwd(cwd, sizeof cwd) ? cwd : "/"}, {"env", env}};
  std::string reply;
  if (SendAll(fd, request.dump() + "\n")) {
    char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t line = reply.find('\n');
  if (line == std::string::npos) {  // the server went away mid-request: run it the plain way
    return RunCold(python, script, args, out);
  }
  const nlohmann::json head = nlohmann::json::parse(reply.substr(0, line), nullptr, false);
  if (out) *out = reply.substr(line + 1);
  return head.is_object() && head.contains("rc") ? head["rc"].get<int>() : -1;
}

}  // namespace strata::testing
