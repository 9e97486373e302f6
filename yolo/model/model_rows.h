// The rows of a model yaml as modules (the reference's parse_model), shared by the models built
// from rows (yolo/model/model.h's DetectionModel, yolo/model/classification_model.h's
// ClassificationModel): a row's builder by its module name, and the table text the reference prints.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/random.h"
#include "layers/blocks.h"
#include "yolo/model/model_config.h"

namespace kestrel::yolo {

int64_t make_divisible(double x, int64_t divisor);  // model.h

// One line of the model table.
struct LayerInfo {
  int index;
  std::string from;  // "-1", "[-1, 6]"
  int number;        // repeats after the depth gain
  int64_t params;
  std::string type;
  std::string args;  // the resolved arguments, as the reference prints them
};

// A built row's module and the absolute indices of its inputs (the previous layer's for -1).
struct ModelLayer {
  std::shared_ptr<layers::Module> module;
  std::vector<int> from;
};

// The reference's nn.Sequential of layers ("model.0", "model.1", ...); layers are heterogeneous
// (Concat and Detect take several inputs), so the model routes them itself.
class LayerSequence : public layers::Module {
 public:
  void append(std::shared_ptr<layers::Module> m) { register_module(std::to_string(count_++), m); }
  std::string type_name() const override { return "torch.nn.modules.container.Sequential"; }

 private:
  int count_ = 0;
};

// A yaml row being built: what a module's builder reads (the row, its repeat count after the depth
// gain, its input channels, the Detect output width that channel scaling leaves alone, the width
// gain, the absolute inputs and every earlier layer's channels).
struct RowBuild {
  const LayerRow& row;
  const std::string& where;
  int n;
  int64_t c_in, no;
  double gw;
  const std::vector<int>& from;
  const std::vector<int64_t>& ch;
  Generator& gen;

  const ConfigArg* arg(size_t k) const { return k < row.args.size() ? &row.args[k] : nullptr; }
  // The reference's width gain: channels times gw, up to a multiple of 8 (not Detect's outputs).
  int64_t scaled(int64_t c2) const { return c2 != no ? make_divisible(c2 * gw, 8) : c2; }
  // n copies in an nn.Sequential, or the module itself when n is 1 (as the reference's m_).
  template <class Make>
  std::shared_ptr<layers::Module> repeat(Make make) const {
    if (n == 1) return make();
    auto seq = std::make_shared<layers::Sequential>();
    for (int r = 0; r < n; ++r) seq->append(make());
    return seq;
  }
};

// A built row: its module, its arguments as the reference's table prints them, its output channels.
struct BuiltRow {
  std::shared_ptr<layers::Module> module;
  std::vector<std::string> args;
  int64_t c_out = 0;
};


// Every row but a model's head (Detect, Segment, Classify), by the yaml's module name: Conv, C3,
// Bottleneck, SPPF, nn.Upsample, Concat.
BuiltRow build_row(const RowBuild& r);

// A model's rows built in order into `container` ("model.0", ...), with the reference's table;
// `head(r)` builds the rows build_row() does not know (Detect, Segment, Classify), the last row only.
struct BuiltRows {
  std::vector<ModelLayer> layers;
  std::vector<bool> saved;  // outputs a later layer reads
  std::vector<LayerInfo> table;
};
BuiltRows build_rows(const ModelConfig& config, LayerSequence& container, int64_t no, Generator& gen,
                     const std::function<BuiltRow(const RowBuild&)>& head);

// Runs rows [0, head) of `layers` on x (the head itself is the caller's), routing every layer's
// inputs by its `from`; returns the head's inputs. `shapes` gets each layer's output shape and
// `observe(index, module, output)` each output, when given.
using LayerObserver = std::function<void(int index, const layers::Module& module, const Tensor& output)>;
std::vector<Tensor> run_rows(const std::vector<ModelLayer>& layers, const std::vector<bool>& saved,
                             const Tensor& x, std::vector<Shape>* shapes, const LayerObserver* observe);

// The reference's model_info line: "<name> summary: <L> layers, <P> parameters, <G> gradients,
// <F> GFLOPs" for `model` of `layer_count` modules. `fused`: as after the reference's fuse() (each
// Conv block's BatchNorm folded into its convolution, which gains a bias; no gradients).
std::string summary_line(const std::string& name, layers::Module& model, int64_t layer_count, bool fused, double gflops);
// The layer table as the reference prints it (from, n, params, module, arguments), one line a row.
std::string layer_table_text(const std::vector<LayerInfo>& table);

// The reference's model_info name: "YOLOv5s" for yolov5s.yaml, "Model" without a yaml's name.
std::string summary_name(const ModelConfig& config);

// thop's count for a model just run on one image (its modules' last forward): the convolutions'
// multiply-accumulates, 4 per BatchNorm output unless `fused` (2, doubled for the affine pair),
// and 1 per element of each of `upsampled`.
double thop_ops(layers::Module& model, bool fused, const std::vector<Shape>& upsampled = {});
// Every row's output that an nn.Upsample layer made, from a shapes pass (layer_output_shapes).
std::vector<Shape> upsample_shapes(const std::vector<ModelLayer>& layers, const std::vector<Shape>& shapes);

// A Detect-like head's anchors in pixels: the yaml's, or, where it gives only a count per level,
// provisional ones (0, 1, 2, ...) until AutoAnchor computes them, as the reference. Also their
// and the levels' channels' text in the layer table.
std::vector<std::vector<double>> head_anchors(const ModelConfig& config, size_t levels);
std::string anchors_text(const std::vector<std::vector<double>>& anchors);
std::string channels_text(const std::vector<int64_t>& channels);

// A stride per output level, from a training-mode pass of a size x size image (the reference's
// stride pass): size over each level's grid height.
std::vector<double> level_strides(const std::vector<Tensor>& raw, int64_t size);

// Python's text of a number, a list, and a yaml argument, as the reference's table prints them.
std::string python_number(double v);
std::string python_list(const std::vector<std::string>& items);
std::string arg_text(const ConfigArg& a);

}  // namespace kestrel::yolo
