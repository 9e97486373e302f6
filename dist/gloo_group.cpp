#include "dist/gloo_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>
#include <vector>

#include "base/error.h"
#include "engine/host_sync.h"
#include "engine/stream.h"

namespace kestrel::dist {

// A queued collective: finished by the worker thread, waited on by the issuing thread. Host and
// device are both up to date once it is finished (staged results are copied back before), so
// wait() blocks the host in either case.
class GlooWork : public Work {
 public:
  void wait() override { wait_finished(); }  // not a counted host read: see engine/host_sync.h
  void synchronize() override {
    note_host_sync("gloo Work::synchronize");
    wait_finished();
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }
  void finish(std::string error) {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    error_ = std::move(error);
    finished_cv_.notify_all();
  }

 private:
  void wait_finished() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_cv_.wait(lock, [this] { return finished_; });
    if (!error_.empty()) throw Error(error_);
  }

  std::mutex mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::string error_;
};

namespace {

// Gloo's rendezvous (pair addresses) through our store, under a prefix of its own.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set("gloo/" + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_.get("gloo/" + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> prefixed;
    for (const std::string& k : keys) prefixed.push_back("gloo/" + k);
    store_.wait(prefixed, t);
  }

 private:
  TcpStore& store_;
};

// The host memory a collective works on for one tensor, in its own dtype (half types travel as 16
// bits): the tensor itself when it is a CPU tensor, else a pinned host copy of the CUDA tensor.
struct HostBuffer {
  Tensor original;
  Tensor host;
  std::optional<Event> ready;  // CUDA: the device-to-host copy on the issuing stream

  // Issuing thread. with_values: the collective reads the tensor (not for all_gather's output).
  HostBuffer(const Tensor& t, bool with_values) : original(t) {
    if (t.device().is_cpu()) {
      host = t;
      return;
    }
    host = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), /*pinned=*/true);
    if (!with_values) return;
    DeviceGuard guard(t.device());
    host.copy_(t, /*non_blocking=*/true);
    ready.emplace(t.device());
    ready->record(current_stream(t.device()));
  }

  // Worker thread, before the collective.
  void load() {
    set_thread_device(original.device());  // the worker's device for good: see set_thread_device
    if (ready) ready->synchronize();
  }

  // Worker thread, after the collective: results back into the tensor, finished on return.
  void store_back(std::map<int, Stream>& copy_streams) {
    if (host.is_same(original)) return;
    const Device dev = original.device();
    auto it = copy_streams.find(dev.index);
    if (it == copy_streams.end()) it = copy_streams.emplace(dev.index, Stream::create(dev)).first;
    StreamGuard stream_guard(it->second);
    original.copy_(host, /*non_blocking=*/true);
    it->second.synchronize();
  }
};

template <class T>
void sum_into(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i)
    o[i] = from_acc<T>(static_cast<acc_t<T>>(to_acc<T>(x[i]) + to_acc<T>(y[i])));
}

// The all-reduce as one exchange: every rank sends its whole buffer to every other rank and adds
// up what it receives, in rank order, so that every rank computes the same sum. Gloo's TCP
// transport sends a buffer only once the peer has announced the matching receive, so each of its
// ring's 2(n-1) steps waits a round trip; the exchange waits one in all. With 2 ranks it sends
// the same bytes as the ring (each rank's whole buffer once), so it is used at every size there:
// the last bucket of backward, whose all-reduce cannot hide behind anything, then waits one round
// trip instead of two (docs/history/distributed.md, latency). With more ranks it sends (n-1) buffers
// instead of 2(n-1)/n of one, so only small ones (SyncBN statistics, loss and metric sums) take it.
constexpr uint8_t kExchangeSlotPrefix = 0x40;  // beyond Gloo's own collectives' prefixes (1-8)
constexpr size_t kExchangeMaxBytes = 32 * 1024;

bool exchange_all_reduce_fits(int world_size, size_t bytes) {
  return world_size == 2 || bytes <= kExchangeMaxBytes;
}

