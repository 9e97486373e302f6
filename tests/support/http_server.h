// A loopback HTTP/1.1 server for download tests, started by the test in its own process: it
// listens on 127.0.0.1 on a port the system picks, answers each connection on a thread of its own
// (one request, then the connection closes) and serves the bodies set per path. On request a path
// fails with a status, stalls (headers and the first bytes, then silence until the client hangs
// up), is cut short (the full Content-Length announced, part of the body sent, the connection
// closed) or redirects. Unknown paths answer 404. Nothing leaves the machine.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kestrel::testing {

class LoopbackHttpServer {
 public:
  LoopbackHttpServer();   // listening when constructed
  ~LoopbackHttpServer();  // stops listening, ends stalled answers, joins every thread
  LoopbackHttpServer(const LoopbackHttpServer&) = delete;
  LoopbackHttpServer& operator=(const LoopbackHttpServer&) = delete;

  void serve(const std::string& path, std::string body);
  void fail(const std::string& path, int status);
  void stall(const std::string& path, std::string body, uint64_t bytes_before_stall);
  void truncate(const std::string& path, std::string body, uint64_t bytes_sent);
  void redirect(const std::string& path, const std::string& location);

  int port() const { return port_; }
  std::string base_url() const;                      // "http://127.0.0.1:<port>"
  std::string url(const std::string& path) const;    // base_url() + path
  int requests(const std::string& path) const;       // GETs seen for `path` so far

 private:
  enum class Mode { Serve, Status, Stall, Truncate, Redirect };
  struct Route {
    Mode mode = Mode::Serve;
    std::string body;
    int status = 200;
    uint64_t cut = 0;
    std::string location;
  };
  void set(const std::string& path, Route route);
  void accept_loop();
  void answer(int fd);
  void wait_for_hangup(int fd) const;

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, Route> routes_;
  std::map<std::string, int> requests_;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

}  // namespace kestrel::testing
