// Tensor: a typed, shaped, strided view of a Storage on one device, with autograd metadata.
// Copies of a Tensor are handles to the same tensor (like the well-known frameworks). Activations
// are NHWC by convention; nothing here assumes a layout.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "engine/device.h"
#include "engine/storage.h"

namespace kestrel {

using Shape = std::vector<int64_t>;

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- creation ------------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu(),
                      bool pinned = false);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  static Tensor empty_like(const Tensor& t);
  static Tensor zeros_like(const Tensor& t);
  // Host data copied into a new tensor on `device`; values.size() must equal the shape's numel.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());

  // --- metadata ------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t element_size() const;
  int64_t storage_offset() const;
  bool is_contiguous() const;
  bool is_pinned() const;
  const std::shared_ptr<Storage>& storage() const;
  void* data_ptr() const;  // first element (storage + offset)
  template <class T>
  T* data() const;  // checks that T matches dtype()
  std::string describe() const;  // "float32[2, 3] on cuda:0"
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // --- autograd ------------------------------------------------------------------------------
  bool requires_grad() const;
  Tensor set_requires_grad(bool value = true) const;  // leaves only; returns *this
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Runs once per backward, when this leaf's gradient has its final value for that backward.
  void register_grad_ready_hook(std::function<void(const Tensor& grad)> hook);
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same data, no history

  // --- differentiable views and copies (engine/ops/shape.cpp) ---------------------------------
  Tensor reshape(const Shape& shape) const;  // a view when contiguous, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;

  // --- in place, not recorded by autograd --------------------------------------------------------
  // Copies src's values (same shape; dtype converted if different) into this tensor's elements,
  // across devices too. non_blocking: asynchronous on the current stream where the host side is
  // pinned memory.
  void copy_(const Tensor& src, bool non_blocking = false) const;
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }

  // --- reading back ----------------------------------------------------------------------------
  template <class T>
  std::vector<T> to_vector() const;  // T must match dtype()
  std::vector<double> to_double_vector() const;  // any dtype
  double item() const;  // a one-element tensor's value

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::F32;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null for tensors that never needed grad
};

// Row-major (C-order) strides of a shape.
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);
// A new tensor sharing t's storage with the given geometry (no autograd history).
Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace kestrel
