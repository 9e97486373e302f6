#include "yolo/eval/coco_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "yolo/common/text_file.h"
#include "yolo/eval/validator.h"

namespace kestrel::yolo {
namespace {

constexpr int kT = 10, kR = 101, kA = 4, kM = 3;
constexpr std::array<int, kM> kMaxDets = {1, 10, 100};
// np.linspace(.5, 0.95, 10) as pycocotools' Params has it: i * (0.45 / 9) + 0.5, the last 0.95
// (so the ninth is 0.8999999999999999, not 0.9).
constexpr std::array<double, kT> kIouThresholds = {0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.8999999999999999, 0.95};
// areaRng: [0, 1e5²], [0, 32²], [32², 96²], [96², 1e5²], inclusive at both ends.
constexpr double kAreaRanges[kA][2] = {{0, 1e10}, {0, 1024}, {1024, 9216}, {9216, 1e10}};
const char* const kAreaLabels[kA] = {"all", "small", "medium", "large"};
constexpr double kEps = std::numeric_limits<double>::epsilon();  // np.spacing(1)

// np.linspace(0, 1, 101): i * 0.01 (the step 1/100 rounds to 0.01), the last exactly 1.
std::array<double, kR> recall_thresholds() {
  std::array<double, kR> r{};
  const double step = 1.0 / 100;
  for (int i = 0; i < kR; ++i) r[i] = static_cast<double>(i) * step + 0.0;
  r[kR - 1] = 1.0;
  return r;
}

// ---- reading -------------------------------------------------------------------------------

const json::Value& member(const json::Value& obj, const char* key, const std::string& where) {
  const json::Value* v = obj.find(key);
  if (!v) KESTREL_FAIL(where, " has no '", key, "'");
  return *v;
}

int64_t integer_member(const json::Value& obj, const char* key, const std::string& where) {
  const json::Value& v = member(obj, key, where);
  if (!v.is_integer()) KESTREL_FAIL(where, ".", key, " must be an integer, not ", json::kind_name(v.kind()));
  return v.as_integer();
}

double number_member(const json::Value& obj, const char* key, const std::string& where) {
  const json::Value& v = member(obj, key, where);
  if (!v.is_integer() && !v.is_real()) KESTREL_FAIL(where, ".", key, " must be a number, not ", json::kind_name(v.kind()));
  return v.as_real();
}

CocoImageId image_id_member(const json::Value& obj, const char* key, const std::string& where) {
  const json::Value& v = member(obj, key, where);
  if (v.is_integer()) return v.as_integer();
  if (v.is_string()) return v.as_string();
  KESTREL_FAIL(where, ".", key, " must be an integer or a string, not ", json::kind_name(v.kind()));
}

CocoBox bbox_member(const json::Value& obj, const std::string& where) {
  const json::Value& v = member(obj, "bbox", where);
  if (!v.is_array() || v.as_array().size() != 4) KESTREL_FAIL(where, ".bbox must be 4 numbers [x, y, w, h]");
  double b[4];
  for (int i = 0; i < 4; ++i) {
    const json::Value& e = v.as_array()[i];
    if (!e.is_integer() && !e.is_real()) KESTREL_FAIL(where, ".bbox must be 4 numbers [x, y, w, h]");
    b[i] = e.as_real();
  }
  return {b[0], b[1], b[2], b[3]};
}

const json::Array& array_member(const json::Value& doc, const char* key, const std::string& source) {
  const json::Value& v = member(doc, key, source);
  if (!v.is_array()) KESTREL_FAIL(source, ": '", key, "' must be an array");
  return v.as_array();
}

// Python's ordering of image ids, refusing a mix of numbers and strings as sorted() would.
bool id_less(const CocoImageId& a, const CocoImageId& b) {
  if (a.index() != b.index())
    KESTREL_FAIL("image ids mix numbers and strings (", to_string(a), ", ", to_string(b), "): COCO evaluation cannot sort them");
  return a < b;
}

// ---- evaluation ----------------------------------------------------------------------------

struct IdHash {
  size_t operator()(const CocoImageId& id) const { return std::hash<CocoImageId>()(id); }
};


// One detection of a category after its image's evaluation: its score, its place among its
// image's detections (for maxDets), and per area range the IoU thresholds (bits) at which it is
// a true positive or a false positive (neither: ignored).
struct DetectionOutcome {
  double score;
  int32_t rank;
  std::array<uint16_t, kA> tp, fp;
};

// What evaluateImg leaves for accumulate, per category: the images it had anything on (len(E)),
// their detections in image order, and the ground truths that count per area range (npig).
struct CategoryOutcomes {
  int64_t images = 0;
  std::array<int64_t, kA> counted{};
  std::vector<DetectionOutcome> detections;
};

// bbIou of pycocotools' maskApi: a crowd ground truth's union is the detection's area.
double box_iou(const CocoBox& d, const CocoBox& g, bool crowd) {
  const double da = d.w * d.h, ga = g.w * g.h;
  const double w = std::fmin(d.w + d.x, g.w + g.x) - std::fmax(d.x, g.x);
  if (w <= 0) return 0;
  const double h = std::fmin(d.h + d.y, g.h + g.y) - std::fmax(d.y, g.y);
  if (h <= 0) return 0;
  const double i = w * h;
  const double u = crowd ? da : da + ga - i;
  return i / u;
}

// Indices sorted by descending score, ties in their given order (argsort(-score, 'mergesort')).
template <class Score>
void sort_by_score(std::vector<int32_t>& order, const Score& score) {
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score(a) > score(b); });
}

