#include "dist/peer_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "dist/store.h"
#include "base/error.h"

namespace kestrel::dist {
namespace {

using Clock = std::chrono::steady_clock;

// A non-blocking connect to address:port: the socket, or -1 when the attempt already failed
// (`answered` says whether the failure itself was an answer: a refusal).
int start_connect(const std::string& address, int port, bool& answered) {
  answered = false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 || errno == EINPROGRESS)
    return fd;
  answered = errno == ECONNREFUSED;
  ::close(fd);
  return -1;
}

std::string list(const std::vector<PeerHost>& peers) {
  std::string s;
  for (size_t i = 0; i < peers.size(); ++i)
    s += str(i == 0 ? "" : i + 1 == peers.size() ? " and " : ", ", "rank ", peers[i].rank, " at ",
             peers[i].address);
  return s;
}

}  // namespace

std::vector<PeerHost> silent_peers(const std::vector<PeerHost>& peers, int port,
                                   std::chrono::milliseconds bound) {
  std::vector<PeerHost> silent;
  std::vector<pollfd> polls;
  std::vector<const PeerHost*> polled;
  for (const PeerHost& p : peers) {
    bool answered = false;
    const int fd = start_connect(p.address, port, answered);
    if (fd >= 0) {
      polls.push_back({fd, POLLOUT, 0});
      polled.push_back(&p);
    } else if (!answered) {
      silent.push_back(p);
    }
  }
  std::vector<bool> done(polls.size(), false);
  const auto deadline = Clock::now() + bound;
  for (size_t left = polls.size(); left > 0;) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const int ready = ms > 0 ? ::poll(polls.data(), polls.size(), static_cast<int>(ms)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    for (size_t i = 0; i < polls.size(); ++i) {
      if (done[i] || polls[i].revents == 0) continue;
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(polls[i].fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0 && error != ECONNREFUSED) silent.push_back(*polled[i]);
      done[i] = true;
      polls[i].fd = -polls[i].fd - 1;  // poll ignores negative descriptors
      --left;
    }
  }
  for (size_t i = 0; i < polls.size(); ++i) {
    if (!done[i]) silent.push_back(*polled[i]);
    ::close(done[i] ? -polls[i].fd - 1 : polls[i].fd);
  }
  return silent;
}

std::string describe_lost_peers(const std::vector<PeerHost>& peers, const std::vector<PeerHost>& silent,
                                std::chrono::milliseconds bound) {
  if (silent.empty())
    return str("every peer's host answers (", list(peers), "): a peer may have died or be stuck; see its log");
  std::set<std::string> hosts, silent_hosts;
  for (const PeerHost& p : peers) hosts.insert(p.address);
  for (const PeerHost& p : silent) silent_hosts.insert(p.address);
  std::string s = str(list(silent), " stopped answering: ",
                      silent_hosts.size() == 1 ? "its host" : "their hosts", " did not answer a TCP probe within ",
                      format_duration(bound), " (network failure, or the host is down)");
  if (silent_hosts.size() == hosts.size() && hosts.size() > 1)
    s += "; no other host answers: this host may have lost its network";
  return s;
}

}  // namespace kestrel::dist
