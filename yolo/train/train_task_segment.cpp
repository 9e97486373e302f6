// Instance segmentation's TrainTask (yolo/train/train_task.h), as segment/train.py differs from
// train.py: SegmentationModel, LoadImagesAndLabelsAndMasks' loader (SegLoader, masks at
// --mask-ratio, overlapping or not), utils/segment/loss.py's ComputeLoss over the raw outputs and
// the prototypes, segment/val.py on the EMA with the loader's overlap and mask ratio, its fitness,
// GenericLogger's results.csv (KEYS, '%23s') and the four-loss console columns.
#include "yolo/data/seg_loader.h"
#include "yolo/eval/seg_validator.h"
#include "yolo/model/segmentation_model.h"
#include "yolo/plot/plots.h"
#include "yolo/train/seg_loss.h"
#include "yolo/train/seg_objective.h"
#include "yolo/train/train_task.h"

namespace kestrel::yolo {
namespace {

// A batch's label masks as plot planes: with overlap, image i's k-th target is pixel value k + 1
// of mask i; without, target row r is mask r.
std::vector<PlotMask> label_planes(const data::Batch& b, const Tensor& masks, bool overlap) {
  const Tensor targets = b.targets.to(Device::cpu());
  const float* t = targets.data<float>();
  std::vector<PlotMask> out;
  std::vector<int64_t> per_image(b.size(), 0);
  for (int64_t r = 0; r < targets.size(0); ++r) {
    const auto image = static_cast<int64_t>(t[r * 6]);
    const int cls = static_cast<int>(t[r * 6 + 1]);
    const int64_t plane = overlap ? image : r;
    const float value = overlap ? static_cast<float>(++per_image[image]) : 1.0f;
    out.push_back({image, cls, mask_plane(masks.slice(0, plane, plane + 1), value)});
  }
  return out;
}

class SegmentTask : public TrainTask {
 public:
  SegmentTask(int mask_ratio, bool overlap) : mask_ratio_(mask_ratio), overlap_(overlap) {}

  const std::vector<std::string>& loss_names() const override {
    static const std::vector<std::string> names = {"box_loss", "seg_loss", "obj_loss", "cls_loss"};
    return names;
  }
  const std::vector<std::string>& results_columns() const override {
    static const std::vector<std::string> keys = {
        "train/box_loss",       "train/seg_loss",    "train/obj_loss",     "train/cls_loss",
        "metrics/precision(B)", "metrics/recall(B)", "metrics/mAP_0.5(B)", "metrics/mAP_0.5:0.95(B)",
        "metrics/precision(M)", "metrics/recall(M)", "metrics/mAP_0.5(M)", "metrics/mAP_0.5:0.95(M)",
        "val/box_loss",         "val/seg_loss",      "val/obj_loss",       "val/cls_loss",
        "x/lr0",                "x/lr1",             "x/lr2"};
    return keys;
  }
  int results_width() const override { return 23; }
  bool polygons() const override { return true; }
  std::string graph_obstacle() const override {
    return "segmentation's mask loss lists its matches on the host from the targets, a device read that a "
           "CUDA graph cannot hold";
  }

  std::shared_ptr<layers::Module> make_model(const ModelConfig& config, int nc, uint64_t seed,
                                             const layers::BatchNorm2d::NormFn& norm) override {
    KESTREL_CHECK(is_segmentation_config(config), "kestrel segment train needs a segmentation model: its yaml's ",
                  "head must be Segment (a -seg yaml such as models/yolov5s-seg.yaml, or -seg weights); ",
                  "detection models train with kestrel train");
    model_ = std::make_shared<SegmentationModel>(config, nc, seed, norm);
    return model_;
  }
  std::shared_ptr<layers::Module> make_ema_model(const ModelConfig& config, int nc, uint64_t seed) override {
    ema_ = std::make_shared<SegmentationModel>(config, nc, seed);
    return ema_;
  }
  layers::Detect& head() override { return model_->segment(); }
  std::string describe(int img_size) override { return model_->describe(img_size); }
  std::string ema_summary(int img_size, bool fused) override { return ema_->summary(img_size, fused); }

