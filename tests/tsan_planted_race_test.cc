// A data race planted in cpp-httplib handler code, for the tsan preset only:
// tests/tsan_planted_race_test.sh runs this under ThreadSanitizer with
// tests/tsan.supp and passes only when TSan reports the race in the function
// named for the mode. It shows the suppressions leave out the prebuilt
// library's internals, not our handler code, which runs on threads the library
// starts and is called from the library's frames.
//
// Set up as src/server/http_server.cc is: the prebuilt libcpp-httplib.so, a
// httplib::ThreadPool task queue, a plain route and a chunked content provider
// (streamed completions). The handler writes `planted`; so does a thread of the
// test, started before the server and never synchronised with it. TSan orders
// everything sent and received over any socket (one sync object for all of
// them), so the test's thread touches no socket, and hands over to the client
// through a relaxed atomic, which orders nothing: the two writes race on every
// run.
//
// Usage: hiq_tsan_planted_race handler|stream|clean
//   handler  the race in a route's handler        (planted_write_in_handler)
//   stream   the race in a content provider        (planted_write_in_stream)
//   clean    both routes with a mutex: no report at all (no false report either)
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

int planted = 0;
std::mutex planted_mutex;
bool synchronised = false;  // set once in main, before the server starts

[[gnu::noinline]] void write_planted(int value) {
  if (synchronised) {
    std::lock_guard<std::mutex> lock(planted_mutex);
    planted = value;
  } else {
    planted = value;
  }
}

[[gnu::noinline]] void planted_write_in_handler() { write_planted(1); }
[[gnu::noinline]] void planted_write_in_stream() { write_planted(2); }
[[gnu::noinline]] void planted_write_in_test_thread() { write_planted(3); }

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc == 2 ? argv[1] : "";
  if (mode != "handler" && mode != "stream" && mode != "clean") {
    std::fprintf(stderr, "usage: %s handler|stream|clean\n", argv[0]);
    return 2;
  }
  synchronised = mode == "clean";

  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(4); };
  server.Get("/handler", [](const httplib::Request&, httplib::Response& res) {
    planted_write_in_handler();
    res.set_content("ok", "text/plain");
  });
  server.Get("/stream", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      planted_write_in_stream();
      sink.write("data: ok\n\n", 10);
      sink.done();
      return true;
    });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) {
    std::fprintf(stderr, "cannot bind a port\n");
    return 2;
  }
  std::thread listener([&server] { server.listen_after_bind(); });

  httplib::Client client("127.0.0.1", port);
  int failures = 0;
  // The test's own writer: writes, then waits until the requests are done, so
  // that TSan still holds its stack when the handler's write races with it.
  std::atomic<bool> written{false}, requests_done{false};
  std::thread writer([&] {
    planted_write_in_test_thread();
    written.store(true, std::memory_order_relaxed);
    while (!requests_done.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!written.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  const std::vector<std::string> paths =
      mode == "clean" ? std::vector<std::string>{"/handler", "/stream"} : std::vector<std::string>{"/" + std::string(mode)};
  for (const std::string& path : paths) {
    // bind_to_any_port already listens: the connection waits in the backlog
    // until the listener thread accepts it.
    const httplib::Result res = client.Get(path);
    if (!res || res->status != 200) {
      std::fprintf(stderr, "GET %s failed\n", path.c_str());
      ++failures;
    }
  }
  requests_done.store(true, std::memory_order_relaxed);
  writer.join();
  server.stop();
  listener.join();
  std::printf("%s: planted = %d\n", argv[1], planted);
  return failures == 0 ? 0 : 1;
}
