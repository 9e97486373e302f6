// One training step as the device sees it: buffer broadcast, forward, loss, backward with the
// bucketed all-reduce, unscale, clip, optimizer and EMA are enqueued without any host read, and
// the host learns each batch's loss and flags one batch later (StepStatusQueue). A non-finite
// loss is therefore handled on the device:
//   - each batch's flags, summed over the ranks, are added to a device scalar that covers the
//     current accumulation window;
//   - the optimizer and EMA kernels read that scalar: a non-finite loss on any rank, anywhere in
//     the window, skips the window's update on every rank (their step and update counts live on
//     the device too and stay put), and its gradients are zeroed as after any step.
// Per batch (the trainer's train_batch):
//   step.run(x, targets, ni, step_now, stop_requested);
//   for (const BatchStatus& s : step.take_previous()) account(s);   // a batch late
// and where the host must know everything (an epoch's end, a stop): account(step.drain()).
//
// CUDA graphs (TrainStepOptions::graphs): with fixed shapes the whole step is captured once into
// a CUDA graph and replayed for every later batch of that shape (StepGraphPolicy decides when).
// A replay copies the batch into the graph's static input buffers, writes the per-step values
// the graph reads from device memory (the optimizer's lr and momentum, this rank's stop request),
// launches the graph, and queues the batch's status for the host. The eager step and the
// captured one run the same code (enqueue_forward_backward, enqueue_optimizer_step).
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "dist/ddp.h"
#include "dist/reducer.h"
#include "yolo/model/model.h"
#include "yolo/train/ema.h"
#include "yolo/train/grad_scaler.h"
#include "yolo/train/loss.h"
#include "yolo/train/optimizer.h"
#include "yolo/train/step_graph_policy.h"
#include "yolo/train/step_status.h"

namespace kestrel {
class GraphPool;
}

namespace kestrel::yolo {

// A step's loss as the device holds it (nothing read back): the differentiable total; the
// non-finite flag's input, float64 [3] whose sum is finite exactly when the loss is; the items
// the host reads a batch later, float64 [3] (box, obj, cls) or [4] (box, seg, obj, cls).
struct StepLoss {
  Tensor total, components, items;
};

// What a task computes in a step: its model's forward, then its loss. Detection's is
// DetectionObjective; segmentation's (yolo/train/seg_objective.h) adds the prototypes and the
// batch's label masks.
class StepObjective {
 public:
  virtual ~StepObjective() = default;
  virtual layers::Module& model() const = 0;
  // masks: the batch's label masks on the step's device (segmentation), undefined otherwise.
  virtual StepLoss forward(const Tensor& x, const Tensor& targets, const Tensor& masks) const = 0;
};

// What the loss reads: t itself, or on the CPU float32 in place of bfloat16 activations (--amp bf16
// there), through an autograd cast whose backward rounds the float32 gradient to bfloat16 once.
// CUDA's loss kernels read the activations' type as it is.
Tensor loss_input(const Tensor& t);
std::vector<Tensor> loss_inputs(std::vector<Tensor> ts);

class DetectionObjective : public StepObjective {
 public:
  DetectionObjective(DetectionModel& model, const ComputeLoss& loss) : model_(model), loss_(loss) {}
  layers::Module& model() const override { return model_; }
  StepLoss forward(const Tensor& x, const Tensor& targets, const Tensor& masks) const override;

 private:
  DetectionModel& model_;
  const ComputeLoss& loss_;
};

// What a step works with; the trainer owns them. ema, reducer and buffers may be null (the EMA
// lives on rank 0 only; one process has no reducer; SyncBN needs no buffer broadcast).
// objective, when set, is the step's model and loss (another task's); else model and loss are.
struct TrainStepParts {
  DetectionModel* model = nullptr;
  const ComputeLoss* loss = nullptr;
  Optimizer* optimizer = nullptr;
  GradScaler* scaler = nullptr;
  ModelEma* ema = nullptr;
  dist::Reducer* reducer = nullptr;
  dist::TensorBroadcaster* buffers = nullptr;
  const StepObjective* objective = nullptr;
};

enum class GraphMode { Off, On };

struct TrainStepOptions {
  GraphMode graphs = GraphMode::Off;  // On: CUDA only (single process, or NCCL)
  int graph_warmup_steps = 3;         // eager optimizer steps before the first capture
  // A failed capture stops the run (true: --cuda-graph on), or turns graphs off for the rest of
  // it, the batch then running eagerly (false: --cuda-graph auto; graphs_disabled_reason() says
  // why). Nothing of a failed capture ran on the device, and its host-side traces (the status
  // entry, DDP's armed backward, the loss scaler's unscale/step) are undone (StepSnapshot). With
  // several processes a failed capture is always fatal: every rank's decisions (eager, capture,
  // replay) must agree batch by batch, as NCCL's captured collectives require, and they do only
  // when nothing happens on one rank alone. The step's key is the same on every rank when the
  // trainer pads targets to one run-wide row count (run_target_rows), and the addresses a
  // graph bakes in change only at events every rank goes through (the first steps, a resume).
  bool capture_failure_fatal = true;
  // The backward loss is the loss times this (and the world size under DDP): 4 with --quad, whose
  // batches hold a quarter of the images (data/quad_collate.h). The logged losses stay unscaled.
  double loss_factor = 1.0;
  // Tests: called inside every capture, after the step's work is enqueued.
  std::function<void()> capture_probe;
};

class TrainStep {
 public:
  TrainStep(TrainStepParts parts, const RankInfo& rank, Device device,
            TrainStepOptions options = {});
  ~TrainStep();

