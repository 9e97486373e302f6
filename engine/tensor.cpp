#include "engine/tensor.h"

#include <cuda_runtime.h>

#include <cstring>
#include <sstream>

#include "engine/autograd.h"
#include "engine/cuda_graph.h"
#include "engine/host_sync.h"
#include "engine/ops/launch.h"
#include "kernels/cast.h"
#include "kernels/copy.h"
#include "kernels/cuda_check.h"

namespace kestrel {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return s;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

// --- creation ------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, bool pinned) {
  for (int64_t v : shape) KESTREL_CHECK(v >= 0, "negative dimension in shape ", shape_str(shape));
  KESTREL_CHECK(shape.size() <= static_cast<size_t>(kernels::kMaxDims), "tensors have at most ",
                kernels::kMaxDims, " dimensions, got ", shape.size());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device, shape_numel(shape) * dtype_size(dtype), pinned);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor Tensor::empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
Tensor Tensor::zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  KESTREL_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
                values.size(), " values for shape ", shape_str(shape));
  Tensor host = empty(shape, DTypeOf<T>::value, Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  if (device.is_cpu()) return host;
  Tensor out = empty(shape, DTypeOf<T>::value, device);
  out.copy_(host);
  return out;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<f16>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<bf16>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&, Device);

// --- metadata --------------------------------------------------------------------------------------

#define KESTREL_NEED_DEFINED() KESTREL_CHECK(impl_, "operation on an undefined tensor")

const Shape& Tensor::shape() const { KESTREL_NEED_DEFINED(); return impl_->shape; }
const Shape& Tensor::strides() const { KESTREL_NEED_DEFINED(); return impl_->strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  KESTREL_CHECK(d >= -n && d < n, "dimension ", d, " out of range for ", describe());
  return impl_->shape[d < 0 ? d + n : d];
}
int64_t Tensor::stride(int64_t d) const {
  int64_t n = dim();
  KESTREL_CHECK(d >= -n && d < n, "dimension ", d, " out of range for ", describe());
  return impl_->strides[d < 0 ? d + n : d];
}
int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const { KESTREL_NEED_DEFINED(); return impl_->dtype; }
Device Tensor::device() const { KESTREL_NEED_DEFINED(); return impl_->storage->device; }
size_t Tensor::element_size() const { return dtype_size(dtype()); }
int64_t Tensor::storage_offset() const { KESTREL_NEED_DEFINED(); return impl_->offset; }
bool Tensor::is_pinned() const { KESTREL_NEED_DEFINED(); return impl_->storage->pinned; }
const std::shared_ptr<Storage>& Tensor::storage() const { KESTREL_NEED_DEFINED(); return impl_->storage; }

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  if (shape_numel(sh) == 0) return true;  // no element to be out of place
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sh[d] == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= sh[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  KESTREL_NEED_DEFINED();
  return static_cast<char*>(impl_->storage->data.get()) + impl_->offset * element_size();
}

