// Detection's TrainTask (yolo/train/train_task.h): DetectionModel, the augment pipeline's loader,
// ComputeLoss, the Validator; train.py's results.csv and console columns.
#include "yolo/model/model.h"
#include "yolo/plot/plots.h"
#include "yolo/common/run_dir.h"
#include "yolo/train/train_task.h"

namespace kestrel::yolo {
namespace {

class DetectTask : public TrainTask {
 public:
  const std::vector<std::string>& loss_names() const override {
    static const std::vector<std::string> names = {"box_loss", "obj_loss", "cls_loss"};
    return names;
  }
  const std::vector<std::string>& results_columns() const override { return ResultsCsv::columns(); }
  int results_width() const override { return 20; }
  bool polygons() const override { return false; }
  std::string graph_obstacle() const override { return ""; }

  std::shared_ptr<layers::Module> make_model(const ModelConfig& config, int nc, uint64_t seed,
                                             const layers::BatchNorm2d::NormFn& norm) override {
    model_ = std::make_shared<DetectionModel>(config, nc, seed, norm);
    return model_;
  }
  std::shared_ptr<layers::Module> make_ema_model(const ModelConfig& config, int nc, uint64_t seed) override {
    ema_ = std::make_shared<DetectionModel>(config, nc, seed);
    return ema_;
  }
  layers::Detect& head() override { return model_->detect(); }
  std::string describe(int img_size) override { return model_->describe(img_size); }
  std::string ema_summary(int img_size, bool fused) override { return ema_->summary(img_size, fused); }

  data::AugmentPipeline& make_pipeline(const std::vector<data::ImageRecord>& records,
                                       const data::PipelineOptions& options) override {
    pipeline_ = std::make_shared<data::AugmentPipeline>(records, options);
    return *pipeline_;
  }
  int64_t make_loader(const data::LoaderOptions& options, data::EpochOrder order) override {
    loader_ = std::make_unique<data::Loader>(pipeline_, options, std::move(order));
    return loader_->len();
  }
  void start_epoch(int64_t epoch, int64_t first_batch) override { loader_->start_epoch(epoch, first_batch); }
  std::optional<TaskBatch> next() override {
    std::optional<data::Batch> b = loader_->next();
    if (!b) return std::nullopt;
    return TaskBatch{std::move(*b), Tensor()};
  }
  void plot_batch(const TaskBatch& t, const std::string& path) override {
    // As the reference's train.py, which draws its training mosaics without names: class numbers.
    const data::Batch& b = t.batch;
    yolo::plot_batch(b.images, b.paths, target_boxes(b.targets, b.images.size(1), b.images.size(2)), {}, path);
  }

  void build_loss(const Hyp& scaled) override {
    loss_ = std::make_unique<ComputeLoss>(model_->detect(), scaled);
    objective_ = std::make_unique<DetectionObjective>(*model_, *loss_);
  }
  const ComputeLoss& target_check() const override { return *loss_; }
  const StepObjective& objective() const override { return *objective_; }

  void build_validator(std::vector<data::ImageRecord> records, const std::vector<std::string>& names, int nc,
                       const ValOptions& options, Device device, int stride, const Console* console) override {
    validator_ = std::make_unique<Validator>(std::move(records), names, nc, options, device, stride);
    validator_->set_console(console);
    if (console && !validator_->cache_line().empty()) console->line(console->colour("val: "), validator_->cache_line());
  }
  TaskValidation validate() override {
    // The training loss, as the loss items validation averages (val/box_loss, obj, cls).
    const ComputeLoss& loss = *loss_;
    const ValResult v = validator_->run(*ema_, [&loss](std::vector<Tensor> raw, const Tensor& targets) {
      const LossResult l = loss(loss_inputs(std::move(raw)), targets);  // the CPU's bfloat16 validation
      return ValLossItems{l.box, l.obj, l.cls};
    });
    const ValMetrics& m = v.metrics;
    TaskValidation out;
    out.metrics = {m.mp, m.mr, m.map50, m.map, v.box_loss, v.obj_loss, v.cls_loss};
    out.fitness = fitness(m);
    out.maps = m.maps;
    out.table = v.table;
    out.results = {m.mp, m.mr, m.map50, m.map, v.box_loss, v.obj_loss, v.cls_loss};
    return out;
  }
  void prepare_final_validation(bool plots, const std::string& coco_annotations) override {
    validator_->set_plots(plots);
    validator_->set_verbose(true);
    if (!coco_annotations.empty()) validator_->set_coco_eval(coco_annotations);
  }

 private:
  std::shared_ptr<DetectionModel> model_, ema_;
  std::shared_ptr<data::AugmentPipeline> pipeline_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<ComputeLoss> loss_;
  std::unique_ptr<DetectionObjective> objective_;
  std::unique_ptr<Validator> validator_;
};

}  // namespace

std::unique_ptr<TrainTask> make_detect_task() { return std::make_unique<DetectTask>(); }

}  // namespace kestrel::yolo