  data::AugmentPipeline& make_pipeline(const std::vector<data::ImageRecord>& records,
                                       const data::PipelineOptions& options) override {
    pipeline_ = std::make_shared<data::SegAugmentPipeline>(records, options, data::SegMaskOptions{mask_ratio_, overlap_});
    return pipeline_->images();
  }
  int64_t make_loader(const data::LoaderOptions& options, data::EpochOrder order) override {
    KESTREL_CHECK(!options.quad, "--quad has no masks' form in segment/train.py's loader; drop --quad");
    loader_ = std::make_unique<data::SegLoader>(pipeline_, options, std::move(order));
    return loader_->len();
  }
  void start_epoch(int64_t epoch, int64_t first_batch) override { loader_->start_epoch(epoch, first_batch); }
  std::optional<TaskBatch> next() override {
    std::optional<data::SegBatch> b = loader_->next();
    if (!b) return std::nullopt;
    return TaskBatch{data::Batch{b->index, b->images, b->targets, std::move(b->paths), std::move(b->shapes)}, b->masks};
  }
  void plot_batch(const TaskBatch& t, const std::string& path) override {
    // As plot_images_and_masks in segment/train.py: no names, class numbers.
    const data::Batch& b = t.batch;
    plot_batch_with_masks(b.images, b.paths, target_boxes(b.targets, b.images.size(1), b.images.size(2)),
                          label_planes(b, t.masks, overlap_), {}, path);
  }

  void build_loss(const Hyp& scaled) override {
    loss_ = std::make_unique<ComputeSegLoss>(model_->segment(), scaled, overlap_);
    check_ = std::make_unique<ComputeLoss>(model_->segment(), scaled);
    objective_ = std::make_unique<SegmentationObjective>(*model_, *loss_);
  }
  const ComputeLoss& target_check() const override { return *check_; }
  const StepObjective& objective() const override { return *objective_; }

  void build_validator(std::vector<data::ImageRecord> records, const std::vector<std::string>& names, int nc,
                       const ValOptions& options, Device device, int stride, const Console* console) override {
    SegValOptions sopt;
    static_cast<ValOptions&>(sopt) = options;
    sopt.overlap = overlap_;
    sopt.mask_ratio = mask_ratio_;
    validator_ = std::make_unique<SegValidator>(std::move(records), names, nc, sopt, device, stride);
    validator_->set_console(console);
    if (console && !validator_->cache_line().empty()) console->line(console->colour("val: "), validator_->cache_line());
  }
  TaskValidation validate() override {
    const ComputeSegLoss& loss = *loss_;
    const SegValResult v = validator_->run(
        *ema_, [&loss](const std::vector<Tensor>& raw, const Tensor& protos, const Tensor& targets, const Tensor& masks) {
          const SegLossResult l = loss(raw, protos, targets, masks);
          return SegValLossItems{l.box, l.seg, l.obj, l.cls};
        });
    TaskValidation out;
    const std::array<double, 8> m = v.metrics.mean_results();
    out.metrics.assign(m.begin(), m.end());
    for (double l : {v.box_loss, v.seg_loss, v.obj_loss, v.cls_loss}) out.metrics.push_back(l);
    out.fitness = seg_fitness(v.metrics);
    out.maps = v.metrics.maps;
    out.table = v.table;
    out.results = {m[0], m[1], m[2], m[3], v.box_loss, v.obj_loss, v.cls_loss};
    out.results.segment = true;
    out.results.mask_precision = m[4], out.results.mask_recall = m[5];
    out.results.mask_map50 = m[6], out.results.mask_map = m[7];
    out.results.seg_loss = v.seg_loss;
    return out;
  }
  void prepare_final_validation(bool plots, const std::string& coco_annotations) override {
    validator_->set_plots(plots);
    validator_->set_verbose(true);
    if (!coco_annotations.empty()) validator_->set_coco_eval(coco_annotations);
  }

 private:
  int mask_ratio_;
  bool overlap_;
  std::shared_ptr<SegmentationModel> model_, ema_;
  std::shared_ptr<data::SegAugmentPipeline> pipeline_;
  std::unique_ptr<data::SegLoader> loader_;
  std::unique_ptr<ComputeSegLoss> loss_;
  std::unique_ptr<ComputeLoss> check_;
  std::unique_ptr<SegmentationObjective> objective_;
  std::unique_ptr<SegValidator> validator_;
};

}  // namespace

std::unique_ptr<TrainTask> make_segment_task(int mask_ratio, bool overlap) {
  return std::make_unique<SegmentTask>(mask_ratio, overlap);
}

}  // namespace kestrel::yolo
