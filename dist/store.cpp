#include "dist/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include "base/error.h"
#include "dist/socket_io.h"

namespace kestrel::dist {

using std::chrono::milliseconds;
using namespace net;

// Requests and replies share one frame: a one-byte code, then a count of byte strings, each
// preceded by its 32-bit length (both ends run the same binary, so host byte order is fine).
namespace {

enum class Command : uint8_t { Set, Get, Add, Wait, Hello };

constexpr uint8_t kReplyOk = 0;
constexpr uint8_t kReplyError = 1;

struct Frame {
  uint8_t code = 0;
  std::vector<std::string> args;
};

std::string encode(const Frame& f) {
  std::string out(1, static_cast<char>(f.code));
  auto put_u32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put_u32(static_cast<uint32_t>(f.args.size()));
  for (const std::string& a : f.args) {
    put_u32(static_cast<uint32_t>(a.size()));
    out += a;
  }
  return out;
}

ReadStatus read_frame(int fd, Frame& f, const Clock::time_point* deadline) {
  char code;
  uint32_t count;
  if (auto s = read_exact(fd, &code, 1, deadline); s != ReadStatus::Ok) return s;
  if (auto s = read_exact(fd, reinterpret_cast<char*>(&count), 4, deadline); s != ReadStatus::Ok)
    return s;
  // Anything else connecting to the port (a scanner, a wrong client) must not make us allocate
  // gigabytes: such frames end the connection.
  constexpr uint32_t kMaxArgs = 1 << 16, kMaxBytes = 1 << 28;
  if (count > kMaxArgs) return ReadStatus::Closed;
  f.code = static_cast<uint8_t>(code);
  f.args.assign(count, std::string());
  for (std::string& a : f.args) {
    uint32_t len;
    if (auto s = read_exact(fd, reinterpret_cast<char*>(&len), 4, deadline); s != ReadStatus::Ok)
      return s;
    if (len > kMaxBytes) return ReadStatus::Closed;
    a.resize(len);
    if (auto s = read_exact(fd, a.data(), len, deadline); s != ReadStatus::Ok) return s;
  }
  return ReadStatus::Ok;
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string s = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}

// Says which attempt this client belongs to. False (fd closed, `error` set) when the store serves
// another attempt or does not reply; `answered` notes that a store did reply.
bool greet(int& fd, int generation, int rank, Clock::time_point deadline, std::string& error,
           bool& answered) {
  Frame reply;
  const ReadStatus status = send_all(fd, encode({uint8_t(Command::Hello),
                                                 {std::to_string(generation), std::to_string(rank)}}))
                                ? read_frame(fd, reply, &deadline)
                                : ReadStatus::Closed;
  if (status == ReadStatus::Ok && reply.code == kReplyOk) return true;
  if (status == ReadStatus::Ok) {
    answered = true;
    error = str("the store there serves attempt ", reply.args.empty() ? "?" : reply.args[0],
                " of the job, this rank belongs to attempt ", generation);
  } else if (!answered) {  // keep the news of a store of another attempt: that is the reason
    error = "the store did not answer its greeting";
  }
  ::close(fd);
  fd = -1;
  return false;
}

}  // namespace

std::string format_duration(milliseconds d) {
  if (d.count() < 1000) return str(d.count(), " ms");
  if (d.count() % 1000 == 0) return str(d.count() / 1000, " s");
  return str(static_cast<double>(d.count()) / 1000.0, " s");
}

// --- the host side -----------------------------------------------------------------------------

// One thread accepts connections, one thread per connection serves its requests; requests that
// wait for keys sleep on a condition variable until a set/add provides them.
//
// A rank whose connection closes has left the job: its process exited or died, or its host is
// unreachable (the keep-alive probes gave up). From then on a wait that its keys do not already
// satisfy fails at once, naming that rank and its host, instead of lasting its whole limit (three
// hours for a phase): every wait of a data-parallel job needs every rank. A job that ends normally
// leaves no such wait, since every rank passes the last phase before any exits.
class StoreServer {
 public:
  StoreServer(int port, int generation) : generation_(generation) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    KESTREL_CHECK(listen_fd_ >= 0, "rendezvous store: socket() failed: ", std::strerror(errno));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      int err = errno;
      ::close(listen_fd_);
      KESTREL_CHECK(err != EADDRINUSE, "rank 0: cannot host the rendezvous store: port ", port,
                    " is already in use (another job, or a previous run that has not exited, "
                    "holds it); use another --master-port (or MASTER_PORT)");
      KESTREL_FAIL("rank 0: cannot host the rendezvous store on port ", port, ": ",
                   std::strerror(err), "; use another --master-port (or MASTER_PORT)");
    }
    KESTREL_CHECK(::listen(listen_fd_, SOMAXCONN) == 0,
                  "rendezvous store: listen() failed: ", std::strerror(errno));
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~StoreServer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    changed_.notify_all();
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    for (std::thread& t : handlers_) t.join();
    for (int fd : client_fds_) ::close(fd);
    ::close(listen_fd_);
  }

  // The port it listens on (the one the kernel picked when asked for port 0).
  int port() const { return port_; }

 private:
  void accept_loop() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_) {
        if (fd >= 0) ::close(fd);
        return;
      }
      if (fd < 0) {  // a connection reset before we accepted it, or out of descriptors
        lock.unlock();
        std::this_thread::sleep_for(milliseconds(10));
        continue;
      }
      lock.unlock();
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      keep_alive(fd);
      Peer peer;
      if (!welcome(fd, peer)) {
        ::close(fd);
        continue;
      }
      lock.lock();
      if (stopping_) {
        ::close(fd);
        return;
      }
      client_fds_.push_back(fd);
      handlers_.emplace_back([this, fd, peer] { serve(fd, peer); });
    }
  }

  // A connected rank: which one, and the address it connects from.
  struct Peer {
    int rank = -1;
    std::string host;
  };

  // A client's first frame must be a Hello of this store's generation, with its rank, within a
  // second; a client of another attempt is told which attempt this store serves and turned away.
  // Checked before a connection gets a thread, so that clients retrying against the wrong store
  // cost nothing.
  bool welcome(int fd, Peer& peer) {
    Frame hello;
    const auto deadline = Clock::now() + milliseconds(1000);
    if (read_frame(fd, hello, &deadline) != ReadStatus::Ok) return false;
    const std::string ours = std::to_string(generation_);
    bool ok = static_cast<Command>(hello.code) == Command::Hello && hello.args.size() == 2 &&
              hello.args[0] == ours;
    if (ok) {
      const std::string& r = hello.args[1];
      auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), peer.rank);
      ok = ec == std::errc() && end == r.data() + r.size() && peer.rank >= 0;
      sockaddr_in addr{};
      socklen_t len = sizeof addr;
      char text[INET_ADDRSTRLEN] = "?";
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
      peer.host = text;
    }
    return send_all(fd, encode({ok ? kReplyOk : kReplyError, {ours}})) && ok;
  }

  void serve(int fd, const Peer& peer) {
    Frame req;
    while (read_frame(fd, req, nullptr) == ReadStatus::Ok) {
      Frame reply = handle(req);
      if (reply.code == kReplyError && reply.args.empty()) return;  // stopping
      if (!send_all(fd, encode(reply))) break;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    left_.push_back(peer);
    changed_.notify_all();
  }

  std::string describe_left() const {
    std::string ranks;
    for (size_t i = 0; i < left_.size(); ++i)
      ranks += str(i ? ", " : "", "rank ", left_[i].rank, " (host ", left_[i].host, ")");
    return str(ranks, left_.size() == 1 ? " has" : " have",
               " left the job: the connection to the rendezvous store closed, so the process "
               "exited or was killed, or its host became unreachable; see that rank's log");
  }

  bool has_all(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys)
      if (!data_.count(k)) return false;
    return true;
  }

  Frame handle(const Frame& req) {
    using C = Command;
    std::unique_lock<std::mutex> lock(mutex_);
    const auto command = static_cast<C>(req.code);
    if (command == C::Set && req.args.size() == 2) {
      data_[req.args[0]] = req.args[1];
      changed_.notify_all();
      return {kReplyOk, {}};
    }
    if (command == C::Add && req.args.size() == 2) {
      int64_t value = 0, delta = 0;
      auto it = data_.find(req.args[0]);
      const std::string& old = it == data_.end() ? "0" : it->second;
      auto [p, ec] = std::from_chars(old.data(), old.data() + old.size(), value);
      if (ec != std::errc() || p != old.data() + old.size())
        return {kReplyError, {"the value is not an integer, so add() cannot change it"}};
      std::from_chars(req.args[1].data(), req.args[1].data() + req.args[1].size(), delta);
      data_[req.args[0]] = std::to_string(value + delta);
      changed_.notify_all();
      return {kReplyOk, {data_[req.args[0]]}};
    }
    if (command == C::Get || command == C::Wait) {
      changed_.wait(lock, [&] { return stopping_ || has_all(req.args) || !left_.empty(); });
      if (!has_all(req.args)) {
        if (stopping_) return {kReplyError, {}};
        return {kReplyError, {describe_left()}};
      }
      if (command == C::Get && req.args.size() == 1) return {kReplyOk, {data_[req.args[0]]}};
      return {kReplyOk, {}};
    }
    return {kReplyError, {str("malformed request (code ", int(req.code), ")")}};
  }

  int generation_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
  bool stopping_ = false;
  std::vector<int> client_fds_;
  std::vector<std::thread> handlers_;
  std::vector<Peer> left_;  // ranks whose connection closed, in the order they left
};

