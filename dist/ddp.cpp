#include "dist/ddp.h"

#include <cstring>
#include <map>

#include "base/error.h"

namespace kestrel::dist {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

std::string signature(const std::string& name, const Tensor& t) {
  return name + " " + dtype_name(t.dtype()) + shape_str(t.shape());
}

Device device_of(const NamedTensors& tensors) {
  const Device d = tensors.front().second.device();
  for (const auto& [name, t] : tensors)
    KESTREL_CHECK(t.device() == d, "ddp: ", name, " is on ", t.device().str(), " but ",
                  tensors.front().first, " is on ", d.str(), "; keep the replica on one device");
  return d;
}

// Every rank's `values` (same length on every rank), gathered on the host: result[r][i].
std::vector<std::vector<int64_t>> gather(ProcessGroup& group, const std::vector<int64_t>& values,
                                         Device device) {
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor in = Tensor::from_vector(values, {n}, device);
  const Tensor out = Tensor::empty({n * group.size()}, DType::I64, device);
  group.all_gather(out, in)->synchronize();
  const std::vector<int64_t> all = out.to(Device::cpu()).to_vector<int64_t>();
  std::vector<std::vector<int64_t>> result(group.size());
  for (int r = 0; r < group.size(); ++r)
    result[r].assign(all.begin() + r * n, all.begin() + (r + 1) * n);
  return result;
}

int64_t as_int(uint64_t h) {
  int64_t v;
  std::memcpy(&v, &h, sizeof v);
  return v;
}

// The first index where rank r's values differ from this rank's, or -1.
int64_t first_difference(const std::vector<std::vector<int64_t>>& all, int self, int* other) {
  for (size_t i = 0; i < all[self].size(); ++i)
    for (int r = 0; r < static_cast<int>(all.size()); ++r)
      if (all[r][i] != all[self][i]) {
        *other = r;
        return static_cast<int64_t>(i);
      }
  return -1;
}

// Same number of tensors with the same names, dtypes and shapes on every rank, else an Error.
void check_same_structure(ProcessGroup& group, const NamedTensors& tensors, Device device,
                          const std::string& what) {
  const auto counts = gather(group, {static_cast<int64_t>(tensors.size())}, device);
  for (int r = 0; r < group.size(); ++r)
    KESTREL_CHECK(counts[r][0] == counts[group.rank()][0], "ddp (", what, "): rank ", group.rank(),
                  " has ", counts[group.rank()][0], " tensors but rank ", r, " has ", counts[r][0],
                  "; every rank must build the same model and optimizer");
  std::vector<int64_t> hashes;
  for (const auto& [name, t] : tensors) {
    const std::string s = signature(name, t);
    hashes.push_back(as_int(fnv1a(s.data(), s.size())));
  }
  const auto all = gather(group, hashes, device);
  int other = 0;
  const int64_t i = first_difference(all, group.rank(), &other);
  KESTREL_CHECK(i < 0, "ddp (", what, "): tensor #", i, " is ",
                i < 0 ? std::string() : signature(tensors[i].first, tensors[i].second), " on rank ",
                group.rank(), " but differs in name, dtype or shape on rank ", other,
                "; every rank must build the same model and optimizer");
}

}  // namespace

uint64_t tensor_checksum(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  return fnv1a(host.data_ptr(), static_cast<size_t>(host.numel()) * host.element_size());
}

void broadcast_tensors(ProcessGroup& group, const NamedTensors& tensors, int root) {
  // The group is only borrowed for this call: a pointer that deletes nothing.
  const std::shared_ptr<ProcessGroup> borrowed(&group, [](ProcessGroup*) {});
  TensorBroadcaster(borrowed, tensors, root).broadcast();
}

TensorBroadcaster::TensorBroadcaster(std::shared_ptr<ProcessGroup> group, NamedTensors tensors,
                                     int root)
    : group_(std::move(group)), tensors_(std::move(tensors)), root_(root) {
  KESTREL_CHECK(group_, "TensorBroadcaster: no process group");
  KESTREL_CHECK(root >= 0 && root < group_->size(), "ddp: broadcast root ", root,
                " is not a rank of a world of ", group_->size());
  if (tensors_.empty() || group_->size() == 1) return;
  check_structure();
  // One flat buffer per dtype, in list order (std::map: the same dtype order on every rank).
  const Device device = device_of(tensors_);
  std::map<DType, std::vector<Tensor>> by_dtype;
  for (const auto& [name, t] : tensors_) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, members] : by_dtype) {
    int64_t total = 0;
    for (const Tensor& t : members) total += t.numel();
    flats_.push_back({std::move(members), Tensor::empty({total}, dtype, device)});
  }
}

void TensorBroadcaster::check_structure() {
  if (tensors_.empty() || group_->size() == 1) return;
  check_same_structure(*group_, tensors_, device_of(tensors_), "broadcast");
}

void TensorBroadcaster::broadcast() {
  for (const Flat& f : flats_) {
    int64_t offset = 0;
    for (const Tensor& t : f.members) {
      f.buffer.slice(0, offset, offset + t.numel()).copy_(t.reshape({t.numel()}));
      offset += t.numel();
    }
    group_->broadcast(f.buffer, root_)->wait();
    offset = 0;
    for (const Tensor& t : f.members) {
      t.copy_(f.buffer.slice(0, offset, offset + t.numel()).reshape(t.shape()));
      offset += t.numel();
    }
  }
}

void check_sync(ProcessGroup& group, const NamedTensors& tensors, const std::string& what) {
  if (tensors.empty() || group.size() == 1) return;
  const Device device = device_of(tensors);
  check_same_structure(group, tensors, device, what);
  std::vector<int64_t> sums;
  for (const auto& [name, t] : tensors) sums.push_back(as_int(tensor_checksum(t)));
  const auto all = gather(group, sums, device);
  int other = 0;
  const int64_t i = first_difference(all, group.rank(), &other);
  KESTREL_CHECK(i < 0, "ddp: ", what,
                " diverged across ranks: ", i < 0 ? std::string() : tensors[i].first,
                " differs between rank ", group.rank(), " and rank ", other, " (checksums ",
                i < 0 ? 0 : all[group.rank()][i], " vs ", i < 0 ? 0 : all[other][i],
                "); replicas must stay bitwise identical (was a tensor "
                "changed on one rank only, or a non-deterministic kernel used?)");
}

}  // namespace kestrel::dist
