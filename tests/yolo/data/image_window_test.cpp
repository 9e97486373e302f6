// --view-img's preconditions: a display (DISPLAY or WAYLAND_DISPLAY), and a build with highgui.
#include "yolo/data/image_window.h"

#include <gtest/gtest.h>

using namespace kestrel::yolo::data;

TEST(ImageWindow, NoDisplayIsExplained) {
  for (const auto& [display, wayland] : {std::pair<const char*, const char*>{nullptr, nullptr}, {"", ""}}) {
    const std::string why = view_unavailable_reason(display, wayland);
    EXPECT_NE(why.find("there is no display here"), std::string::npos) << why;
    EXPECT_NE(why.find("drop --view-img"), std::string::npos) << why;
  }
}

TEST(ImageWindow, WithADisplayOnlyTheBuildCanStandInTheWay) {
  for (const auto& [display, wayland] : {std::pair<const char*, const char*>{":0", nullptr}, {nullptr, "wayland-0"}}) {
    const std::string why = view_unavailable_reason(display, wayland);
    EXPECT_TRUE(why.empty() || why.find("built without OpenCV highgui") != std::string::npos) << why;
    EXPECT_EQ(why.find("no display"), std::string::npos) << why;
  }
}
