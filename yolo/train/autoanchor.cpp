#include "yolo/train/autoanchor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "engine/autograd.h"

namespace kestrel::yolo {
namespace {

using WH = std::pair<float, float>;

// min over w/h of min(r, 1/r), r = label / anchor: 1 for a perfect fit.
float ratio_metric(const WH& l, const WH& a) {
  const float rw = l.first / a.first, rh = l.second / a.second;
  return std::min(std::min(rw, 1 / rw), std::min(rh, 1 / rh));
}

float best_metric(const WH& l, const std::vector<WH>& anchors) {
  float best = 0;
  for (const WH& a : anchors) best = std::max(best, ratio_metric(l, a));
  return best;
}

// The genetic search's fitness: mean best metric over labels, counting only fits above thr.
double fitness(const std::vector<WH>& wh, const std::vector<WH>& k, float thr) {
  double sum = 0;
  for (const WH& l : wh) {
    const float b = best_metric(l, k);
    sum += b > thr ? b : 0;
  }
  return wh.empty() ? 0 : sum / wh.size();
}

double normal(Generator& gen) {
  const double u1 = 1.0 - gen.uniform(), u2 = gen.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<WH> sort_by_area(std::vector<WH> k) {
  std::sort(k.begin(), k.end(),
            [](const WH& a, const WH& b) { return a.first * a.second < b.first * b.second; });
  return k;
}

// Lloyd's k-means on 2-d points, restarted `restarts` times from random observations; the
// codebook with the lowest mean distance wins (scipy.cluster.vq.kmeans semantics).
std::vector<WH> kmeans(const std::vector<WH>& pts, int n, int restarts, Generator& gen) {
  std::vector<WH> best;
  double best_dist = std::numeric_limits<double>::infinity();
  for (int r = 0; r < restarts; ++r) {
    std::vector<WH> c;
    std::vector<size_t> idx(pts.size());
    std::iota(idx.begin(), idx.end(), 0);
    for (int i = 0; i < n; ++i) {  // partial Fisher-Yates: n distinct observations
      const size_t j = i + gen.randint(idx.size() - i);
      std::swap(idx[i], idx[j]);
      c.push_back(pts[idx[i]]);
    }
    double previous = std::numeric_limits<double>::infinity(), dist = 0;
    for (int it = 0; it < 100; ++it) {
      std::vector<double> sx(n, 0), sy(n, 0);
      std::vector<int> count(n, 0);
      dist = 0;
      for (const WH& p : pts) {
        int arg = 0;
        double d2 = std::numeric_limits<double>::infinity();
        for (int i = 0; i < n; ++i) {
          const double dx = p.first - c[i].first, dy = p.second - c[i].second;
          if (dx * dx + dy * dy < d2) {
            d2 = dx * dx + dy * dy;
            arg = i;
          }
        }
        dist += std::sqrt(d2);
        sx[arg] += p.first;
        sy[arg] += p.second;
        ++count[arg];
      }
      dist /= pts.size();
      std::vector<WH> next;
      for (int i = 0; i < n; ++i)
        if (count[i]) next.emplace_back(sx[i] / count[i], sy[i] / count[i]);
      c = next;  // empty clusters are dropped, as scipy does
      if (previous - dist <= 1e-5 || static_cast<int>(c.size()) < n) break;
      previous = dist;
    }
    if (static_cast<int>(c.size()) == n && dist < best_dist) {
      best_dist = dist;
      best = c;
    }
  }
  return best;
}

// '%i,%i, ' per anchor of Python's round() (half to even), the last separator dropped.
std::string format_anchors(const std::vector<WH>& k) {
  std::string s;
  for (const WH& a : k)
    s += str(static_cast<long>(std::nearbyint(a.first)), ",", static_cast<long>(std::nearbyint(a.second)), ", ");
  return s.empty() ? s : s.substr(0, s.size() - 2);
}

// The reference's kmean_anchors print_results over every label (wh0): best possible recall and
// anchors past thr, then the metric's mean over all label-anchor pairs, its best per label, its
// mean above thr, and the anchors.
std::string results_lines(const std::vector<WH>& wh0, const std::vector<WH>& k, float thr, int img_size) {
  double bpr = 0, past = 0, all = 0, best_sum = 0, past_sum = 0;
  for (const WH& l : wh0) {
    float best = 0;
    for (const WH& a : k) {
      const float x = ratio_metric(l, a);
      all += x;
      if (x > thr) past += 1, past_sum += x;
      best = std::max(best, x);
    }
    best_sum += best;
    bpr += best > thr;
  }
  const double labels = std::max<double>(1, static_cast<double>(wh0.size()));
  const double pairs = labels * static_cast<double>(k.size());
  char line[256];
  std::snprintf(line, sizeof line, "thr=%.2f: %.4f best possible recall, %.2f anchors past thr\n", thr, bpr / labels,
                past / labels);
  std::string out = std::string("AutoAnchor: ") + line;
  std::snprintf(line, sizeof line, "n=%zu, img_size=%d, metric_all=%.3f/%.3f-mean/best, past_thr=%.3f-mean: ",
                k.size(), img_size, all / pairs, best_sum / labels, past > 0 ? past_sum / past : 0.0);
  return out + "AutoAnchor: " + line + format_anchors(k) + "\n";
}

}  // namespace

std::vector<WH> label_sizes(const std::vector<data::ImageRecord>& records, int img_size,
                            Generator* scale_jitter) {
  std::vector<WH> wh;
  for (const auto& r : records) {
    const double longest = std::max(r.width, r.height);
    if (longest <= 0) continue;
    double sx = img_size * r.width / longest, sy = img_size * r.height / longest;
    if (scale_jitter) {
      const double s = scale_jitter->uniform(0.9, 1.1);
      sx *= s;
      sy *= s;
    }
    for (const auto& b : r.boxes)
      wh.emplace_back(static_cast<float>(b.w * sx), static_cast<float>(b.h * sy));
  }
  return wh;
}

AnchorFit anchor_fit(const std::vector<WH>& wh, const std::vector<WH>& anchors, double thr) {
  AnchorFit fit;
  if (wh.empty()) return fit;
  const float inv = static_cast<float>(1.0 / thr);
  double recalled = 0, above = 0;
  for (const WH& l : wh) {
    float best = 0;
    for (const WH& a : anchors) {
      const float m = ratio_metric(l, a);
      best = std::max(best, m);
      above += m > inv;
    }
    recalled += best > inv;
  }
  fit.bpr = recalled / wh.size();
  fit.anchors_per_target = above / wh.size();
  return fit;
}

std::vector<WH> kmean_anchors(const std::vector<data::ImageRecord>& records, int n, int img_size,
                              double thr_ratio, int generations, Generator& gen, std::string* log) {
  const float thr = static_cast<float>(1.0 / thr_ratio);
  std::vector<WH> wh0 = label_sizes(records, img_size, nullptr);
  size_t tiny = 0;
  std::vector<WH> wh;
  for (const WH& l : wh0) {
    tiny += l.first < 3 || l.second < 3;
    if (l.first >= 2 || l.second >= 2) wh.push_back(l);
  }
  auto say = [&](const std::string& s) {
    if (log) *log += "AutoAnchor: " + s + "\n";
  };
  if (tiny) say(str("WARNING: extremely small objects found: ", tiny, " of ", wh0.size(), " labels are < 3 pixels in size"));
  say(str("Running kmeans for ", n, " anchors on ", wh.size(), " points..."));

  std::vector<WH> k;
  if (static_cast<int>(wh.size()) >= n) {
    // Whiten by the per-axis standard deviation, cluster, un-whiten.
    double mx = 0, my = 0;
    for (const WH& l : wh) mx += l.first, my += l.second;
    mx /= wh.size();
    my /= wh.size();
    double vx = 0, vy = 0;
    for (const WH& l : wh) vx += (l.first - mx) * (l.first - mx), vy += (l.second - my) * (l.second - my);
    const double sx = std::sqrt(vx / wh.size()), sy = std::sqrt(vy / wh.size());
    if (sx > 0 && sy > 0) {
      std::vector<WH> white;
      for (const WH& l : wh) white.emplace_back(static_cast<float>(l.first / sx), static_cast<float>(l.second / sy));
      for (const WH& c : kmeans(white, n, 30, gen))
        k.emplace_back(static_cast<float>(c.first * sx), static_cast<float>(c.second * sy));
    }
  }
  if (static_cast<int>(k.size()) != n) {
    say("WARNING: switching strategies from kmeans to random init");
    std::vector<float> v(2 * n);
    for (float& x : v) x = static_cast<float>(gen.uniform() * img_size);
    std::sort(v.begin(), v.end());
    k.clear();
    for (int i = 0; i < n; ++i) k.emplace_back(v[2 * i], v[2 * i + 1]);
  }
  k = sort_by_area(k);

  double f = fitness(wh, k, thr);
  for (int g = 0; g < generations; ++g) {
    std::vector<double> v(2 * n, 1.0);
    bool changed = false;
    while (!changed) {  // mutate until something changes
      const double amount = gen.uniform();
      for (double& x : v) {
        const bool mutate = gen.uniform() < 0.9;
        x = mutate ? std::clamp(amount * normal(gen) * 0.1 + 1.0, 0.3, 3.0) : 1.0;
        changed = changed || x != 1.0;
      }
    }
    std::vector<WH> kg(n);
    for (int i = 0; i < n; ++i)
      kg[i] = {std::max(2.0f, static_cast<float>(k[i].first * v[2 * i])),
               std::max(2.0f, static_cast<float>(k[i].second * v[2 * i + 1]))};
    const double fg = fitness(wh, kg, thr);
    if (fg > f) {
      f = fg;
      k = kg;
    }
  }
  k = sort_by_area(k);
  if (log) *log += results_lines(wh0, k, thr, img_size);
  return k;
}

std::string check_anchors(const std::vector<data::ImageRecord>& records, layers::Detect& detect,
                          double thr, int img_size, Generator& gen) {
  std::vector<float> units = detect.anchors.to(Device::cpu()).to_vector<float>();
  const int64_t nl = detect.nl, na = detect.na;
  std::vector<WH> anchors;
  for (int64_t l = 0; l < nl; ++l)
    for (int64_t a = 0; a < na; ++a) {
      const float s = static_cast<float>(detect.strides[l]);
      anchors.emplace_back(units[(l * na + a) * 2] * s, units[(l * na + a) * 2 + 1] * s);
    }
  const std::vector<WH> wh = label_sizes(records, img_size, &gen);
  const AnchorFit fit = anchor_fit(wh, anchors, thr);
  char head[160];
  std::snprintf(head, sizeof head, "AutoAnchor: %.2f anchors/target, %.3f Best Possible Recall (BPR). ",
                fit.anchors_per_target, fit.bpr);
  if (fit.bpr > 0.98) return std::string(head) + "Current anchors are a good fit to dataset\n";
  std::string log = std::string(head) + "Anchors are a poor fit to dataset, attempting to improve...\n";
  std::vector<WH> evolved = kmean_anchors(records, static_cast<int>(nl * na), img_size, thr, 1000, gen, &log);
  if (anchor_fit(wh, evolved, thr).bpr <= fit.bpr) {
    return log + "AutoAnchor: Done (original anchors better than new anchors, proceeding with original anchors)\n";
  }
  // Evolved anchors are sorted by area: assign them level by level (small to the finest level),
  // then store them in stride units as Detect expects.
  std::vector<float> next(units.size());
  for (int64_t l = 0; l < nl; ++l)
    for (int64_t a = 0; a < na; ++a) {
      const WH& e = evolved[l * na + a];
      const float s = static_cast<float>(detect.strides[l]);
      next[(l * na + a) * 2] = e.first / s;
      next[(l * na + a) * 2 + 1] = e.second / s;
    }
  autograd::NoGradGuard no_grad;
  detect.anchors.copy_(Tensor::from_vector(next, {nl, na, 2}));
  return log + "AutoAnchor: Done (optional: update model *.yaml to use these anchors in the future)\n";
}

}  // namespace kestrel::yolo