// What the evaluation of an image needs besides its objects and detections: the iou type, the
// images' sizes (for polygons) and how loadRes read the results (by their first row).
struct EvalContext {
  bool segm = false;
  bool boxes_given = true;  // the first result has a bbox: areas are w*h, masks default to the box
  std::unordered_map<CocoImageId, CocoImageSize, IdHash> sizes;

  CocoImageSize size_of(const CocoImageId& image) const {
    const auto it = sizes.find(image);
    return it == sizes.end() ? CocoImageSize{} : it->second;
  }
  // annToRLE, naming what failed. It reads the image's size for every form (polygons use it).
  rle::Rle mask(const CocoSegmentation& s, const CocoImageId& image, const std::string& what) const {
    try {
      const CocoImageSize size = size_of(image);
      if (size.height < 0 || size.width < 0)
        KESTREL_FAIL("the ground truth's images[] entry for ", to_string(image),
                     " gives no height and width (pycocotools' annToRLE reads them for every mask)");
      return coco_segmentation_rle(s, size.height, size.width);
    } catch (const Error& e) {
      KESTREL_FAIL(what, "'s segmentation: ", e.what());
    }
  }
  rle::Rle detection_mask(const CocoDetection& d, size_t index) const {
    if (d.segmentation.present()) return mask(d.segmentation, d.image_id, str("result ", index));
    // loadRes: a result with a box and no segmentation is the box's polygon.
    const CocoImageSize size = size_of(d.image_id);
    if (size.height < 0 || size.width < 0)
      KESTREL_FAIL("result ", index, " has no segmentation; its box as a polygon needs the image's height and width, "
                   "which the ground truth's images[] entry for ", to_string(d.image_id), " does not give");
    return rle::merge({rle::from_box({d.bbox.x, d.bbox.y, d.bbox.w, d.bbox.h}, size.height, size.width)});
  }
};

// One detection as loadRes leaves it: its box and area (and, for segm, its mask).
struct LoadedDetection {
  CocoBox box;
  double area = 0;
  rle::Rle mask;
  rle::Bbox mask_box;
};

// computeIoU + evaluateImg for one image and category, for the four area ranges at maxDets 100.
class ImageEvaluator {
 public:
  ImageEvaluator(const EvalContext& context, const CocoObject* first_gt, const CocoDetection* first_dt)
      : ctx_(context), first_gt_(first_gt), first_dt_(first_dt) {}

  void run(const std::vector<const CocoObject*>& gts, const std::vector<const CocoDetection*>& dts,
           CategoryOutcomes& out) {
    const auto G = static_cast<int32_t>(gts.size());
    order_.resize(dts.size());
    std::iota(order_.begin(), order_.end(), 0);
    sort_by_score(order_, [&](int32_t i) { return dts[i]->score; });
    if (order_.size() > static_cast<size_t>(kMaxDets.back())) order_.resize(kMaxDets.back());
    const auto D = static_cast<int32_t>(order_.size());
    load(gts, dts);
    ious_.assign(static_cast<size_t>(D) * G, 0.0);
    for (int32_t d = 0; d < D; ++d)
      for (int32_t g = 0; g < G; ++g)
        ious_[d * G + g] = ctx_.segm ? rle::iou(loaded_[d].mask, gt_masks_[g], gts[g]->iscrowd, loaded_[d].mask_box,
                                                gt_mask_boxes_[g])
                                     : box_iou(loaded_[d].box, gts[g]->bbox, gts[g]->iscrowd);
    const size_t first = out.detections.size();
    for (int32_t d = 0; d < D; ++d) out.detections.push_back({dts[order_[d]]->score, d, {}, {}});
    ++out.images;
    for (int a = 0; a < kA; ++a) evaluate_area(gts, a, out, first);
  }