template <class T>
void exchange_all_reduce(const std::shared_ptr<gloo::Context>& ctx, T* data, size_t n, uint32_t tag) {
  const int world = ctx->size, me = ctx->rank;
  const size_t bytes = n * sizeof(T);
  const auto slot = gloo::Slot::build(kExchangeSlotPrefix, tag);
  std::vector<T> received(static_cast<size_t>(world - 1) * n);
  std::vector<const T*> part(static_cast<size_t>(world));  // each rank's buffer, by rank
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> inbound;
  for (int r = 0; r < world; ++r) {
    if (r == me) {
      part[static_cast<size_t>(r)] = data;
      continue;
    }
    T* into = received.data() + inbound.size() * n;
    part[static_cast<size_t>(r)] = into;
    inbound.push_back(ctx->createUnboundBuffer(into, bytes));
    inbound.back()->recv(r, slot);  // announced before the sends, so the peers' data can come at once
  }
  auto outbound = ctx->createUnboundBuffer(data, bytes);
  for (int r = 0; r < world; ++r)
    if (r != me) outbound->send(r, slot);
  const auto timeout = ctx->getTimeout();
  for (auto& b : inbound) b->waitRecv(timeout);
  for (int r = 1; r < world; ++r) outbound->waitSend(timeout);
  if (world == 2) {  // x0 + x1 straight into the buffer (element by element, so it may alias)
    sum_into<T>(data, part[0], part[1], n);
    return;
  }
  std::vector<T> sum(part[0], part[0] + n);
  for (size_t r = 1; r < part.size(); ++r) sum_into<T>(sum.data(), sum.data(), part[r], n);
  std::memcpy(data, sum.data(), bytes);
}

template <class T>
void all_reduce_typed(const std::shared_ptr<gloo::Context>& ctx, T* data, size_t n, ReduceOp op,
                      uint32_t tag) {
  if (exchange_all_reduce_fits(ctx->size, n * sizeof(T))) {
    exchange_all_reduce(ctx, data, n, tag);
  } else {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(data, n);
    opts.setReduceFunction(&sum_into<T>);
    opts.setTag(tag);
    gloo::allreduce(opts);
  }
  if constexpr (!std::is_integral_v<T>) {
    if (op == ReduceOp::Average)
      for (size_t i = 0; i < n; ++i)
        data[i] = from_acc<T>(to_acc<T>(data[i]) / static_cast<acc_t<T>>(ctx->size));
  }
}

void all_reduce_host(const std::shared_ptr<gloo::Context>& ctx, const Tensor& t, ReduceOp op,
                     uint32_t tag) {
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype()) {
    case DType::F32:
      return all_reduce_typed(ctx, t.data<float>(), n, op, tag);
    case DType::F64:
      return all_reduce_typed(ctx, t.data<double>(), n, op, tag);
    case DType::F16:  // 16 bits on the wire (--grad-compress); sums in float, rounded each time
      return all_reduce_typed(ctx, t.data<f16>(), n, op, tag);
    case DType::BF16:
      return all_reduce_typed(ctx, t.data<bf16>(), n, op, tag);
    case DType::I32:
      return all_reduce_typed(ctx, t.data<int32_t>(), n, op, tag);
    case DType::I64:
      return all_reduce_typed(ctx, t.data<int64_t>(), n, op, tag);
    case DType::U8:
      return all_reduce_typed(ctx, t.data<uint8_t>(), n, op, tag);
    default:
      KESTREL_FAIL("gloo all_reduce: no host reduction for ", dtype_name(t.dtype()));
  }
}

