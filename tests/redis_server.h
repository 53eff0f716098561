// tests/redis_server.h — a throwaway redis-server for the storage tests: on a
// free loopback port, in its own directory, with persistence off; killed with
// SIGKILL (as a crash would) and restarted on the same port.
#pragma once

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace hiq::testing {

// The redis-server binary on PATH, or "" when there is none.
inline std::string find_redis_server() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/redis-server";
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// A loopback port nothing listens on now (the kernel's pick).
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

class RedisServer {
 public:
  RedisServer(std::string binary, std::filesystem::path dir) : binary_(std::move(binary)), dir_(std::move(dir)) {}
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }

  // Starts on `port` (0: a free one, another if that is taken meanwhile, as
  // by a test running in parallel) and waits until it answers.
  bool start(int port = 0) {
    for (int attempt = 0; attempt < (port > 0 ? 1 : 5); ++attempt)
      if (start_on(port > 0 ? port : free_loopback_port())) return true;
    return false;
  }

  // SIGKILL: no shutdown, no goodbye to clients.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Whether this server (not another one on the port: its process id is ours) answers.
  bool answers() const {
    timeval tv{0, 200'000};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    bool ok = false;
    if (c != nullptr && c->err == 0) {
      auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO server"));
      ok = reply != nullptr && reply->type == REDIS_REPLY_STRING &&
           std::string_view(reply->str, reply->len).find("process_id:" + std::to_string(pid_) + "\r") !=
               std::string_view::npos;
      if (reply != nullptr) freeReplyObject(reply);
    }
    if (c != nullptr) redisFree(c);
    return ok;
  }

 private:
  // Whether the server is up, or has exited (its port taken), or neither in 5 s.
  bool start_on(int port) {
    port_ = port;
    if (port_ <= 0) return false;
    std::filesystem::create_directories(dir_);
    const std::string port_text = std::to_string(port_);
    const std::string log = (dir_ / "redis.log").string();
    std::vector<std::string> args = {binary_, "--port", port_text, "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", dir_.string(), "--logfile", log,
                                     "--daemonize", "no"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, binary_.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return false;
    pid_ = pid;
    for (int i = 0; i < 500; ++i) {  // 5 s
      if (answers()) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: the port was taken
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
    return false;
  }

  std::string binary_;
  std::filesystem::path dir_;
  int port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace hiq::testing
