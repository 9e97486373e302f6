#include "tests/support/testing.h"

#include <cmath>
#include <filesystem>
#include <random>

#include "base/error.h"
#include "engine/autograd.h"

namespace kestrel::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(shape_numel(shape));
  for (double& v : values) v = dist(rng);
  Tensor t = Tensor::from_vector(values, shape);
  return dtype == DType::F64 ? t : t.to(dtype);
}

::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure()
           << "shapes differ: " << a.describe() << " vs " << b.describe();
  std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double excess = std::abs(x[i] - y[i]) - (atol + rtol * std::abs(y[i]));
    if (std::isnan(x[i]) != std::isnan(y[i])) excess = INFINITY;
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  if (worst > 0)
    return ::testing::AssertionFailure() << "element " << worst_i << " of " << x.size() << ": "
                                         << x[worst_i] << " vs " << y[worst_i] << " (atol " << atol
                                         << ", rtol " << rtol << ")";
  return ::testing::AssertionSuccess();
}

namespace {

double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.to_double_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace

::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                     const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& opt) {
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (t.dtype() != DType::F64 || !t.device().is_cpu() || !t.is_contiguous())
      return ::testing::AssertionFailure() << "gradcheck needs contiguous CPU float64 inputs, got "
                                           << t.describe();
    if (t.requires_grad()) t.set_grad(Tensor());
  }
  Tensor out = f(inputs);
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> w(out.numel());
  for (double& v : w) v = dist(rng) * (rng() % 2 ? 1 : -1);
  out.backward(Tensor::from_vector(w, out.shape()));

  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor analytic = x.grad();
    if (!analytic.defined()) return ::testing::AssertionFailure() << "input " << k << " got no grad";
    std::vector<double> a = analytic.to_double_vector();
    double* data = x.data<double>();
    autograd::NoGradGuard no_grad;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + opt.eps;
      const double plus = weighted_sum(f(inputs), w);
      data[i] = saved - opt.eps;
      const double minus = weighted_sum(f(inputs), w);
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * opt.eps);
      if (std::abs(numeric - a[i]) > opt.atol + opt.rtol * std::abs(numeric))
        return ::testing::AssertionFailure()
               << "input " << k << " " << x.describe() << " element " << i << ": analytic " << a[i]
               << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> temporaries_of(const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.parent_path().empty() ? "." : p.parent_path();
  const std::string prefix = p.filename().string() + ".tmp";
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind(prefix, 0) == 0) found.push_back(it->path().filename());
  return found;
}

}  // namespace kestrel::testing
