// Tensor creation, metadata, views, copies and read-back on the CPU.
#include "engine/tensor.h"

#include "tests/support/testing.h"

using namespace kestrel;

TEST(Tensor, CreationAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4, 5});
  EXPECT_EQ(t.dim(), 4);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_EQ(t.strides(), (Shape{60, 20, 5, 1}));
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "float32[2, 3, 4, 5] on cpu");
  EXPECT_THROW(t.size(4), Error);
  EXPECT_THROW(Tensor::empty({2, -1}), Error);
}

TEST(Tensor, AllDTypesHoldTheirValues) {
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64,
                   DType::U8}) {
    Tensor t = Tensor::full({3}, 3.0, dt);
    EXPECT_EQ(t.element_size(), dtype_size(dt));
    EXPECT_EQ(t.to_double_vector(), (std::vector<double>{3, 3, 3})) << dtype_name(dt);
  }
}

TEST(Tensor, ScalarsAndItem) {
  Tensor s = Tensor::scalar(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 2.5);
  EXPECT_THROW(Tensor::zeros({2}).item(), Error);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor col = t.slice(1, 1, 2);
  EXPECT_EQ(col.shape(), (Shape{2, 1}));
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{1, 4}));
  col.fill_(9);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 9, 2, 3, 9, 5}));
  Tensor tr = t.transpose(0, 1);
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.to_vector<float>(), (std::vector<float>{0, 3, 9, 9, 2, 5}));
  EXPECT_TRUE(tr.contiguous().is_contiguous());
}

TEST(Tensor, CopyConvertsDTypes) {
  Tensor src = Tensor::from_vector<float>({1.5f, -2.25f, 3.0f}, {3});
  Tensor dst = Tensor::empty({3}, DType::F64);
  dst.copy_(src);
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{1.5, -2.25, 3.0}));
  EXPECT_THROW(dst.copy_(Tensor::zeros({4})), Error);
}

TEST(Tensor, CopyIntoABroadcastDestinationIsRefused) {
  const Tensor base = Tensor::zeros({3}, DType::F32);
  const Tensor rows = make_view(base, {2, 3}, {0, 1}, 0);  // two rows on the same three floats
  const std::string e = kestrel::testing::error_of([&] { rows.copy_(Tensor::ones({2, 3})); });
  EXPECT_NE(e.find("broadcast along dimension 0"), std::string::npos) << e;
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  // A size-1 dimension may have any stride; reading from a broadcast source is fine.
  make_view(base, {1, 3}, {0, 1}, 0).copy_(Tensor::ones({1, 3}));
  Tensor dst = Tensor::zeros({2, 3});
  dst.copy_(make_view(base, {2, 3}, {0, 1}, 0));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 1, 1}));
}

TEST(Tensor, DataAccessChecksTheType) {
  Tensor t = Tensor::zeros({2}, DType::F32);
  EXPECT_NO_THROW(t.data<float>());
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(t.to_vector<int32_t>(), Error);
}

TEST(Tensor, UndefinedTensorIsRefused) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.shape(), Error);
  EXPECT_EQ(t.describe(), "undefined tensor");
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

TEST(Tensor, EmptyTensorsAreContiguousAndFillable) {
  Tensor t = Tensor::zeros({2, 3, 0, 5});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 0);
  t.fill_(1.0);
  EXPECT_TRUE(t.to_double_vector().empty());
}
