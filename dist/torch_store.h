// A client of PyTorch's TCPStore: the store torchrun's agent serves at MASTER_ADDR:MASTER_PORT when
// it tells its workers TORCHELASTIC_USE_AGENT_STORE=True (its default). Kestrel's ranks use it for
// one thing: rank 0 hosts Kestrel's own rendezvous store (dist/store.h) on a port the kernel picks
// and posts "address:port" there, and the other ranks read it. So no port beside MASTER_PORT has to
// be free or guessed.
//
// Only the requests that needs are spoken, in the wire format PyTorch's TCPStore uses (host byte
// order, 64-bit lengths): the validation greeting and a ping (whose echo shows the peer is a
// TCPStore), set, wait and get. Keys are used as given: PyTorch's own clients put "/" in front of
// user keys, so the key "/a" here is the key "a" to a Python TCPStore.
#pragma once
#include <chrono>
#include <string>

namespace kestrel::dist {

class TorchStoreClient {
 public:
  // Connects (retrying until `timeout`: the agent may still be starting) and checks that a TCPStore
  // answers. `rank` names this process in messages.
  TorchStoreClient(const std::string& addr, int port, int rank, std::chrono::milliseconds timeout);
  ~TorchStoreClient();
  TorchStoreClient(const TorchStoreClient&) = delete;
  TorchStoreClient& operator=(const TorchStoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (up to the timeout), then returns its value.
  std::string get(const std::string& key);
  // This host's IPv4 address on the route to the agent's host: where the other ranks can reach a
  // server of this process.
  std::string local_address() const { return local_address_; }

 private:
  std::string endpoint() const;
  [[noreturn]] void fail(const std::string& what, bool timed_out) const;

  std::string addr_;
  int port_;
  int rank_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::string local_address_;
};

}  // namespace kestrel::dist
