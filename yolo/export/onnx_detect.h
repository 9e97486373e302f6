// The Detect head in the reference's export mode, as ONNX nodes: per level the 1x1 convolution,
// sigmoid of everything, xy = (2·σ + cell − 0.5)·stride, wh = (2·σ)²·anchor in pixels, the rest
// σ; the levels flattened to (batch, na·ny·nx, no) and concatenated into one output.
#pragma once
#include <string>
#include <vector>

#include "layers/detect.h"
#include "layers/segment.h"
#include "yolo/export/onnx_graph.h"

namespace kestrel::yolo::onnx_export {

// features: the names of Detect's inputs (NCHW, one per level). Returns the decoded output's name.
std::string emit_detect(GraphBuilder& g, const layers::Detect& detect, const std::vector<std::string>& features,
                        const std::string& scope);

// A Segment: Detect's decode with the mask coefficients left raw, and its Proto on the first
// level's input. Returns {detections, prototypes (NCHW)}.
std::vector<std::string> emit_segment(GraphBuilder& g, layers::Segment& segment, const std::vector<std::string>& features,
                                      const std::string& scope);

}  // namespace kestrel::yolo::onnx_export