 private:
  // The kept detections' boxes, areas and masks, and the ground truths' masks (segm).
  void load(const std::vector<const CocoObject*>& gts, const std::vector<const CocoDetection*>& dts) {
    loaded_.resize(order_.size());
    for (size_t d = 0; d < order_.size(); ++d) {
      const CocoDetection& det = *dts[order_[d]];
      const auto index = static_cast<size_t>(&det - first_dt_);
      LoadedDetection& l = loaded_[d];
      const bool need_mask = ctx_.segm || !ctx_.boxes_given;
      if (need_mask) {
        l.mask = ctx_.boxes_given ? ctx_.detection_mask(det, index)
                                  : ctx_.mask(det.segmentation, det.image_id, str("result ", index));
        l.mask_box = rle::bbox(l.mask);
      }
      if (ctx_.boxes_given) {
        l.box = det.bbox;
        l.area = det.bbox.w * det.bbox.h;
      } else {  // loadRes without boxes: the mask's area, and its box where the row has none
        l.box = det.has_bbox ? det.bbox : CocoBox{l.mask_box.x, l.mask_box.y, l.mask_box.w, l.mask_box.h};
        l.area = static_cast<double>(rle::area(l.mask));
      }
    }
    if (!ctx_.segm) return;
    gt_masks_.resize(gts.size());
    gt_mask_boxes_.resize(gts.size());
    for (size_t g = 0; g < gts.size(); ++g) {
      gt_masks_[g] = ctx_.mask(gts[g]->segmentation, gts[g]->image_id,
                               str("annotation ", static_cast<size_t>(gts[g] - first_gt_), " (id ", gts[g]->id, ")"));
      gt_mask_boxes_[g] = rle::bbox(gt_masks_[g]);
    }
  }

  void evaluate_area(const std::vector<const CocoObject*>& gts, int a, CategoryOutcomes& out, size_t first) {
    const double lo = kAreaRanges[a][0], hi = kAreaRanges[a][1];
    const auto G = static_cast<int32_t>(gts.size()), D = static_cast<int32_t>(order_.size());
    // Ground truths with those that are ignored (crowd, or outside the range) last, stably.
    gt_order_.clear();
    for (int pass = 0; pass < 2; ++pass)
      for (int32_t g = 0; g < G; ++g) {
        const bool ignored = gts[g]->iscrowd || gts[g]->area < lo || gts[g]->area > hi;
        if (ignored == (pass == 1)) gt_order_.push_back(g);
      }
    int32_t counted = 0;
    ignored_.resize(G);
    for (int32_t j = 0; j < G; ++j) {
      const CocoObject& g = *gts[gt_order_[j]];
      ignored_[j] = g.iscrowd || g.area < lo || g.area > hi;
      counted += !ignored_[j];
    }
    out.counted[a] += counted;
    for (int32_t d = 0; d < D; ++d) {
      DetectionOutcome& o = out.detections[first + d];
      o.tp[a] = o.fp[a] = 0;
    }
    std::vector<uint8_t>& gt_matched = gt_matched_;
    for (int t = 0; t < kT; ++t) {
      gt_matched.assign(G, 0);
      for (int32_t d = 0; d < D; ++d) {
        double best = std::min(kIouThresholds[t], 1 - 1e-10);
        int32_t m = -1;
        if (G > 0) {
          for (int32_t j = 0; j < G; ++j) {
            const CocoObject& g = *gts[gt_order_[j]];
            if (gt_matched[j] && !g.iscrowd) continue;
            if (m > -1 && !ignored_[m] && ignored_[j]) break;
            const double iou = ious_[d * G + gt_order_[j]];
            if (iou < best) continue;
            best = iou;
            m = j;
          }
        }
        // dtMatches holds the matched ground truth's id, read as "matched" when non-zero.
        bool matched = false, ignored = false;
        if (m != -1) {
          gt_matched[m] = 1;
          ignored = ignored_[m];
          matched = gts[gt_order_[m]]->id != 0;
        }
        if (!matched) {
          const double area = loaded_[d].area;
          if (area < lo || area > hi) ignored = true;
        }
        if (ignored) continue;
        DetectionOutcome& o = out.detections[first + d];
        (matched ? o.tp[a] : o.fp[a]) |= static_cast<uint16_t>(1u << t);
      }
    }
  }

