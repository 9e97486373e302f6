#include "tests/support/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace kestrel::testing {
namespace {

constexpr int kPollMs = 20;

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 302: return "Found";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

void send_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t put = ::send(fd, data, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return;  // the client went away: nothing more to say
    data += put;
    n -= static_cast<size_t>(put);
  }
}

void send_all(int fd, const std::string& s) { send_all(fd, s.data(), s.size()); }

std::string head(int status, uint64_t length, const std::string& extra = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\nContent-Length: " +
         std::to_string(length) + "\r\nContent-Type: application/octet-stream\r\n" + extra +
         "Connection: close\r\n\r\n";
}

}  // namespace

LoopbackHttpServer::LoopbackHttpServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("test server: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    throw std::runtime_error("test server: cannot listen on 127.0.0.1: " + why);
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

LoopbackHttpServer::~LoopbackHttpServer() {
  stop_ = true;
  acceptor_.join();
  for (std::thread& t : connections_) t.join();
  ::close(listen_fd_);
}

void LoopbackHttpServer::serve(const std::string& path, std::string body) {
  set(path, {Mode::Serve, std::move(body), 200, 0, ""});
}
void LoopbackHttpServer::fail(const std::string& path, int status) {
  set(path, {Mode::Status, std::string(reason(status)) + "\n", status, 0, ""});
}
void LoopbackHttpServer::stall(const std::string& path, std::string body, uint64_t bytes_before_stall) {
  set(path, {Mode::Stall, std::move(body), 200, bytes_before_stall, ""});
}
void LoopbackHttpServer::truncate(const std::string& path, std::string body, uint64_t bytes_sent) {
  set(path, {Mode::Truncate, std::move(body), 200, bytes_sent, ""});
}
void LoopbackHttpServer::redirect(const std::string& path, const std::string& location) {
  set(path, {Mode::Redirect, "", 302, 0, location});
}

void LoopbackHttpServer::set(const std::string& path, Route route) {
  std::lock_guard<std::mutex> lock(mu_);
  routes_[path] = std::move(route);
}

std::string LoopbackHttpServer::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
std::string LoopbackHttpServer::url(const std::string& path) const { return base_url() + path; }

int LoopbackHttpServer::requests(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(path);
  return it == requests_.end() ? 0 : it->second;
}

void LoopbackHttpServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Only this thread adds connections, and the destructor joins them after joining it.
    connections_.emplace_back([this, fd] {
      answer(fd);
      ::close(fd);
    });
  }
}

void LoopbackHttpServer::wait_for_hangup(int fd) const {
  char sink[256];
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    if (::recv(fd, sink, sizeof sink, 0) <= 0) return;
  }
}

void LoopbackHttpServer::answer(int fd) {
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536 && !stop_) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got <= 0) return;
    request.append(buf, static_cast<size_t>(got));
  }
  // "GET /path?query HTTP/1.1"
  const size_t sp1 = request.find(' '), sp2 = request.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return;
  std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  Route route;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[path];
    auto it = routes_.find(path);
    if (it != routes_.end()) route = it->second, known = true;
  }
  if (!known) route = {Mode::Status, "Not Found\n", 404, 0, ""};
  switch (route.mode) {
    case Mode::Serve:
      send_all(fd, head(200, route.body.size()) + route.body);
      break;
    case Mode::Status:
      send_all(fd, head(route.status, route.body.size()) + route.body);
      break;
    case Mode::Redirect:
      send_all(fd, head(302, 0, "Location: " + route.location + "\r\n"));
      break;
    case Mode::Truncate:
      send_all(fd, head(200, route.body.size()));
      send_all(fd, route.body.data(), std::min<uint64_t>(route.cut, route.body.size()));
      break;
    case Mode::Stall:
      send_all(fd, head(200, route.body.size()));
      send_all(fd, route.body.data(), std::min<uint64_t>(route.cut, route.body.size()));
      wait_for_hangup(fd);
      break;
  }
}

}  // namespace kestrel::testing
