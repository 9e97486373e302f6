// The classifier's head (models.common.Classify) as ONNX nodes: its Conv (BatchNorm folded, SiLU),
// GlobalAveragePool, Flatten and Gemm (the Linear, transB); Dropout is the identity at inference.
#pragma once
#include <string>
#include <vector>

#include "layers/classify.h"
#include "yolo/export/onnx_graph.h"

namespace kestrel::yolo::onnx_export {

// inputs: the names of Classify's inputs (NCHW; several are joined on channels first). Returns
// the logits' name, (batch, nc).
std::string emit_classify(GraphBuilder& g, layers::Classify& head, const std::vector<std::string>& inputs,
                          const std::string& scope);

}  // namespace kestrel::yolo::onnx_export