  const EvalContext& ctx_;
  const CocoObject* first_gt_;
  const CocoDetection* first_dt_;
  std::vector<int32_t> order_, gt_order_;
  std::vector<double> ious_;
  std::vector<uint8_t> ignored_, gt_matched_;
  std::vector<LoadedDetection> loaded_;
  std::vector<rle::Rle> gt_masks_;
  std::vector<rle::Bbox> gt_mask_boxes_;
};

size_t precision_index(int t, int r, size_t k, int a, int m, size_t K) {
  return (((static_cast<size_t>(t) * kR + r) * K + k) * kA + a) * kM + m;
}
size_t recall_index(int t, size_t k, int a, int m, size_t K) {
  return ((static_cast<size_t>(t) * K + k) * kA + a) * kM + m;
}

// accumulate() for one category: precision at the recall points and the final recall, per IoU
// threshold, area range and maxDets.
void accumulate_category(const CategoryOutcomes& c, size_t k, size_t K, const std::array<double, kR>& rec_thrs,
                         CocoEvalResult& r) {
  if (c.images == 0) return;
  std::vector<int32_t> order(c.detections.size());
  std::iota(order.begin(), order.end(), 0);
  sort_by_score(order, [&](int32_t i) { return c.detections[i].score; });
  std::vector<const DetectionOutcome*> kept;
  std::vector<double> rc, pr;
  for (int a = 0; a < kA; ++a) {
    const int64_t npig = c.counted[a];
    if (npig == 0) continue;
    for (int m = 0; m < kM; ++m) {
      kept.clear();
      for (int32_t i : order)
        if (c.detections[i].rank < kMaxDets[m]) kept.push_back(&c.detections[i]);
      const size_t nd = kept.size();
      rc.resize(nd);
      pr.resize(nd);
      for (int t = 0; t < kT; ++t) {
        double tp = 0, fp = 0;
        for (size_t i = 0; i < nd; ++i) {
          tp += (kept[i]->tp[a] >> t) & 1;
          fp += (kept[i]->fp[a] >> t) & 1;
          rc[i] = tp / static_cast<double>(npig);
          pr[i] = tp / (fp + tp + kEps);
        }
        r.recall[recall_index(t, k, a, m, K)] = nd ? rc[nd - 1] : 0.0;
        for (size_t i = nd; i-- > 1;)
          if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
        auto from = rc.begin();
        for (int ri = 0; ri < kR; ++ri) {
          from = std::lower_bound(from, rc.end(), rec_thrs[ri]);
          const auto pi = static_cast<size_t>(from - rc.begin());
          r.precision[precision_index(t, ri, k, a, m, K)] = pi < nd ? pr[pi] : 0.0;
        }
      }
    }
  }
}

// numpy's pairwise summation (add.reduce over a contiguous float64 array), so the means match
// np.mean to the bit.
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double s = 0.;
    for (size_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) s += a[i];
    return s;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double mean_counted(const std::vector<double>& values) {
  std::vector<double> kept;
  for (double v : values)
    if (v > -1) kept.push_back(v);
  if (kept.empty()) return -1;
  return (0.0 + pairwise_sum(kept.data(), kept.size())) / static_cast<double>(kept.size());
}

// _summarize: the mean of precision (ap) or recall over one area range and maxDets, at one IoU
// threshold or all of them.
double summarize(const CocoEvalResult& r, bool ap, std::optional<double> iou, int a, int max_dets) {
  const size_t K = r.category_ids.size();
  const int m = static_cast<int>(std::find(kMaxDets.begin(), kMaxDets.end(), max_dets) - kMaxDets.begin());
  std::vector<double> values;
  for (int t = 0; t < kT; ++t) {
    if (iou && kIouThresholds[t] != *iou) continue;
    if (ap) {
      for (int ri = 0; ri < kR; ++ri)
        for (size_t k = 0; k < K; ++k) values.push_back(r.precision[precision_index(t, ri, k, a, m, K)]);
    } else {
      for (size_t k = 0; k < K; ++k) values.push_back(r.recall[recall_index(t, k, a, m, K)]);
    }
  }
  return mean_counted(values);
}

}  // namespace

