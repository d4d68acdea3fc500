// The client of support/warm_python.py (warm_python.h).
#include "support/warm_python.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>

#include "support/local_server.h"

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

}  // namespace

int RunPythonScript(const std::string& python, const std::string& script, const std::string& args, std::string* out) {
  const char* cold = std::getenv("STRATA_TEST_COLD_PYTHON");
  if (cold && std::string(cold) == "1") return RunCold(python, script, args, out);
  const std::string name = ServerName(python);
  // The server binds its name first thing; give a loaded machine time to start Python.
  const int fd = ConnectOrStart(name, {python, kServer, name, std::to_string(kIdleSeconds)}, "", std::chrono::seconds(30));
  if (fd < 0) return RunCold(python, script, args, out);
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
  const std::string line_out = request.dump() + "\n";
  if (SendAll(fd, line_out.data(), line_out.size())) {
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
