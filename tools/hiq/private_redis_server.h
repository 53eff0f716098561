// tools/hiq/private_redis_server.h — a redis-server of a command's own, for
// `hiq bench storage` when no server is named: on a free loopback port, in a
// temporary directory, with persistence off (--save "" --appendonly no).
//
// Life: start() returns a server that answers INFO with its own process id
// (so a port taken meanwhile by another server is noticed and another port
// tried); the destructor stops it (SIGTERM, SIGKILL after 5 s) and removes its
// directory. Should hiq die first, the kernel sends the server SIGTERM
// (PR_SET_PDEATHSIG), so no server outlives the command.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "core/status.h"
#include "tools/hiq/temporary_directory.h"

namespace hiq::cli {

class PrivateRedisServer {
 public:
  // The redis-server on PATH, or "" when there is none.
  static std::string find_binary();
  // Starts `binary` and waits (at most 5 s a port, 5 ports) until it answers.
  // Errors: kUnavailable saying why (the log's last line when it exited).
  static Result<std::unique_ptr<PrivateRedisServer>> start(const std::string& binary);

  ~PrivateRedisServer();
  PrivateRedisServer(const PrivateRedisServer&) = delete;
  PrivateRedisServer& operator=(const PrivateRedisServer&) = delete;

  int port() const { return port_; }

 private:
  explicit PrivateRedisServer(TemporaryDirectory directory) : directory_(std::move(directory)) {}
  // Whether the server came up on `port`; false when it exited (the port was taken).
  Result<bool> start_on(const std::string& binary, int port);
  void stop();

  TemporaryDirectory directory_;  // its working directory and log
  pid_t pid_ = -1;
  int port_ = -1;
};

}  // namespace hiq::cli