  // One batch: forward_backward, then optimizer_step when step_now; eagerly, or by capturing
  // or replaying the step's CUDA graph in graph mode. masks: the objective's (segmentation's
  // label masks on the step's device); graph mode takes none.
  void run(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
           bool stop_requested, const Tensor& masks = Tensor());

  // Forward, loss and backward of one batch: x the model input, targets on the device (checked
  // on the host before the upload: ComputeLoss::check_targets). step_now: an optimizer step
  // follows this batch (under DDP the gradients are all-reduced in this backward). Issues the
  // batch's status with this rank's stop request.
  void forward_backward(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                        bool stop_requested, const Tensor& masks = Tensor());
  // The statuses of the batches before the newest one, oldest first: one host read each, of
  // work issued a forward and backward ago.
  std::vector<BatchStatus> take_previous();
  // Every outstanding status, the newest batch's included (waits for it).
  std::vector<BatchStatus> drain();
  // Whether take_previous() would find its statuses already there (never waiting for them).
  bool previous_ready() const { return status_.pending() < 2 || status_.oldest_ready(); }
  // Unscale, clip at norm 10, optimizer, loss-scale update, zero gradients, EMA; skipped on the
  // device when the window held a non-finite loss.
  void optimizer_step();

  bool graphs_on() const { return options_.graphs == GraphMode::On; }
  const GraphStats& graph_stats() const { return policy_.stats(); }
  // Non-empty when graph mode gave up for the rest of the run (and went on eagerly).
  const std::string& graphs_disabled_reason() const { return policy_.disabled_reason(); }

  // The open accumulation window holds a non-finite loss that the host knows of (call after
  // drain(); goes into checkpoints with pending gradients), and its restore on resume.
  bool window_nonfinite() const { return host_window_bad_; }
  void set_window_nonfinite(bool bad);
  // train.py's optimizer.zero_grad() before each epoch's first batch: gradients accumulated
  // towards a step that the epoch's end cut short are dropped (zeroed in place), with their
  // window's non-finite flag. Call after drain(). The step timing (last_opt_step) is not changed.
  void discard_gradients();

 private:
  struct Pending {
    bool ends_window = false;  // an optimizer step follows the batch
  };
  struct Graph;  // one captured step (train_step.cpp)

  // The step's device work on the current stream, shared by eager runs and captures.
  void enqueue_forward_backward(const Tensor& x, const Tensor& targets, const Tensor& masks,
                                int64_t batch, bool step_now, bool to_host);
  void enqueue_optimizer_step();
  BatchStatus settle(BatchStatus s);
  void set_requests(bool stop_requested, bool replayed);
  // Graph mode.
  void run_graphed(const Tensor& x, const Tensor& targets, int64_t batch, bool step_now,
                   bool stop_requested);
  uint64_t fingerprint() const;
  Tensor static_buffer(const Tensor& like);
  // false: the capture failed and graphs are off (capture_failure_fatal unset).
  bool capture(const StepKey& key, const Tensor& x, const Tensor& targets);
  void replay(const StepKey& key, const Tensor& x, const Tensor& targets, int64_t batch,
              bool stop_requested);

  TrainStepParts p_;
  std::unique_ptr<DetectionObjective> detection_;  // the objective when parts name model and loss
  const StepObjective* objective_ = nullptr;
  RankInfo rank_;
  Device device_;
  TrainStepOptions options_;
  StepStatusQueue status_;
  std::deque<Pending> pending_;  // parallel to status_'s entries
  Tensor window_;                // float32 [1] on the device: non-finite losses in the window
  // float32 [kStepRequests] on the device: this rank's stop request, and whether the batch runs
  // as a graph replay (kernels/step_flags.h); written before each batch, read by its flags kernel
  Tensor requests_;
  bool host_window_bad_ = false;  // what the host has learnt of the open window so far
  StepGraphPolicy policy_;
  std::map<StepKey, std::unique_ptr<Graph>> graphs_;
  std::map<std::pair<std::vector<int64_t>, DType>, Tensor> static_buffers_;
  std::shared_ptr<GraphPool> graph_pool_;  // shared by the graphs of all shapes
  std::unique_ptr<Stream> capture_stream_;
};

}  // namespace kestrel::yolo
