#include "tools/hiq/private_redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "storage/storage_bench.h"

namespace hiq::cli {
namespace {

// A loopback port nothing listens on now (the kernel's pick).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

std::string PrivateRedisServer::find_binary() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    if (end > start) {
      const std::string candidate = dirs.substr(start, end - start) + "/redis-server";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    start = end + 1;
  }
  return "";
}

Result<std::unique_ptr<PrivateRedisServer>> PrivateRedisServer::start(const std::string& binary) {
  HIQ_ASSIGN_OR_RETURN(TemporaryDirectory directory, TemporaryDirectory::create("hiq-bench-redis"));
  std::unique_ptr<PrivateRedisServer> server(new PrivateRedisServer(std::move(directory)));
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = free_loopback_port();
    if (port <= 0) return unavailable("no free loopback port for redis-server");
    HIQ_ASSIGN_OR_RETURN(const bool up, server->start_on(binary, port));
    if (up) return server;
  }
  return unavailable(binary + " did not start on 5 ports: " + last_line_of(server->directory_.path() + "/redis.log"));
}

Result<bool> PrivateRedisServer::start_on(const std::string& binary, int port) {
  const std::string port_text = std::to_string(port), log = directory_.path() + "/redis.log";
  std::vector<std::string> args = {binary,     "--port",  port_text,  "--bind",      "127.0.0.1", "--save",
                                   "",         "--appendonly", "no",  "--dir",       directory_.path(),  "--logfile",
                                   log,        "--daemonize",  "no"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return unavailable("cannot start " + binary + ": fork failed");
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // hiq died before the prctl
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
    }
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  port_ = port;

  RedisBackendOptions probe;
  probe.port = port;
  probe.connect_timeout_ms = 200;
  probe.command_timeout_ms = 500;
  for (int i = 0; i < 500; ++i) {  // 5 s
    if (auto info = probe_redis_server(probe); info.is_ok() && info->process_id == pid_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: the port was taken, or worse
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return unavailable("cannot run " + binary);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop();
  return unavailable(binary + " did not answer on port " + port_text + " within 5 s: " + last_line_of(log));
}

void PrivateRedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; ++i) {  // 5 s
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

PrivateRedisServer::~PrivateRedisServer() { stop(); }  // then directory_ goes

}  // namespace hiq::cli