template <class T>
T* Tensor::data() const {
  KESTREL_CHECK(dtype() == DTypeOf<T>::value, "data<T>(): tensor is ", dtype_name(dtype()),
                ", asked for ", dtype_name(DTypeOf<T>::value));
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data() const;
template double* Tensor::data() const;
template f16* Tensor::data() const;
template bf16* Tensor::data() const;
template int32_t* Tensor::data() const;
template int64_t* Tensor::data() const;
template uint8_t* Tensor::data() const;

std::string Tensor::describe() const {
  if (!impl_) return "undefined tensor";
  return str(dtype_name(dtype()), shape_str(shape()), " on ", device().str());
}

// --- autograd accessors -----------------------------------------------------------------------------

bool Tensor::requires_grad() const {
  return impl_ && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor Tensor::set_requires_grad(bool value) const {
  KESTREL_NEED_DEFINED();
  KESTREL_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor: detach() it first");
  KESTREL_CHECK(!value || is_floating(dtype()), "only floating-point tensors can require grad, got ",
                describe());
  if (!impl_->autograd) impl_->autograd = std::make_shared<autograd::AutogradMeta>();
  impl_->autograd->requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const {
  return impl_ && impl_->autograd ? impl_->autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  KESTREL_NEED_DEFINED();
  if (!impl_->autograd) impl_->autograd = std::make_shared<autograd::AutogradMeta>();
  impl_->autograd->grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_ && impl_->autograd ? impl_->autograd->grad_fn : none;
}

void Tensor::register_grad_ready_hook(std::function<void(const Tensor&)> hook) {
  KESTREL_CHECK(requires_grad() && is_leaf(),
                "grad-ready hooks go on leaf tensors that require grad (parameters)");
  impl_->autograd->ready_hooks.push_back(std::move(hook));
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  if (!impl_) return Tensor();
  return make_view(*this, shape(), strides(), storage_offset());
}

// --- copies -------------------------------------------------------------------------------------------

namespace {

kernels::StridedLayout layout_of(const Tensor& t) {
  kernels::StridedLayout l;
  l.rank = static_cast<int>(t.dim());
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = t.shape()[d];
    l.stride[d] = t.strides()[d];
  }
  return l;
}

// dst (same device, same dtype) <- src, any strides. Overlapping views (a shift within one
// buffer) go through a fresh copy of src: an element-by-element copy would read values it has
// already overwritten, and cudaMemcpyAsync is undefined for overlapping memory (memmove is fine).
void copy_same_device(const Tensor& dst, const Tensor& src) {
  const Device dev = dst.device();
  if (dst.numel() == 0) return;
  auto staged = [&] {
    const Tensor copy = Tensor::empty(src.shape(), src.dtype(), dev);
    copy_same_device(copy, src);
    copy_same_device(dst, copy);
  };
  if (dst.is_contiguous() && src.is_contiguous()) {
    const size_t bytes = dst.numel() * dst.element_size();
    const auto* d = static_cast<const char*>(dst.data_ptr());
    const auto* s = static_cast<const char*>(src.data_ptr());
    if (d == s) return;
    ops::launch(
        dev, [&] { std::memmove(dst.data_ptr(), src.data_ptr(), bytes); },
        [&](cudaStream_t stream) {
          if (d < s + bytes && s < d + bytes) return staged();  // memmove's overlap, by hand
          KESTREL_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes,
                                             cudaMemcpyDeviceToDevice, stream));
        });
    return;
  }
  const kernels::StridedLayout dl = layout_of(dst), sl = layout_of(src);
  if (kernels::same_view(dst.data_ptr(), dl, src.data_ptr(), sl)) return;
  if (kernels::copy_overlaps(dst.data_ptr(), dl, src.data_ptr(), sl, dst.element_size()))
    return staged();
  ops::launch(
      dev, [&] { kernels::copy_strided_cpu(dst.element_size(), src.data_ptr(), sl, dst.data_ptr(), dl); },
      [&](cudaStream_t stream) {
        kernels::copy_strided_cuda(dst.element_size(), src.data_ptr(), sl, dst.data_ptr(), dl,
                                   stream);
      });
}

// A contiguous tensor with src's values in dtype `dt`, on src's device.
Tensor contiguous_as(const Tensor& src, DType dt) {
  Tensor c = src;
  if (!src.is_contiguous()) {
    c = Tensor::empty(src.shape(), src.dtype(), src.device());
    copy_same_device(c, src);
  }
  if (dt == src.dtype()) return c;
  Tensor out = Tensor::empty(src.shape(), dt, src.device());
  ops::launch(
      src.device(), [&] { kernels::cast_cpu(c.data_ptr(), c.dtype(), out.data_ptr(), dt, c.numel()); },
      [&](cudaStream_t stream) {
        kernels::cast_cuda(c.data_ptr(), c.dtype(), out.data_ptr(), dt, c.numel(), stream);
      });
  return out;
}

}  // namespace

