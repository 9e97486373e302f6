// The reference's smooth(): a box filter over a fraction of a curve, edges padded with the end
// values. Metrics smooth the mean F1 curve with it to pick the confidence they report at; the
// metric-confidence plots draw the same smoothing of their mean curve.
#pragma once
#include <vector>

namespace kestrel::yolo {

// Box filter of fraction f (its width is round-half-even(len * f * 2) / 2 + 1 points).
std::vector<double> smooth(const std::vector<double>& y, double f = 0.05);

}  // namespace kestrel::yolo