// --- the client side ---------------------------------------------------------------------------

TcpStore::TcpStore(const std::string& master_addr, int port, bool is_host, int rank,
                   milliseconds timeout, int generation)
    : master_addr_(master_addr), port_(port), rank_(rank), timeout_(timeout) {
  KESTREL_CHECK((port > 0 || (is_host && port == 0)) && port < 65536, "rendezvous store: master port ",
                port, " is not a TCP port; pass --master-port in 1..65535");
  KESTREL_CHECK(timeout.count() > 0, "rendezvous store: the timeout must be positive, got ",
                timeout.count(), " ms");
  if (is_host) {
    server_ = std::make_unique<StoreServer>(port, generation);
    port_ = server_->port();
  }

  const sockaddr_in addr = resolve_master(master_addr, port_, rank);

  // The host may not be listening yet, or still serve the previous attempt: retry until the
  // timeout.
  const auto deadline = Clock::now() + timeout;
  std::string error;
  bool answered = false;  // some store replied (of another attempt): the host is there
  bool silent = false;    // the last attempt found no sign of the host
  while ((fd_ = try_connect(addr, deadline, error, silent)) < 0 ||
         !greet(fd_, generation, rank, deadline, error, answered)) {
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  silent = silent && !answered;
  KESTREL_CHECK(fd_ >= 0, "rank ", rank, ": could not reach the rendezvous store at ", endpoint(),
                " within ", format_duration(timeout), " (last error: ", error, ")",
                silent ? str("; no host answers at ", master_addr, ": is --master-addr (MASTER_ADDR) "
                             "the address of rank 0's host, and is that host up and reachable from here?")
                       : std::string("; is rank 0 running, and do --master-addr/--master-port (MASTER_ADDR/"
                                     "MASTER_PORT) name it?"));

  local_address_ = net::local_address(fd_);
}

// Rank 0 stops its server before it closes its own connection: otherwise the server could see
// rank 0's connection close first and tell the waiting ranks that rank 0 left, a race with the
// message they should get, that the store itself is gone.
TcpStore::~TcpStore() {
  server_.reset();
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::endpoint() const { return str(master_addr_, ":", port_); }

std::vector<std::string> TcpStore::request(uint8_t command, const std::vector<std::string>& args,
                                           milliseconds timeout, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  KESTREL_CHECK(!broken_, "rank ", rank_, ": the connection to the rendezvous store at ",
                endpoint(), " is unusable after an earlier timeout or error");
  const auto deadline = Clock::now() + timeout;
  Frame reply;
  ReadStatus status = ReadStatus::Closed;
  if (send_all(fd_, encode({command, args}))) status = read_frame(fd_, reply, &deadline);
  if (status != ReadStatus::Ok) broken_ = true;
  KESTREL_CHECK(status != ReadStatus::TimedOut, "rank ", rank_, ": timed out after ",
                format_duration(timeout), " waiting for ", what, " in the rendezvous store at ",
                endpoint(), "; a peer may have died or not started; see its log");
  KESTREL_CHECK(status == ReadStatus::Ok, "rank ", rank_,
                ": lost the connection to the rendezvous store at ", endpoint(), " during ", what,
                "; rank 0 hosts the store: did it exit, or is its host unreachable? see its log");
  KESTREL_CHECK(reply.code == kReplyOk, "rank ", rank_, ": the rendezvous store at ", endpoint(),
                " could not serve ", what, ": ",
                reply.args.empty() ? std::string("it is shutting down") : reply.args[0]);
  return reply.args;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  request(uint8_t(Command::Set), {key, value}, timeout_, "setting " + quote_keys({key}));
}

std::string TcpStore::get(const std::string& key) {
  auto reply = request(uint8_t(Command::Get), {key}, timeout_, quote_keys({key}));
  KESTREL_CHECK(reply.size() == 1, "rendezvous store: malformed reply to get('", key, "')");
  return reply[0];
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  auto reply = request(uint8_t(Command::Add), {key, std::to_string(delta)}, timeout_,
                       "adding to " + quote_keys({key}));
  KESTREL_CHECK(reply.size() == 1, "rendezvous store: malformed reply to add('", key, "')");
  return std::stoll(reply[0]);
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  request(uint8_t(Command::Wait), keys, timeout, quote_keys(keys));
}

}  // namespace kestrel::dist
