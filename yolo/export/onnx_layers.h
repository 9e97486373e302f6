// The model's single-input modules and Concat as ONNX nodes, in the reference's NCHW layout:
// Conv (BatchNorm folded into the convolution, SiLU as x * sigmoid(x)), Bottleneck, C3, SPPF,
// MaxPool2d, nn.Upsample (nearest x2) and the repeats a yaml row's `number` makes (Sequential).
#pragma once
#include <string>
#include <vector>

#include "layers/module.h"
#include "yolo/export/onnx_graph.h"

namespace kestrel::yolo::onnx_export {

// Appends `module` applied to the tensor named `input`; returns the output's name. `scope` is the
// module's state-dict path ("model.2.m.0"), used for node and initializer names. A module type
// the export does not know is an error naming it and the scope.
std::string emit_unary(GraphBuilder& g, layers::Module& module, const std::string& input,
                       const std::string& scope);

// Concatenation along channels (axis 1 of NCHW).
std::string emit_concat(GraphBuilder& g, const std::vector<std::string>& inputs, const std::string& scope);

}  // namespace kestrel::yolo::onnx_export