const char* coco_iou_type_name(CocoIouType type) { return type == CocoIouType::segm ? "segm" : "bbox"; }

CocoSegmentation parse_coco_segmentation(const json::Value& value, const std::string& where) {
  CocoSegmentation s;
  try {
    if (value.is_object()) {
      s.rles.push_back(rle::from_json(value, where));
    } else if (value.is_array() && !value.as_array().empty() && value.as_array()[0].is_object()) {
      s.rle_list = true;
      for (size_t i = 0; i < value.as_array().size(); ++i)
        s.rles.push_back(rle::from_json(value.as_array()[i], str(where, "[", i, "]")));
    } else if (value.is_array() && !value.as_array().empty()) {
      for (size_t i = 0; i < value.as_array().size(); ++i) {
        const json::Value& poly = value.as_array()[i];
        if (!poly.is_array()) KESTREL_FAIL(where, "[", i, "] is not a polygon (an array of numbers)");
        std::vector<double>& xy = s.polygons.emplace_back();
        for (const json::Value& v : poly.as_array()) {
          if (!v.is_integer() && !v.is_real()) KESTREL_FAIL(where, "[", i, "] holds a ", json::kind_name(v.kind()), ", not a number");
          xy.push_back(v.as_real());
        }
      }
    } else {
      KESTREL_FAIL(where, " is neither polygons, an RLE object nor a list of them");
    }
  } catch (const Error& e) {
    s = {};
    s.error = e.what();
  }
  return s;
}

rle::Rle coco_segmentation_rle(const CocoSegmentation& s, int64_t height, int64_t width) {
  if (!s.error.empty()) throw Error(s.error);
  if (!s.polygons.empty()) {
    // frPyObjects takes a list whose first entry has 4 numbers for boxes (and then fails on the
    // list), and refuses fewer; from 5 on, every entry is a polygon of its pairs.
    KESTREL_CHECK(s.polygons[0].size() > 4, "its first polygon has ", s.polygons[0].size(),
                  " numbers; pycocotools cannot read a polygon list whose first entry has fewer than 5");
    std::vector<rle::Rle> parts;
    for (const std::vector<double>& p : s.polygons) parts.push_back(rle::from_polygon(p.data(), p.size() / 2, height, width));
    return rle::merge(parts);
  }
  KESTREL_CHECK(!s.rles.empty(), "there is none");
  return s.rle_list ? rle::merge(s.rles) : s.rles[0];
}

std::string to_string(const CocoImageId& id) {
  if (const auto* n = std::get_if<int64_t>(&id)) return std::to_string(*n);
  return "'" + std::get<std::string>(id) + "'";
}

CocoGroundTruth parse_coco_ground_truth(const json::Value& doc, const std::string& source) {
  if (!doc.is_object()) KESTREL_FAIL(source, ": a COCO ground truth is an object with images, annotations and categories");
  CocoGroundTruth gt;
  const json::Array& images = array_member(doc, "images", source);
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string where = str(source, ": images[", i, "]");
    gt.images.push_back(image_id_member(images[i], "id", where));
    CocoImageSize size;
    const json::Value* h = images[i].find("height");
    const json::Value* w = images[i].find("width");
    if (h && w && h->is_integer() && w->is_integer()) size = {h->as_integer(), w->as_integer()};
    gt.image_sizes.push_back(size);
  }
  const json::Array& categories = array_member(doc, "categories", source);
  for (size_t i = 0; i < categories.size(); ++i)
    gt.categories.push_back(integer_member(categories[i], "id", str(source, ": categories[", i, "]")));
  if (doc.find("annotations")) {
    const json::Array& anns = array_member(doc, "annotations", source);
    std::unordered_set<int64_t> ids;
    gt.annotations.reserve(anns.size());
    for (size_t i = 0; i < anns.size(); ++i) {
      const std::string where = str(source, ": annotations[", i, "]");
      CocoObject o;
      o.id = integer_member(anns[i], "id", where);
      if (!ids.insert(o.id).second) KESTREL_FAIL(where, ".id ", o.id, " repeats an earlier annotation's id");
      o.image_id = image_id_member(anns[i], "image_id", where);
      o.category_id = integer_member(anns[i], "category_id", where);
      o.bbox = bbox_member(anns[i], where);
      o.area = number_member(anns[i], "area", where);
      const json::Value& crowd = member(anns[i], "iscrowd", where);
      if (crowd.is_bool()) o.iscrowd = crowd.as_bool();
      else if (crowd.is_integer()) o.iscrowd = crowd.as_integer() != 0;
      else KESTREL_FAIL(where, ".iscrowd must be 0 or 1");
      if (const json::Value* seg = anns[i].find("segmentation"))
        o.segmentation = parse_coco_segmentation(*seg, where + ".segmentation");
      gt.annotations.push_back(std::move(o));
    }
  }
  return gt;
}

