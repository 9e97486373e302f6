// The rendezvous store: a small TCP key-value store that rank 0 hosts on master_addr:master_port.
// Ranks use it once at start-up, to exchange the NCCL unique id and Gloo's pair addresses.
//
// A store belongs to one attempt of an elastic job (`generation`, the launcher's restart count):
// a client of another attempt is turned away at connect and keeps retrying, so after a restart a
// rank of a host that restarted first never talks to a previous attempt's store that is still
// shutting down on the master's host.
//
// Every call that waits (get, wait, add/set against a dead host, connecting) gives up after the
// store's timeout with an Error naming the rank, the keys and the host, so a missing peer shows as
// a clear failure instead of a hang. Values are byte strings. One store may be used from several
// threads (calls are serialised on its one connection).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kestrel::dist {

class StoreServer;  // the host side (store.cpp)

class TcpStore {
 public:
  // is_host: this process listens on `port` (on every interface; port 0 lets the kernel pick one,
  // which port() then tells) and serves the others; every rank, the host included, then talks to
  // the store as a client. Connecting retries until
  // `timeout` so ranks may start in any order.
  TcpStore(const std::string& master_addr, int port, bool is_host, int rank,
           std::chrono::milliseconds timeout, int generation = 0);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (up to the store's timeout), then returns its value.
  std::string get(const std::string& key);
  // Adds delta to the integer stored at key (absent counts as 0) and returns the new value; the
  // value reads back through get() as decimal text.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // This host's IPv4 address on the route to the store's host: what peers can reach us at.
  std::string local_address() const { return local_address_; }
  std::string endpoint() const;  // "host:port", for messages
  int port() const { return port_; }

 private:
  std::vector<std::string> request(uint8_t command, const std::vector<std::string>& args,
                                   std::chrono::milliseconds timeout, const std::string& what);

  std::string master_addr_;
  int port_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<StoreServer> server_;
  std::mutex mutex_;  // one request at a time on the connection
  int fd_ = -1;
  bool broken_ = false;  // a timed-out request leaves its reply unread: the connection is unusable
  std::string local_address_;
};

// "5 s", "1.5 s", "200 ms": for timeout messages.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace kestrel::dist
