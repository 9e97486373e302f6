// COCO's official detection and segmentation metric: what pycocotools' COCOeval (iouType 'bbox'
// or 'segm') computes from a ground-truth file and a results file, and the 12 lines its
// summarize() prints. The reference's val.py runs it on its --save-json detections (on COCO,
// against annotations/instances_val2017.json) and reports stats[0] (AP@[.5:.95]) and stats[1]
// (AP50) as the run's mAP50-95 and mAP50; its segment/val.py runs both iou types.
//
// The rules are pycocotools', to the last bit where its arithmetic allows:
// - images: the ground truth's (or the ids asked for), deduplicated and sorted; categories: the
//   ground truth's, sorted. Results on images outside the ground truth are an error (loadRes);
//   results and annotations of other categories are dropped.
// - per image and category: detections by descending score (stable, in file order), at most 100;
//   IoU of boxes (x, y, w, h) with a crowd region's union being the detection's own area;
//   per area range (all, small, medium, large: the annotation's `area`, a detection's w*h), ground
//   truths outside the range or crowd are ignored and tried last; greedy matching per IoU threshold
//   (.50:.05:.95) as evaluateImg does it, a match of an ignored ground truth ignores the detection,
//   an unmatched detection outside the range is ignored.
// - per category, area range and maxDets (1, 10, 100, each image's first detections): every
//   image's detections by descending score (stable), cumulative TP/FP, recall, precision with
//   its envelope, sampled at 101 recall points (searchsorted, side 'left'); -1 where the category
//   has no ground truth that counts.
// - the summary: means of the values above -1 (pairwise sums, as numpy's).
// - segm: the same with the IoU of masks (io/rle.h's iou: a crowd region's union is the
//   detection's mask area) in place of the boxes'. Masks as annToRLE makes them: polygons
//   rasterised on the image's height and width (the `images` entry's) and merged, uncompressed or
//   compressed RLE as they are. Results as loadRes reads them, deciding by the first row: with a
//   bbox, every row's area is its box's w*h (also for segm) and a row without a segmentation is its
//   box as a polygon; without one, every row's area is its mask's and its bbox the mask's.
// One rule follows pycocotools where it surprises: a ground truth whose `id` is 0 reads as
// "unmatched" once matched (pycocotools stores the matched id and tests it for non-zero), so keep
// ids from 1, as COCO's files and coco_labels_json do.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "io/json.h"
#include "io/rle.h"
#include "yolo/data/records.h"