void check_tensor(const Tensor& t, const char* op) {
  KESTREL_CHECK(t.defined(), "gloo ", op, ": the tensor is undefined");
  KESTREL_CHECK(t.is_contiguous(), "gloo ", op,
                ": collectives work in place on contiguous "
                "tensors, got a strided ",
                t.describe(), "; call .contiguous() first");
}

}  // namespace

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<TcpStore> store, const DistOptions& options)
    : ProcessGroup(options.rank, options.world_size, std::move(store)),
      timeout_(options.timeout) {
  KESTREL_CHECK(this->store() || options.world_size == 1, "GlooProcessGroup: a group of ",
                options.world_size, " ranks needs a rendezvous store");
  // Gloo writes to its sockets with writev(), which raises SIGPIPE when a peer has died; the
  // default action would kill this rank silently instead of failing the collective with a clear
  // message. Ignore it unless the program installed its own handler.
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
  try {
    // Peers reach this rank at the address it reaches the store from.
    gloo::transport::tcp::attr attr(this->store() ? this->store()->local_address().c_str() : "127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank(), size());
    context->setTimeout(timeout_);
    if (this->store()) {
      GlooStoreAdapter adapter(*this->store());
      context->connectFullMesh(adapter, device);
    } else {
      gloo::rendezvous::HashStore local;
      context->connectFullMesh(local, device);
    }
    context_ = context;
    if (this->store()) {  // each rank's address, to name the lost ones when a collective fails
      this->store()->set(str("host/", rank()), this->store()->local_address());
      for (int r = 0; r < size(); ++r)
        if (r != rank()) peers_.push_back({r, this->store()->get(str("host/", r))});
    }
  } catch (const gloo::Exception& e) {
    KESTREL_FAIL("rank ", rank(), ": could not connect the Gloo process group of ", size(),
                 " ranks: ", e.what(), "; a peer may have died or be unreachable; see its log");
  }
  worker_ = std::thread([this] { worker_loop(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  worker_.join();
}

std::shared_ptr<Work> GlooProcessGroup::enqueue(std::string what, std::function<void()> run) {
  auto work = std::make_shared<GlooWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({work, std::move(what), std::move(run)});
  }
  queued_.notify_one();
  return work;
}

void GlooProcessGroup::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string error;
    if (!failure_.empty()) {
      error = str("rank ", rank(), ": gloo ", task.what,
                  " was not run because an earlier "
                  "collective failed: ",
                  failure_);
    } else {
      try {
        task.run();
      } catch (const gloo::Exception& e) {
        error = str("rank ", rank(), ": gloo ", task.what, " failed (timeout ",
                    format_duration(timeout_), "): ", e.what(), "; ", diagnose_peers());
      } catch (const std::exception& e) {
        error = str("rank ", rank(), ": gloo ", task.what, " failed: ", e.what());
      }
      if (!error.empty()) failure_ = error;
    }
    // Staging copies of CUDA tensors may hold the caller's memory: drop them before finishing.
    task.run = nullptr;
    task.work->finish(std::move(error));
  }
}

std::string GlooProcessGroup::diagnose_peers() const {
  if (peers_.empty()) return "a peer may have died or be stuck; see its log";
  const auto bound = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(1));
  return describe_lost_peers(peers_, silent_peers(peers_, store()->port(), bound), bound);
}

std::shared_ptr<Work> GlooProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  KESTREL_CHECK(op == ReduceOp::Sum || is_floating(t.dtype()),
                "gloo all_reduce: Average of the integer tensor ", t.describe(),
                " would truncate; reduce with Sum and divide as you need");
  auto buffer = std::make_shared<HostBuffer>(t, true);
  return enqueue("all_reduce of " + t.describe(), [this, buffer, op] {
    const uint32_t tag = next_tag();
    buffer->load();
    if (buffer->host.numel() > 0) all_reduce_host(context_, buffer->host, op, tag);
    buffer->store_back(copy_streams_);
  });
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  KESTREL_CHECK(root >= 0 && root < size(), "gloo broadcast: root ", root,
                " is not a rank of this group of ", size());
  auto buffer = std::make_shared<HostBuffer>(t, true);
  return enqueue(str("broadcast from rank ", root, " of ", t.describe()), [this, buffer, root] {
    const uint32_t tag = next_tag();
    buffer->load();
    const size_t bytes = buffer->host.numel() * buffer->host.element_size();
    if (bytes > 0) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(buffer->host.data_ptr()), bytes);
      opts.setRoot(root);
      opts.setTag(tag);
      gloo::broadcast(opts);
    }
    buffer->store_back(copy_streams_);
  });
}

std::shared_ptr<Work> GlooProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  KESTREL_CHECK(out.dtype() == in.dtype() && out.device() == in.device() &&
                    out.numel() == in.numel() * size(),
                "gloo all_gather: out must hold ", size(),
                " x in.numel() elements of in's type "
                "on in's device; got out ",
                out.describe(), " and in ", in.describe());
  // Raw bytes move unchanged: no wire conversion.
  auto src = std::make_shared<HostBuffer>(in, true);
  auto dst = std::make_shared<HostBuffer>(out, false);
  return enqueue("all_gather of " + in.describe(), [this, src, dst] {
    const uint32_t tag = next_tag();
    src->load();
    const size_t bytes = src->host.numel() * src->host.element_size();
    if (bytes > 0) {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(src->host.data_ptr()), bytes);
      opts.setOutput(static_cast<uint8_t*>(dst->host.data_ptr()), bytes * size());
      opts.setTag(tag);
      gloo::allgather(opts);
    }
    dst->store_back(copy_streams_);
  });
}

std::shared_ptr<Work> GlooProcessGroup::barrier() {
  return enqueue("barrier", [this] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    gloo::barrier(opts);
  });
}

}  // namespace kestrel::dist
