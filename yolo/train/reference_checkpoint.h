// Kestrel's runs (detection's and segmentation's) as the reference's tools read them: best.pt and last.pt beside best.safetensors
// and last.safetensors (yolo/model/pt_writer.h's module trees). The safetensors stay what Kestrel
// resumes from exactly (float32, mid-epoch progress, generators, scaler); the .pt files are
// train.py's: last.pt the checkpoint of the last completed epoch (model and EMA in float16, the
// optimizer's state_dict in smart_optimizer's order), best.pt its copy at the best fitness, both
// stripped as strip_optimizer leaves them when the run ends.
#pragma once
#include <string>

#include "yolo/model/model.h"
#include "yolo/model/pt_writer.h"
#include "yolo/train/optimizer.h"

namespace kestrel::yolo {

// The optimizer's groups and state as torch's state_dict holds them (SGD, Adam, AdamW).
PtOptimizerState pt_optimizer_state(const Optimizer& optimizer);

// datetime.now().isoformat(): local time with microseconds.
std::string iso_now();

// As strip_optimizer at a run's end: `pt_path` rewritten from the stripped safetensors checkpoint
// `stripped` (the EMA's weights in float16), loaded into `scratch` (a model of the run's yaml: a
// DetectionModel or a SegmentationModel). Returns the new file's size in bytes.
uint64_t write_stripped_pt(const std::string& stripped, const std::string& pt_path, layers::Module& scratch,
                           PtWriteOptions o);

}  // namespace kestrel::yolo
