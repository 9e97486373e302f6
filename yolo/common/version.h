// What this binary is: `kestrel --version` (the version, the commit it was built from, and the
// libraries it was built against) and the line every command starts with after its options, as
// the reference's "YOLOv5 🚀 v7.0-... Python-... torch-... CPU": Kestrel's version, and the device
// it runs on (the GPU's name and memory, or the CPU's thread count).
#pragma once
#include <string>

#include "engine/device.h"

namespace kestrel::yolo {

// "kestrel 0.17.0 (commit 6b1b321ab)\nbuilt with CUDA 13.0, cuDNN 9.10.2, NCCL 2.27.3, oneDNN 3.2.0,
// OpenCV 4.6.0\n"
std::string version_text();

// "Kestrel 🚀 0.17.0-g6b1b321ab C++20 CPU (2 threads)" or "... CUDA:0 (NVIDIA H200, 143771MiB)".
std::string startup_line(Device device);

}  // namespace kestrel::yolo
