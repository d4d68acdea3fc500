// oneDNN's fp32 -> bf16 reorder and L2 reduction for `strata bench adam` (see
// adam_anchors.h). A translation unit of its own, in a target of its own, because
// LibTorch's include folder carries oneDNN 3.x headers while the system library is 2.x:
// this file must see only the system's (bench/CMakeLists.txt).
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/adam_anchors.h"

namespace strata::bench {
namespace {

class OneDnnTransformsImpl final : public OneDnnTransforms {
 public:
  OneDnnTransformsImpl(const float* src, uint16_t* dst, size_t n)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims dims = {static_cast<dnnl::memory::dim>(n)};
    const dnnl::memory::desc src_md(dims, dt::f32, tag::a), dst_md(dims, dt::bf16, tag::a);
    src_ = dnnl::memory(src_md, engine_, const_cast<float*>(src));
    dst_ = dnnl::memory(dst_md, engine_, dst);
    reorder_ = dnnl::reorder(src_, dst_);
    const dnnl::memory::desc sum_md({1}, dt::f32, tag::a);
    sum_ = dnnl::memory(sum_md, engine_, &sum_value_);
    const dnnl::reduction::desc rd(dnnl::algorithm::reduction_norm_lp_power_p_sum, src_md, sum_md, 2.0f, 0.0f);
    reduction_ = dnnl::reduction(dnnl::reduction::primitive_desc(rd, engine_));
  }
  void ReorderFp32ToBf16() override {
    reorder_.execute(stream_, src_, dst_);
    stream_.wait();
  }
  double SumSquares() override {
    reduction_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, sum_}});
    stream_.wait();
    return sum_value_;
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory src_, dst_, sum_;
  float sum_value_ = 0;
  dnnl::reorder reorder_;
  dnnl::reduction reduction_;
};

}  // namespace

std::unique_ptr<OneDnnTransforms> MakeOneDnnTransforms(const float* src, uint16_t* dst, size_t n) {
  try {
    return std::make_unique<OneDnnTransformsImpl>(src, dst, n);
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

}  // namespace strata::bench