namespace kestrel::yolo {

// An image id as COCO files carry it: a number, or a string (the reference's save_one_json uses
// a non-numeric file stem as it is). Sorted as Python sorts them; a mix of both is refused.
using CocoImageId = std::variant<int64_t, std::string>;
std::string to_string(const CocoImageId& id);

struct CocoBox {
  double x = 0, y = 0, w = 0, h = 0;  // top-left corner and size, in pixels
};

// A "segmentation" as COCO files carry it, kept in its form until a segm evaluation needs the
// mask (a bbox evaluation never reads it, so one that cannot be read only fails segm):
// - a list of polygons [[x0, y0, x1, y1, ...], ...] in pixels (pycocotools cannot read one whose
//   first entry has fewer than 5 numbers: it takes 4 for boxes, and fails either way),
// - an RLE object {"size": [h, w], "counts": string or integers}, or a list of them (merged).
struct CocoSegmentation {
  std::vector<std::vector<double>> polygons;
  std::vector<rle::Rle> rles;
  bool rle_list = false;  // rles came as a list
  std::string error;      // why it could not be read ("" when it could, or is absent)
  bool present() const { return !polygons.empty() || !rles.empty() || !error.empty(); }
};
// From a "segmentation" value; never throws (a bad one keeps its error, naming `where`).
CocoSegmentation parse_coco_segmentation(const json::Value& value, const std::string& where);
// annToRLE: the mask of a segmentation on an image of height x width (used by polygons only).
// Throws its error, or for a polygon list pycocotools refuses.
rle::Rle coco_segmentation_rle(const CocoSegmentation& s, int64_t height, int64_t width);

// A ground-truth annotation.
struct CocoObject {
  int64_t id = 0;
  CocoImageId image_id;
  int64_t category_id = 0;
  CocoBox bbox;
  double area = 0;  // the file's `area` (for a polygon, the polygon's), which decides the area range
  bool iscrowd = false;
  CocoSegmentation segmentation{};
};

// An image's size as its `images` entry gives it (-1 where it does not).
struct CocoImageSize {
  int64_t height = -1, width = -1;
};

struct CocoGroundTruth {
  std::vector<CocoImageId> images;  // `images[].id`, in file order
  std::vector<int64_t> categories;  // `categories[].id`, in file order
  std::vector<CocoObject> annotations;
  // `images[].height` and `width`, in the order of `images` (may be shorter: unknown sizes).
  std::vector<CocoImageSize> image_sizes{};
};

// A result row: {image_id, category_id, bbox, score} and, for segmentation, its "segmentation".
struct CocoDetection {
  CocoImageId image_id;
  int64_t category_id = 0;
  CocoBox bbox;
  double score = 0;
  CocoSegmentation segmentation{};
  bool has_bbox = true;  // false: the row had no bbox (loadRes then takes the mask's)
};

// Reads a COCO ground-truth document (`images`, `categories` and optional `annotations`, whose
// members need id, image_id, category_id, bbox, area and iscrowd). Errors name `source` and the
// member. Duplicate annotation ids are refused (pycocotools would silently evaluate one twice).
CocoGroundTruth parse_coco_ground_truth(const json::Value& doc, const std::string& source);
CocoGroundTruth read_coco_ground_truth(const std::string& path);
// Reads a results document: an array of {image_id, category_id, bbox, score} (a row may carry a
// "segmentation" besides or instead of its bbox). Errors name `source` and the row.
std::vector<CocoDetection> parse_coco_detections(const json::Value& doc, const std::string& source);
std::vector<CocoDetection> read_coco_detections(const std::string& path);

enum class CocoIouType { bbox, segm };
const char* coco_iou_type_name(CocoIouType type);  // "bbox", "segm"

struct CocoEvalOptions {
  // pycocotools' params.imgIds: the images to evaluate; unset, every image of the ground truth.
  std::optional<std::vector<CocoImageId>> image_ids;
  CocoIouType iou_type = CocoIouType::bbox;  // COCOeval(gt, dt, iouType)
};

// The 12 numbers of summarize(), in its order: AP @[.5:.95], AP50, AP75, AP small/medium/large,
// AR maxDets 1/10/100, AR small/medium/large (all at maxDets 100 unless named). -1 where nothing
// counts.
using CocoStats = std::array<double, 12>;

struct CocoEvalResult {
  CocoStats stats{};
  std::vector<int64_t> category_ids;  // K, sorted
  // As pycocotools' eval['precision'] [T=10][R=101][K][A=4][M=3] and eval['recall'] [T][K][A][M],
  // row-major; -1 where the category has no ground truth that counts.
  std::vector<double> precision, recall;
};

// evaluate() + accumulate() + the stats of summarize(). Throws (naming the image) when a
// detection's image is not among the ground truth's images, as loadRes refuses it. No detections
// at all evaluates to zeros (pycocotools' loadRes refuses an empty list).
CocoEvalResult evaluate_coco(const CocoGroundTruth& gt, const std::vector<CocoDetection>& detections,
                             const CocoEvalOptions& options = {});
// The same for two files; errors name them.
CocoEvalResult evaluate_coco_files(const std::string& gt_path, const std::string& results_path,
                                   const CocoEvalOptions& options = {});

// summarize()'s 12 lines, each ending in a newline:
// " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.xxx".
std::string coco_summary(const CocoStats& stats);

// The COCO image id of an image file, as the reference's save_one_json derives it: the file stem
// as an integer when it is all digits, else the stem itself (Kestrel's predictions.json agrees).
CocoImageId coco_image_id(const std::string& image_path);
// The category id of class `cls` in the json: COCO's 91-id scheme (coco80_to_coco91_class) for
// classes below 80 when `coco_ids`, else the class index (val.py's class_map).
int64_t coco_category_id(int cls, bool coco_ids);

// A COCO ground-truth document made from YOLO labels, as the reference's COCO conversion would
// hold them: one image per record (id by coco_image_id, file_name, width, height; a repeated id
// once), one annotation per label box (ids from 1; bbox x, y, w, h in pixels from the
// normalised centre box and the image size; area w*h; iscrowd 0; category by coco_category_id,
// class 0 for every box with `single_cls`), and the categories of `names` (ids likewise).
// Records with polygon labels (segments, one per box) give each annotation its polygon in pixels
// as its "segmentation", and as its area the polygon's as pycocotools rasterises it (the area of
// its RLE), so the document serves segm evaluation as COCO's own does.
json::Value coco_labels_json(const std::vector<data::ImageRecord>& records, const std::vector<std::string>& names,
                             bool coco_ids, bool single_cls = false);

}  // namespace kestrel::yolo
