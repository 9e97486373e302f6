// The reference's Annotator and save_one_box arithmetic: line width, label text, where the label
// box goes, the crop's grown and clipped rectangle, and --save-txt's %g line.
#include "yolo/plot/annotate.h"

#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

using namespace kestrel::yolo;

namespace {

bool pixel_is(const cv::Mat& m, int x, int y, cv::Vec3b v) { return m.at<cv::Vec3b>(y, x) == v; }

}  // namespace

TEST(Annotate, LineWidthAndLabelText) {
  EXPECT_EQ(annotator_line_width(3, 480, 640), 3);
  EXPECT_EQ(annotator_line_width(1, 4000, 4000), 1);
  EXPECT_EQ(annotator_line_width(0, 480, 640), 2);    // round(1123 / 2 * 0.003) = 2
  EXPECT_EQ(annotator_line_width(0, 1080, 1920), 5);  // round(3003 / 2 * 0.003) = round(4.5045)
  EXPECT_EQ(annotator_line_width(0, 100, 100), 2);    // at least 2
  EXPECT_EQ(detection_label("person", 0.87f, false, false), "person 0.87");
  EXPECT_EQ(detection_label("person", 0.125f, false, false), "person 0.12");  // Python rounds halves to even
  EXPECT_EQ(detection_label("person", 0.87f, false, true), "person");
  EXPECT_EQ(detection_label("person", 0.87f, true, false), "");
}

TEST(Annotate, LabelAboveTheBoxOrInsideItsTopEdge) {
  const cv::Scalar colour(10, 200, 30);
  const cv::Vec3b c(10, 200, 30), black(0, 0, 0);
  const int lw = 3;
  int base = 0;
  const cv::Size text = cv::getTextSize("a", cv::FONT_HERSHEY_SIMPLEX, lw / 3.0, lw - 1, &base);
  const int mid = 20 + text.width / 2;  // a column inside the label box (fill or white text)
  auto drawn = [&](const float box[4], const std::string& label) {
    cv::Mat m(120, 120, CV_8UC3, cv::Scalar::all(0));
    draw_box_label(m, box, label, colour, lw);
    return m;
  };

  // Room above: the label box spans rows [60 - h - 3, 60] above the box's top edge.
  const float low[4] = {20, 60, 90, 110};
  const cv::Mat labelled = drawn(low, "a"), bare = drawn(low, "");
  EXPECT_TRUE(pixel_is(labelled, 50, 60, c));  // the box's top edge
  EXPECT_FALSE(pixel_is(labelled, mid, 60 - text.height - 1, black));
  EXPECT_TRUE(pixel_is(bare, mid, 60 - text.height - 1, black));  // --hide-labels: nothing above
  EXPECT_TRUE(pixel_is(labelled, 50, 85, black));                 // the box's inside is untouched

  // No room above (2 - h < 3): the label box spans rows [2, 2 + h + 3], inside the box.
  const float top[4] = {20, 2, 90, 60};
  EXPECT_FALSE(pixel_is(drawn(top, "a"), mid, 2 + text.height, black));
  EXPECT_TRUE(pixel_is(drawn(top, ""), mid, 2 + text.height, black));
}

TEST(Annotate, CropGrowsTheBoxAndClipsIt) {
  const float inside[4] = {10, 20, 50, 60};
  // Centre (30, 40), sides 40 * 1.02 + 10 = 50.8: corners 4.6, 14.6, 55.4, 65.4 truncated.
  EXPECT_EQ(crop_rect(inside, 100, 100), cv::Rect(4, 14, 51, 51));
  const float corner[4] = {0, 0, 20, 20};
  // -5.2 truncates toward zero to -5, then clips to 0.
  EXPECT_EQ(crop_rect(corner, 100, 100), cv::Rect(0, 0, 25, 25));
  const float edge[4] = {90, 90, 100, 100};
  // Centre 95, sides 20.2: 84.9 truncates to 84, 105.1 clips to 100.
  EXPECT_EQ(crop_rect(edge, 100, 100), cv::Rect(84, 84, 16, 16));
}

TEST(Annotate, TxtLinesInTheReferenceFormat) {
  const float box[4] = {10, 20, 50, 60};
  EXPECT_EQ(yolo_txt_line(2, box, 0.5f, 100, 200, false), "2 0.15 0.4 0.2 0.4");
  EXPECT_EQ(yolo_txt_line(0, box, 0.123456789f, 100, 200, true), "0 0.15 0.4 0.2 0.4 0.123457");
  const float odd[4] = {1, 2, 4, 9};
  EXPECT_EQ(yolo_txt_line(7, odd, 0.9f, 7, 3, false), "7 0.833333 0.785714 1 1");
}
