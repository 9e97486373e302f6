#include "dist/torch_store.h"

#include <unistd.h>

#include <cstdint>
#include <thread>

#include "base/error.h"
#include "dist/socket_io.h"
#include "dist/store.h"

namespace kestrel::dist {

using std::chrono::milliseconds;
using namespace net;

namespace {

// PyTorch's TCPStore request codes, and the number its validation greeting carries.
enum class Query : uint8_t { Validate = 0, Set = 1, Get = 3, Wait = 6, Ping = 13 };
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kStopWaiting = 0;  // the reply to Wait once every key exists
constexpr uint64_t kMaxValueBytes = 1 << 20;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

std::string request(Query q) { return std::string(1, static_cast<char>(q)); }

}  // namespace

TorchStoreClient::TorchStoreClient(const std::string& addr, int port, int rank, milliseconds timeout)
    : addr_(addr), port_(port), rank_(rank), timeout_(timeout) {
  KESTREL_CHECK(port > 0 && port < 65536, "torchrun's agent store: MASTER_PORT ", port,
                " is not a TCP port");
  const sockaddr_in address = resolve_master(addr, port, rank);
  const auto deadline = Clock::now() + timeout;
  std::string error;
  bool silent = false;
  while ((fd_ = try_connect(address, deadline, error, silent)) < 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(50));
  KESTREL_CHECK(fd_ >= 0, "rank ", rank, ": could not reach torchrun's agent store at ", endpoint(),
                " within ", format_duration(timeout), " (last error: ", error,
                "); torchrun says it serves a store there (TORCHELASTIC_USE_AGENT_STORE=True): is its "
                "agent still running?");
  std::string hello = request(Query::Validate);
  put<uint32_t>(hello, kValidationMagic);
  const uint32_t nonce = static_cast<uint32_t>(::getpid());
  hello += request(Query::Ping);
  put<uint32_t>(hello, nonce);
  uint32_t echo = 0;
  const ReadStatus status = send_all(fd_, hello) ? read_exact(fd_, reinterpret_cast<char*>(&echo), 4, &deadline)
                                                  : ReadStatus::Closed;
  KESTREL_CHECK(status == ReadStatus::Ok && echo == nonce, "rank ", rank, ": the server at ", endpoint(),
                " does not answer as PyTorch's TCPStore (", status == ReadStatus::TimedOut ? "no reply" : "a wrong reply",
                " to its ping), though torchrun said its agent serves one there "
                "(TORCHELASTIC_USE_AGENT_STORE=True); pass --master-port P to host Kestrel's store on port P instead");
  local_address_ = net::local_address(fd_);
}

TorchStoreClient::~TorchStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TorchStoreClient::endpoint() const { return str(addr_, ":", port_); }

void TorchStoreClient::fail(const std::string& what, bool timed_out) const {
  if (timed_out)
    KESTREL_FAIL("rank ", rank_, ": timed out after ", format_duration(timeout_), " waiting for ", what,
                 " in torchrun's agent store at ", endpoint(),
                 "; rank 0 posts it there once it hosts Kestrel's store: did rank 0 fail or not start? see its log");
  KESTREL_FAIL("rank ", rank_, ": lost the connection to torchrun's agent store at ", endpoint(), " during ",
               what, "; did torchrun's agent exit?");
}

void TorchStoreClient::set(const std::string& key, const std::string& value) {
  std::string req = request(Query::Set);
  put_string(req, key);
  put_string(req, value);
  if (!send_all(fd_, req)) fail("setting '" + key + "'", false);
}

std::string TorchStoreClient::get(const std::string& key) {
  const std::string what = "the key '" + key + "'";
  const auto deadline = Clock::now() + timeout_;
  std::string wait = request(Query::Wait);
  put<uint64_t>(wait, 1);
  put_string(wait, key);
  char answer = 1;
  ReadStatus status = send_all(fd_, wait) ? read_exact(fd_, &answer, 1, &deadline) : ReadStatus::Closed;
  if (status != ReadStatus::Ok) fail(what, status == ReadStatus::TimedOut);
  KESTREL_CHECK(static_cast<uint8_t>(answer) == kStopWaiting, "rank ", rank_, ": torchrun's agent store at ",
                endpoint(), " answered a wait for ", what, " with code ", int(answer));
  std::string get = request(Query::Get);
  put_string(get, key);
  uint64_t size = 0;
  status = send_all(fd_, get) ? read_exact(fd_, reinterpret_cast<char*>(&size), 8, &deadline) : ReadStatus::Closed;
  if (status != ReadStatus::Ok) fail(what, status == ReadStatus::TimedOut);
  KESTREL_CHECK(size <= kMaxValueBytes, "rank ", rank_, ": torchrun's agent store at ", endpoint(),
                " sent a ", size, "-byte value for ", what, ", more than the few bytes Kestrel posts there");
  std::string value(size, '\0');
  status = read_exact(fd_, value.data(), size, &deadline);
  if (status != ReadStatus::Ok) fail(what, status == ReadStatus::TimedOut);
  return value;
}

}  // namespace kestrel::dist
