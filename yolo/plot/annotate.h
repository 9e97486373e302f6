// Detections drawn, cut out and written as the reference's detect.py does: utils/plots.py's
// Annotator (its OpenCV path) and save_one_box, and the --save-txt line format. Boxes are x1, y1,
// x2, y2 in pixels of the original image, already rounded (detect.py rounds after scale_boxes).
#pragma once
#include <opencv2/core.hpp>

#include <string>

namespace kestrel::yolo {

// The Annotator's line width: --line-thickness when positive, else
// max(round((height + width + 3) / 2 * 0.003), 2) (the reference sums the image's shape).
int annotator_line_width(int line_thickness, int height, int width);

// "person 0.87"; "person" with hide_conf; "" (no label drawn) with hide_labels.
std::string detection_label(const std::string& name, float conf, bool hide_labels, bool hide_conf);

// The box at line_width, and a non-empty label in white on a filled box of `colour` (BGR): above
// the box when there is room, else inside its top edge. Font scale line_width / 3, thickness
// line_width - 1 (at least 1).
void draw_box_label(cv::Mat& image, const float box[4], const std::string& label, cv::Scalar colour,
                    int line_width);

// save_one_box's region: width and height grown by 2% plus 10 pixels around the centre (float32
// arithmetic, as torch), truncated to integers and clipped to the image. May be empty.
cv::Rect crop_rect(const float box[4], int height, int width);

// One --save-txt line, without newline: class, centre x, centre y, width, height normalised by the
// image size (and conf with save_conf), each printed with %g as the reference.
std::string yolo_txt_line(int cls, const float box[4], float conf, int height, int width,
                          bool save_conf);

}  // namespace kestrel::yolo
