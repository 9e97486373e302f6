// Decoded images as numpy .npy files beside the images, as the reference's --cache disk writes
// and reads them (np.save of cv2.imread's BGR array, at the image's path with its extension
// replaced): shared by detection's and classification's loaders.
#pragma once
#include <opencv2/core.hpp>
#include <string>

namespace kestrel::yolo::data {

// The .npy beside an image: "a/b.c.jpg" -> "a/b.c.npy".
std::string npy_path_of(const std::string& image_path);

// numpy's .npy format (version 1.0, header padded to 64 bytes) for an H x W x 3 uint8 array,
// written atomically (io/atomic_file.h), so a crash never leaves a torn file to be read later.
void write_npy_image(const std::string& path, const cv::Mat& bgr);
// An H x W x 3 (or H x W, made 3-channel) uint8 C-order array from an .npy file; anything else is
// an error naming the file and saying to delete it (it is written again from the image).
cv::Mat read_npy_image(const std::string& path);

}  // namespace kestrel::yolo::data
