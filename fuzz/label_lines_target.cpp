// Label rows never throw: a bad file comes back with an error naming the row, and every box of
// a file that is accepted is a class in range with a normalised, non-empty box.
#include <cmath>

#include "fuzz/targets.h"
#include "yolo/data/label_scan.h"

namespace kestrel::fuzz {

void label_lines(std::string_view input) {
  for (const int class_limit : {0, 80}) {  // --single-cls accepts any class; nc 80 as COCO
    const yolo::data::ParsedLabels labels = yolo::data::parse_labels(input, class_limit);
    if (!labels.error.empty()) {
      require(labels.boxes.empty(), "a refused label file still returned boxes");
      require(labels.error.rfind("row ", 0) == 0, "a refusal does not name its row");
      continue;
    }
    for (const yolo::data::LabelBox& b : labels.boxes) {
      require(b.cls >= 0 && (class_limit <= 0 || b.cls < class_limit), "class out of range");
      for (const float v : {b.x, b.y, b.w, b.h})
        require(std::isfinite(v) && v >= 0 && v <= 1, "coordinate outside [0, 1]");
      require(b.w > 0 && b.h > 0, "empty box accepted");
    }
  }
}

}  // namespace kestrel::fuzz