void Tensor::copy_(const Tensor& src, bool non_blocking) const {
  KESTREL_NEED_DEFINED();
  KESTREL_CHECK(src.shape() == shape(), "copy_: shape mismatch, destination ", describe(),
                ", source ", src.describe());
  if (numel() == 0) return;
  // A broadcast destination has several elements at one address: which write lands is up to the
  // order of the writes, which CUDA does not fix (PyTorch refuses it too).
  for (int64_t d = 0; d < dim(); ++d)
    KESTREL_CHECK(size(d) == 1 || stride(d) != 0, "copy_: the destination ", describe(),
                  " is broadcast along dimension ", d, " (stride 0), so several of its elements "
                  "share one memory location; copy into a tensor of its own (.contiguous())");
  if (src.device() == device()) {
    if (src.dtype() == dtype()) return copy_same_device(*this, src);
    Tensor converted = contiguous_as(src, dtype());
    return copy_same_device(*this, converted);
  }
  // Across devices: convert and compact on the source side, move the bytes, scatter on arrival.
  Tensor packed = contiguous_as(src, dtype());
  Tensor landing = is_contiguous() ? *this : Tensor::empty(shape(), dtype(), device());
  const size_t bytes = numel() * element_size();
  const bool to_host = device().is_cpu();
  KESTREL_CHECK(src.device().is_cpu() || device().is_cpu(),
                "copy_ between two CUDA devices goes through the host: copy to cpu first");
  const Device gpu = to_host ? src.device() : device();
  DeviceGuard guard(gpu);
  Stream stream = current_stream(gpu);
  // A blocking copy waits for the device; an asynchronous one leaves the pinned storage an event
  // recorded in the capture to wait for, and a replay would copy the same host buffer again.
  refuse_during_capture(stream, str("copy_ of ", src.describe(), " to ", describe()),
                        "copy between host and device before capture_begin (into tensors the "
                        "graph reads) or after replay() (from tensors it wrote)");
  KESTREL_CUDA_CHECK(cudaMemcpyAsync(landing.data_ptr(), packed.data_ptr(), bytes,
                                     to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                     stream.handle()));
  const Tensor& host_side = to_host ? landing : packed;
  const bool async = non_blocking && host_side.is_pinned() && landing.is_same(*this);
  if (async) {
    Event done(gpu);
    done.record(stream);
    host_side.storage()->last_async_use = done;
  } else {
    stream.synchronize();
  }
  if (!landing.is_same(*this)) copy_same_device(*this, landing);
}

void Tensor::fill_(double value) const {
  KESTREL_NEED_DEFINED();
  if (is_contiguous()) {
    return ops::launch(
        device(), [&] { kernels::fill_cpu(data_ptr(), dtype(), numel(), value); },
        [&](cudaStream_t stream) {
          kernels::fill_cuda(data_ptr(), dtype(), numel(), value, stream);
        });
  }
  Tensor tmp = Tensor::full(shape(), value, dtype(), device());
  copy_same_device(*this, tmp);
}

// --- reading back ------------------------------------------------------------------------------------

std::vector<double> Tensor::to_double_vector() const {
  // A CUDA tensor's copy to the host reports itself (Stream::synchronize); a CPU one is counted
  // here, as the read that would wait on CUDA.
  if (device().is_cpu()) note_host_sync("Tensor::to_double_vector / item");
  Tensor host = device().is_cpu() ? contiguous_as(*this, dtype()) : to(Device::cpu());
  std::vector<double> out(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) out[i] = load_as_double(host.data_ptr(), dtype(), i);
  return out;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  KESTREL_CHECK(dtype() == DTypeOf<T>::value, "to_vector<T>(): tensor is ", dtype_name(dtype()));
  if (device().is_cpu()) note_host_sync("Tensor::to_vector");
  Tensor host = device().is_cpu() ? contiguous_as(*this, dtype()) : to(Device::cpu());
  std::vector<T> out(host.numel());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<f16> Tensor::to_vector() const;
template std::vector<bf16> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;
template std::vector<uint8_t> Tensor::to_vector() const;

double Tensor::item() const {
  KESTREL_CHECK(numel() == 1, "item() needs a one-element tensor, got ", describe());
  return to_double_vector()[0];
}

}  // namespace kestrel
