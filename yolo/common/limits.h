// Limits every command applies to what it is asked.
#pragma once

namespace kestrel::yolo {

// The largest image size a command accepts, 8192 pixels a side (12.8x the reference's default
// 640): one letterboxed image is then 200 MB, a training mosaic canvas 800 MB. Beyond it a value
// is a typing error that would otherwise fail deep inside an allocation.
constexpr int kMaxImageSize = 8192;

}  // namespace kestrel::yolo