CocoGroundTruth read_coco_ground_truth(const std::string& path) {
  const std::string text = read_text(path);
  json::Value doc;
  try {
    doc = json::parse(text);
  } catch (const Error& e) {
    KESTREL_FAIL(path, ": not valid JSON: ", e.what());
  }
  return parse_coco_ground_truth(doc, path);
}

std::vector<CocoDetection> parse_coco_detections(const json::Value& doc, const std::string& source) {
  if (!doc.is_array()) KESTREL_FAIL(source, ": COCO results are an array of {image_id, category_id, bbox, score}");
  std::vector<CocoDetection> out;
  out.reserve(doc.as_array().size());
  for (size_t i = 0; i < doc.as_array().size(); ++i) {
    const json::Value& row = doc.as_array()[i];
    const std::string where = str(source, ": [", i, "]");
    if (!row.is_object()) KESTREL_FAIL(where, " is not an object {image_id, category_id, bbox, score}");
    CocoDetection d;
    d.image_id = image_id_member(row, "image_id", where);
    d.category_id = integer_member(row, "category_id", where);
    const json::Value* box = row.find("bbox");
    d.has_bbox = box && !(box->is_array() && box->as_array().empty());  // loadRes: [] is no box
    if (d.has_bbox) d.bbox = bbox_member(row, where);
    if (const json::Value* seg = row.find("segmentation")) d.segmentation = parse_coco_segmentation(*seg, where + ".segmentation");
    if (!d.has_bbox && !d.segmentation.present()) KESTREL_FAIL(where, " has neither a bbox nor a segmentation");
    d.score = number_member(row, "score", where);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<CocoDetection> read_coco_detections(const std::string& path) {
  const std::string text = read_text(path);
  json::Value doc;
  try {
    doc = json::parse(text);
  } catch (const Error& e) {
    KESTREL_FAIL(path, ": not valid JSON: ", e.what());
  }
  return parse_coco_detections(doc, path);
}

CocoEvalResult evaluate_coco(const CocoGroundTruth& gt, const std::vector<CocoDetection>& detections,
                             const CocoEvalOptions& options) {
  // loadRes: every result on an image of the ground truth.
  std::unordered_set<CocoImageId, IdHash> known(gt.images.begin(), gt.images.end());
  for (size_t i = 0; i < detections.size(); ++i)
    if (!known.count(detections[i].image_id))
      KESTREL_FAIL("result ", i, " is on image ", to_string(detections[i].image_id),
                   ", which the ground truth's images do not list (pycocotools: results do not correspond to the "
                   "current coco set)");

  // params.imgIds and catIds, as np.unique leaves them.
  std::vector<CocoImageId> images = options.image_ids ? *options.image_ids : gt.images;
  std::sort(images.begin(), images.end(), id_less);
  images.erase(std::unique(images.begin(), images.end()), images.end());
  std::vector<int64_t> cats = gt.categories;
  std::sort(cats.begin(), cats.end());
  cats.erase(std::unique(cats.begin(), cats.end()), cats.end());
  const size_t I = images.size(), K = cats.size();
  std::unordered_map<CocoImageId, int32_t, IdHash> image_index;
  for (size_t i = 0; i < I; ++i) image_index.emplace(images[i], static_cast<int32_t>(i));
  std::unordered_map<int64_t, int32_t> cat_index;
  for (size_t k = 0; k < K; ++k) cat_index.emplace(cats[k], static_cast<int32_t>(k));

  // Per image, its annotations and detections (file order), each with its category's index.
  struct Entry {
    int32_t image, cat, index;
  };
  auto group = [&](const auto& items) {
    std::vector<Entry> entries;
    for (size_t n = 0; n < items.size(); ++n) {
      const auto img = image_index.find(items[n].image_id);
      const auto cat = cat_index.find(items[n].category_id);
      if (img == image_index.end() || cat == cat_index.end()) continue;
      entries.push_back({img->second, cat->second, static_cast<int32_t>(n)});
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.image != b.image ? a.image < b.image : a.cat < b.cat; });
    return entries;
  };
  const std::vector<Entry> gt_entries = group(gt.annotations);
  const std::vector<Entry> dt_entries = group(detections);

  // loadRes decides by the first result: with a bbox, every row needs one; without, a mask.
  EvalContext context;
  context.segm = options.iou_type == CocoIouType::segm;
  context.boxes_given = detections.empty() || detections[0].has_bbox;
  for (size_t i = 0; i < detections.size(); ++i) {
    if (context.boxes_given && !detections[i].has_bbox)
      KESTREL_FAIL("result ", i, " has no bbox, but the first result has one (pycocotools' loadRes then reads every "
                   "row's bbox)");
    if (!context.boxes_given && !detections[i].segmentation.present())
      KESTREL_FAIL("result ", i, " has neither a bbox nor a segmentation");
  }
  for (size_t i = 0; i < gt.images.size() && i < gt.image_sizes.size(); ++i)
    context.sizes[gt.images[i]] = gt.image_sizes[i];  // a repeated id: the last entry, as COCO.imgs

  std::vector<CategoryOutcomes> outcomes(K);
  ImageEvaluator evaluator(context, gt.annotations.data(), detections.data());
  std::vector<const CocoObject*> gts;
  std::vector<const CocoDetection*> dts;
  size_t gi = 0, di = 0;
  auto key = [](const Entry& e) { return std::pair(e.image, e.cat); };
  while (gi < gt_entries.size() || di < dt_entries.size()) {
    std::pair<int32_t, int32_t> next;
    if (gi == gt_entries.size()) next = key(dt_entries[di]);
    else if (di == dt_entries.size()) next = key(gt_entries[gi]);
    else next = std::min(key(gt_entries[gi]), key(dt_entries[di]));
    gts.clear();
    dts.clear();
    for (; gi < gt_entries.size() && key(gt_entries[gi]) == next; ++gi) gts.push_back(&gt.annotations[gt_entries[gi].index]);
    for (; di < dt_entries.size() && key(dt_entries[di]) == next; ++di) dts.push_back(&detections[dt_entries[di].index]);
    evaluator.run(gts, dts, outcomes[next.second]);
  }

  CocoEvalResult r;
  r.category_ids = cats;
  r.precision.assign(static_cast<size_t>(kT) * kR * K * kA * kM, -1.0);
  r.recall.assign(static_cast<size_t>(kT) * K * kA * kM, -1.0);
  const std::array<double, kR> rec_thrs = recall_thresholds();
  for (size_t k = 0; k < K; ++k) accumulate_category(outcomes[k], k, K, rec_thrs, r);

  r.stats[0] = summarize(r, true, std::nullopt, 0, 100);
  r.stats[1] = summarize(r, true, 0.5, 0, 100);
  r.stats[2] = summarize(r, true, 0.75, 0, 100);
  for (int a = 1; a < kA; ++a) r.stats[2 + a] = summarize(r, true, std::nullopt, a, 100);
  for (int m = 0; m < kM; ++m) r.stats[6 + m] = summarize(r, false, std::nullopt, 0, kMaxDets[m]);
  for (int a = 1; a < kA; ++a) r.stats[8 + a] = summarize(r, false, std::nullopt, a, 100);
  return r;
}

CocoEvalResult evaluate_coco_files(const std::string& gt_path, const std::string& results_path,
                                   const CocoEvalOptions& options) {
  const CocoGroundTruth gt = read_coco_ground_truth(gt_path);
  const std::vector<CocoDetection> detections = read_coco_detections(results_path);
  try {
    return evaluate_coco(gt, detections, options);
  } catch (const Error& e) {
    KESTREL_FAIL(results_path, " against ", gt_path, ": ", e.what());
  }
}

std::string coco_summary(const CocoStats& stats) {
  struct Line {
    bool ap;
    const char* iou;
    int area, max_dets;
  };
  static const Line lines[12] = {{true, "0.50:0.95", 0, 100}, {true, "0.50", 0, 100},      {true, "0.75", 0, 100},
                                 {true, "0.50:0.95", 1, 100}, {true, "0.50:0.95", 2, 100}, {true, "0.50:0.95", 3, 100},
                                 {false, "0.50:0.95", 0, 1},  {false, "0.50:0.95", 0, 10}, {false, "0.50:0.95", 0, 100},
                                 {false, "0.50:0.95", 1, 100}, {false, "0.50:0.95", 2, 100}, {false, "0.50:0.95", 3, 100}};
  std::string out;
  for (int i = 0; i < 12; ++i) {
    const Line& l = lines[i];
    char text[160];
    std::snprintf(text, sizeof text, " %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f\n",
                  l.ap ? "Average Precision" : "Average Recall", l.ap ? "(AP)" : "(AR)", l.iou, kAreaLabels[l.area],
                  l.max_dets, stats[i]);
    out += text;
  }
  return out;
}

CocoImageId coco_image_id(const std::string& image_path) {
  const std::string s = std::filesystem::path(image_path).stem().string();
  const bool numeric = !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
  if (numeric) return static_cast<int64_t>(std::stoll(s));
  return s;
}

int64_t coco_category_id(int cls, bool coco_ids) {
  return coco_ids && cls >= 0 && cls < 80 ? coco80_to_91()[cls] : cls;
}

json::Value coco_labels_json(const std::vector<data::ImageRecord>& records, const std::vector<std::string>& names,
                             bool coco_ids, bool single_cls) {
  json::Array images, annotations, categories;
  std::unordered_set<CocoImageId, IdHash> seen;
  int64_t next_id = 1;
  for (const data::ImageRecord& rec : records) {
    const CocoImageId id = coco_image_id(rec.image_path);
    const json::Value id_value = std::holds_alternative<int64_t>(id) ? json::Value(std::get<int64_t>(id))
                                                                     : json::Value(std::get<std::string>(id));
    if (seen.insert(id).second)
      images.emplace_back(json::Object{{"id", id_value},
                                       {"file_name", std::filesystem::path(rec.image_path).filename().string()},
                                       {"width", static_cast<int64_t>(rec.width)},
                                       {"height", static_cast<int64_t>(rec.height)}});
    const double W = rec.width, H = rec.height;
    const bool polygons = !rec.segments.empty();
    KESTREL_CHECK(!polygons || rec.segments.size() == rec.boxes.size(), rec.image_path, ": ", rec.segments.size(),
                  " polygons for ", rec.boxes.size(), " labels; a segmentation label has one polygon per box");
    for (size_t k = 0; k < rec.boxes.size(); ++k) {
      const data::LabelBox& b = rec.boxes[k];
      const double w = static_cast<double>(b.w) * W, h = static_cast<double>(b.h) * H;
      const double x = static_cast<double>(b.x) * W - w / 2, y = static_cast<double>(b.y) * H - h / 2;
      json::Object ann{{"id", next_id++},
                       {"image_id", id_value},
                       {"category_id", coco_category_id(single_cls ? 0 : b.cls, coco_ids)},
                       {"bbox", json::Array{x, y, w, h}},
                       {"area", w * h},
                       {"iscrowd", int64_t{0}}};
      if (polygons) {
        // The polygon in pixels; its area as pycocotools rasterises it (what the file's reader sees).
        const std::vector<float>& seg = rec.segments[k];
        CocoSegmentation s;
        std::vector<double>& xy = s.polygons.emplace_back();
        json::Array poly;
        for (size_t i = 0; i + 1 < seg.size(); i += 2) {
          xy.push_back(static_cast<double>(seg[i]) * W);
          xy.push_back(static_cast<double>(seg[i + 1]) * H);
          poly.emplace_back(xy[i]);
          poly.emplace_back(xy[i + 1]);
        }
        const double area = xy.size() >= 4 ? static_cast<double>(rle::area(coco_segmentation_rle(s, rec.height, rec.width))) : 0.0;
        for (auto& [key, value] : ann)
          if (key == "area") value = area;
        ann.emplace_back("segmentation", json::Array{json::Value(std::move(poly))});
      }
      annotations.emplace_back(std::move(ann));
    }
  }
  const int nc = single_cls ? 1 : static_cast<int>(names.size());
  for (int c = 0; c < nc; ++c)
    categories.emplace_back(json::Object{{"id", coco_category_id(c, coco_ids)},
                                         {"name", c < static_cast<int>(names.size()) ? names[c] : std::to_string(c)}});
  return json::Object{{"images", std::move(images)}, {"annotations", std::move(annotations)}, {"categories", std::move(categories)}};
}

}  // namespace kestrel::yolo
