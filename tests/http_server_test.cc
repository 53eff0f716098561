// The HTTP front's listening socket: a burst of clients connecting at once is
// queued, not dropped (a dropped SYN costs the client a one-second
// retransmit), and a port in use is refused rather than shared.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include "server/http_server.h"
#include "server/serving_stack.h"

namespace hiq {
namespace {

// A server on any free port of the loopback, over a tiny CPU stack; bound
// (listening) but not serving.
class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServeConfig c;
    c.model_dir = std::string(HIQ_TEST_MODELS_DIR) + "/tiny-qwen3";
    c.max_total_tokens = 256;
    c.hicache = false;
    auto stack = ServingStack::create(c);
    ASSERT_TRUE(stack.is_ok()) << stack.status().to_string();
    stack_ = std::move(*stack);
    HttpOptions o;
    o.port = 0;
    server_ = std::make_unique<HttpServer>(*stack_, o);
    auto port = server_->bind();
    ASSERT_TRUE(port.is_ok()) << port.status().to_string();
    port_ = *port;
  }

  std::unique_ptr<ServingStack> stack_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

// Starts a non-blocking connect to 127.0.0.1:port; -1 on failure.
int start_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Bound but not serving: nothing accepts, so every connection that completes
// its handshake waits in the listen backlog. With cpp-httplib's backlog of 5
// only the first few would; the rest would wait for a SYN retransmit (1 s).
TEST_F(HttpServerTest, ABurstOfConnectionsWaitsInTheBacklogInsteadOfBeingDropped) {
  constexpr int kClients = 64;
  std::vector<pollfd> fds;
  for (int i = 0; i < kClients; ++i) {
    const int fd = start_connect(port_);
    ASSERT_GE(fd, 0) << "socket " << i;
    fds.push_back({fd, POLLOUT, 0});
  }
  // Loopback handshakes take microseconds; half a second is far from both
  // that and the retransmit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  int connected = 0;
  while (connected < kClients && std::chrono::steady_clock::now() < deadline) {
    ::poll(fds.data(), fds.size(), 50);
    connected = 0;
    for (pollfd& p : fds) {
      if (!(p.revents & POLLOUT)) continue;
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == 0) ++connected;
    }
  }
  for (pollfd& p : fds) ::close(p.fd);
  EXPECT_EQ(connected, kClients);
}

TEST_F(HttpServerTest, APortInUseIsRefusedNotShared) {
  HttpOptions o;
  o.port = port_;
  HttpServer second(*stack_, o);
  auto again = second.bind();
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("in use"), std::string::npos) << again.status().to_string();
}

}  // namespace
}  // namespace hiq
