#include "dist/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/error.h"

namespace kestrel::dist::net {

using std::chrono::milliseconds;

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

ReadStatus read_exact(int fd, char* dst, size_t n, const Clock::time_point* deadline) {
  size_t got = 0;
  while (got < n) {
    if (deadline) {
      auto left = std::chrono::duration_cast<milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return ReadStatus::TimedOut;
      pollfd p{fd, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ReadStatus::Closed;
      if (r == 0) return ReadStatus::TimedOut;
    }
    ssize_t k = ::recv(fd, dst + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return ReadStatus::Closed;
    got += static_cast<size_t>(k);
  }
  return ReadStatus::Ok;
}

void keep_alive(int fd) {
  int one = 1, idle = 10, interval = 5, count = 4;
  unsigned user_timeout_ms = 30000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

int try_connect(const sockaddr_in& addr, Clock::time_point deadline, std::string& error, bool& silent) {
  silent = false;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (r < 0 && errno == EINPROGRESS) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) == 1) {
      int so_error = 0;
      socklen_t len = sizeof so_error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      errno = so_error;
      r = so_error == 0 ? 0 : -1;
    } else {
      errno = ETIMEDOUT;
    }
  }
  if (r < 0) {
    error = std::strerror(errno);
    silent = errno == ETIMEDOUT || errno == EHOSTUNREACH || errno == ENETUNREACH;
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  keep_alive(fd);
  return fd;
}

sockaddr_in resolve_master(const std::string& host, int port, int rank) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  KESTREL_CHECK(gai == 0 && found, "rank ", rank, ": cannot resolve the master address '", host,
                "': ", ::gai_strerror(gai), "; check --master-addr (or MASTER_ADDR)");
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

std::string local_address(int fd) {
  sockaddr_in local{};
  socklen_t len = sizeof local;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

}  // namespace kestrel::dist::net
