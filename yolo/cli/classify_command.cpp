// `kestrel classify train|val|predict`: the reference's classify/train.py, val.py and predict.py.
// This file holds the family's entry and val and predict; train is classify_train_command.cpp.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/common/console.h"
#include "yolo/common/run_dir.h"
#include "yolo/data/classify_dataset.h"
#include "yolo/data/classify_loader.h"
#include "yolo/data/classify_transforms.h"
#include "yolo/data/detect_sources.h"
#include "yolo/data/image_codec.h"
#include "yolo/data/loader.h"
#include "yolo/data/video_io.h"
#include "yolo/eval/classify_validator.h"
#include "yolo/model/classifier_file.h"
#include "yolo/plot/plot_text.h"

namespace kestrel::cli {
namespace {

namespace fs = std::filesystem;

const FlagTable kValFlags = {
    {"data", "DIR", "../datasets/mnist", "dataset folder (<dir>/val/<class>/*.jpg, or test/), a name under ../datasets, or a yaml"},
    {"weights", "W.pt", "yolov5s-cls.pt", "a classifier: the reference's -cls .pt or a Kestrel .safetensors"},
    {"batch-size", "N", "128", "batch size"},
    {"img-size", "PIXELS", "224", "inference size (also --img, --imgsz)"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"workers", "N", "8", "most data-loader workers"},
    {"verbose", "[BOOL]", "True", "the per-class table (on unless --verbose False)"},
    {"project", "DIR", "runs/val-cls", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"half", nullptr, nullptr, "float16 inference on a GPU (ignored on the CPU)"},
    {"dnn", nullptr, nullptr, "accepted and ignored: classifiers run as .pt or .safetensors"}};

const FlagTable kPredictFlags = {
    {"weights", "W.pt", "yolov5s-cls.pt", "a classifier: the reference's -cls .pt or a Kestrel .safetensors"},
    {"source", "SRC", "data/images", "file, folder, glob, .txt list, video, stream URL or webcam index"},
    {"data", "D.yaml", "data/coco128.yaml", "accepted (the classifier carries its class names)"},
    {"img-size", "PIXELS", "224", "inference size (also --img, --imgsz)"},
    {"device", "cpu|0", "", "cpu or a GPU index; empty: GPU 0 if any"},
    {"view-img", nullptr, nullptr, "accepted; Kestrel shows no windows (see the saved images)"},
    {"save-txt", nullptr, nullptr, "save each image's top five to labels/<name>.txt"},
    {"nosave", nullptr, nullptr, "do not save the annotated images"},
    {"augment", nullptr, nullptr, "accepted (the reference's classifiers ignore it)"},
    {"visualize", nullptr, nullptr, "accepted (the reference's classifiers ignore it)"},
    {"update", nullptr, nullptr, "accepted; Kestrel's files need no update"},
    {"project", "DIR", "runs/predict-cls", "results go to project/name"},
    {"name", "NAME", "exp", "results go to project/name, numbered (exp2, ...) when it exists"},
    {"exist-ok", nullptr, nullptr, "reuse an existing project/name instead of numbering a new one"},
    {"half", nullptr, nullptr, "float16 inference on a GPU (ignored on the CPU)"},
    {"dnn", nullptr, nullptr, "accepted and ignored"},
    {"vid-stride", "N", "1", "read every N-th video frame"}};

bool python_true(const std::string& v) {
  std::string s;
  for (char c : v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return !(s == "false" || s == "0" || s == "no" || s.empty());
}

DType half_dtype(bool half, Device device, const yolo::Console& console) {
  if (!half) return DType::F32;
  if (!device.is_cuda()) {
    console.line("--half: float16 runs on a GPU only; running float32 on the CPU");
    return DType::F32;
  }
  return DType::F16;
}

// The model's class names: the file's, else class0, class1, ... (as the reference without names).
std::vector<std::string> names_or_numbers(const yolo::LoadedClassifier& c) {
  if (static_cast<int>(c.names.size()) == c.model->nc()) return c.names;
  std::vector<std::string> out;
  for (int i = 0; i < c.model->nc(); ++i) out.push_back("class" + std::to_string(i));
  return out;
}

}  // namespace

const std::vector<const Command*>& classify_commands() {
  static const std::vector<const Command*> commands = {&kClassifyTrainCommand, &kClassifyValCommand,
                                                       &kClassifyPredictCommand};
  return commands;
}

const Command kClassifyCommand = {
    "classify", "image classifiers: train, val, predict (reference classify/*.py)",
    "usage: kestrel classify train|val|predict [flags]\n"
    "  train    train a classifier on a folder dataset (classify/train.py)\n"
    "  val      top-1 and top-5 accuracy of a classifier on a dataset's val/ or test/ (classify/val.py)\n"
    "  predict  the top five classes of images, videos or streams (classify/predict.py)\n"
    "`kestrel classify <subcommand> --help` shows its flags.\n",
    run_classify, nullptr, &classify_commands()};

const Command kClassifyValCommand = {
    "val", "top-1 and top-5 accuracy (classify/val.py)",
    "usage: kestrel classify val --weights W.pt|W.safetensors --data DIR [--img-size 224] [--batch-size 128]\n"
    "                            [--device cpu|0] [--half] [--workers 8] [--verbose [False]]\n"
    "                            [--project runs/val-cls] [--name exp] [--exist-ok]\n",
    run_classify_val, &kValFlags};

const Command kClassifyPredictCommand = {
    "predict", "top five classes of images (classify/predict.py)",
    "usage: kestrel classify predict --weights W.pt|W.safetensors --source SRC [--img-size 224]\n"
    "                                [--device cpu|0] [--half] [--save-txt] [--nosave] [--vid-stride 1]\n"
    "                                [--project runs/predict-cls] [--name exp] [--exist-ok]\n",
    run_classify_predict, &kPredictFlags};

int run_classify(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::printf("%s", kClassifyCommand.usage);
    return argv.empty() ? 2 : 0;
  }
  const Command* sub = nullptr;
  for (const Command* c : classify_commands())
    if (argv[0] == c->name) sub = c;
  if (!sub) {
    std::fprintf(stderr, "kestrel classify: unknown subcommand '%s'\n\n%s", argv[0].c_str(), kClassifyCommand.usage);
    return 2;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  for (const auto& a : rest)
    if (a == "--help" || a == "-h") {
      std::printf("%s", command_help(*sub).c_str());
      return 0;
    }
  try {
    return sub->run(rest);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kestrel classify %s: %s\n\n%s", sub->name, e.what(), sub->usage);
    return 2;
  }
}

int run_classify_val(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kValFlags));
  const yolo::Console console(true);
  console.line(console.colour("classify/val: "), args.echo(kValFlags));
  const int img_size = args.get_int32("img-size", 224);
  const int batch_size = args.get_int32("batch-size", 128);
  if (batch_size < 1 || img_size < 32) throw UsageError("--batch-size >= 1 and --img-size >= 32");
  if (img_size > kMaxImageSize) throw UsageError("--img-size " + std::to_string(img_size) + " is above the limit");
  const Device device = inference_device(args.get("device", ""));
  const std::string root = yolo::data::resolve_classify_data(args.get("data", "../datasets/mnist"));
  const yolo::data::ClassifyDataset dataset = yolo::data::load_classify_dataset(root);

  // The model before the run directory: weights that are no classifier leave no directory behind.
  yolo::LoadedClassifier classifier = yolo::load_classifier_weights(args.get("weights", "yolov5s-cls.pt"), device);
  const yolo::ClaimedRunDir claim =
      yolo::claim_run_dir(args.get("project", "runs/val-cls") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  layers::fuse_convs(*classifier.model);
  console.line("Fusing layers... ");
  console.line(classifier.model->summary(img_size, /*fused=*/true));
  KESTREL_CHECK(classifier.model->nc() >= static_cast<int>(dataset.classes.size()), "the classifier predicts ",
                classifier.model->nc(), " classes but ", root, " has ", dataset.classes.size(),
                ": validate it on the dataset it was trained on");
  const std::vector<std::string> names =
      classifier.names.empty() ? dataset.classes : names_or_numbers(classifier);

  yolo::data::ClassifyLoaderOptions lo;
  lo.size = img_size;
  lo.batch_size = batch_size;
  lo.workers = yolo::data::dataloader_workers(static_cast<int>(std::thread::hardware_concurrency()), 1, batch_size,
                                              static_cast<int64_t>(dataset.test.samples.size()),
                                              args.get_int32("workers", 8));
  yolo::data::ClassifyLoader loader(dataset.test.samples, lo);
  yolo::ClassifyValOptions vo;
  vo.action = dataset.test_name == "val" ? "validating" : "testing";
  vo.compute = half_dtype(args.has("half"), device, console);
  const yolo::ClassifyValResult r = yolo::validate_classifier(*classifier.model, loader, device, vo, &console);
  if (python_true(args.get("verbose", "True"))) {
    std::printf("%s", r.metrics.table(names).c_str());
    std::printf("%s\n", yolo::classify_speed_line(r, img_size).c_str());
    std::printf("Results saved to %s\n", claim.path.c_str());
  }
  return 0;
}

int run_classify_predict(const std::vector<std::string>& argv) {
  Args args(argv, flag_spec(kPredictFlags));
  const yolo::Console console(true);
  console.line(console.colour("classify/predict: "), args.echo(kPredictFlags));
  const int img_size = args.get_int32("img-size", 224);
  if (img_size < 32 || img_size > kMaxImageSize) throw UsageError("--img-size must be in [32, " + std::to_string(kMaxImageSize) + "]");
  const int vid_stride = args.get_int32("vid-stride", 1);
  if (vid_stride < 1) throw UsageError("--vid-stride must be at least 1");
  const Device device = inference_device(args.get("device", ""));
  const std::string source = args.get("source", "data/images");
  const bool save_txt = args.has("save-txt");
  const bool save_img = !args.has("nosave") && !source.ends_with(".txt");
  const std::vector<yolo::data::SourceItem> items = yolo::data::expand_sources(source);

  yolo::LoadedClassifier classifier = yolo::load_classifier_weights(args.get("weights", "yolov5s-cls.pt"), device);
  const yolo::ClaimedRunDir claim =
      yolo::claim_run_dir(args.get("project", "runs/predict-cls") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  if (save_txt) fs::create_directories(claim.path + "/labels");
  layers::fuse_convs(*classifier.model);
  console.line("Fusing layers... ");
  console.line(classifier.model->summary(img_size, /*fused=*/true));
  const std::vector<std::string> names = names_or_numbers(classifier);
  const DType dtype = half_dtype(args.has("half"), device, console);

  using Clock = std::chrono::steady_clock;
  double t_pre = 0, t_inf = 0, t_post = 0;
  int64_t seen = 0, txt_files = 0;
  std::vector<float> pixels(static_cast<size_t>(img_size) * img_size * 3);
  // One frame: classify, print, annotate and save.
  auto classify = [&](const cv::Mat& bgr, const std::string& path, const std::string& prefix, const std::string& stem,
                      cv::Mat* annotated) {
    Clock::time_point t = Clock::now();
    yolo::data::normalize_imagenet(yolo::data::classify_eval(bgr, img_size), pixels.data());
    Tensor x = Tensor::from_vector(pixels, {1, img_size, img_size, 3}, device);
    if (dtype != DType::F32) x = x.to(dtype);
    t_pre += std::chrono::duration<double>(Clock::now() - t).count();
    t = Clock::now();
    Tensor logits;
    {
      autograd::NoGradGuard no_grad;
      logits = classifier.model->forward(x).to(DType::F32).to(Device::cpu()).contiguous();
    }
    const double inference = std::chrono::duration<double>(Clock::now() - t).count();
    t_inf += inference;
    t = Clock::now();
    const float* z = logits.data<float>();
    const int64_t nc = logits.size(1);
    std::vector<double> prob(static_cast<size_t>(nc));
    double zmax = z[0], sum = 0;
    for (int64_t c = 1; c < nc; ++c) zmax = std::max(zmax, static_cast<double>(z[c]));
    for (int64_t c = 0; c < nc; ++c) sum += prob[c] = std::exp(z[c] - zmax);
    std::vector<float> probf(static_cast<size_t>(nc));
    for (int64_t c = 0; c < nc; ++c) probf[c] = static_cast<float>(prob[c] / sum);
    const std::vector<int64_t> top = yolo::top_k(probf.data(), nc, 5);
    t_post += std::chrono::duration<double>(Clock::now() - t).count();
    ++seen;
    std::string line = prefix + std::to_string(img_size) + "x" + std::to_string(img_size) + " ", text;
    char buf[64];
    for (size_t k = 0; k < top.size(); ++k) {
      std::snprintf(buf, sizeof buf, "%.2f", probf[top[k]]);
      line += names[top[k]] + " " + buf + ", ";
      if (k) text += '\n';
      text.append(buf).append(" ").append(names[top[k]]);
    }
    std::snprintf(buf, sizeof buf, "%.1fms", inference * 1e3);
    std::printf("%s%s\n", line.c_str(), buf);
    if (save_txt) {
      const std::string txt = claim.path + "/labels/" + stem + ".txt";
      if (!fs::exists(txt)) ++txt_files;
      std::ofstream(txt, std::ios::app) << text << "\n";
    }
    if (annotated) {
      *annotated = bgr.clone();
      const double scale = std::max(0.5, std::max(bgr.rows, bgr.cols) / 1000.0);
      int y = 32;
      std::stringstream lines(text);
      for (std::string l; std::getline(lines, l);) {
        yolo::put_text(*annotated, l, cv::Point(32, y), scale, yolo::Align::kStart, yolo::Align::kStart, cv::Scalar(255, 255, 255));
        y += static_cast<int>(yolo::text_size(l, scale).height * 1.6) + 2;
      }
    }
    (void)path;
  };

  int64_t index = 0;
  for (const yolo::data::SourceItem& item : items) {
    ++index;
    const std::string name = fs::path(item.path).filename().string();
    const std::string stem = fs::path(item.path).stem().string();
    if (item.kind == yolo::data::SourceKind::kImage) {
      const cv::Mat bgr = yolo::data::read_image(item.path);
      cv::Mat out;
      classify(bgr, item.path, "image " + std::to_string(index) + "/" + std::to_string(items.size()) + " " + item.path + ": ",
               stem, save_img ? &out : nullptr);
      if (save_img) yolo::data::write_image(claim.path + "/" + name, out);
      continue;
    }
    yolo::data::VideoReader video(item.path, vid_stride);
    std::optional<yolo::data::VideoWriter> writer;
    int64_t frame = 0;
    cv::Mat bgr;
    while (video.read(bgr)) {
      ++frame;
      cv::Mat out;
      classify(bgr, item.path,
               "video " + std::to_string(index) + "/" + std::to_string(items.size()) + " (" + std::to_string(frame) + "/" +
                   std::to_string(video.frames()) + ") " + item.path + ": ",
               stem + "_" + std::to_string(frame), save_img ? &out : nullptr);
      if (save_img) {
        if (!writer) writer.emplace(claim.path + "/" + stem + ".mp4", video.fps(), out.cols, out.rows);
        writer->write(out);
      }
    }
  }
  if (seen) {
    char line[256];
    std::snprintf(line, sizeof line, "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (1, 3, %d, %d)",
                  t_pre * 1e3 / seen, t_inf * 1e3 / seen, t_post * 1e3 / seen, img_size, img_size);
    std::printf("%s\n", line);
  }
  if (save_txt || save_img) {
    std::printf("Results saved to %s", claim.path.c_str());
    if (save_txt) std::printf("\n%lld labels saved to %s/labels", static_cast<long long>(txt_files), claim.path.c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace kestrel::cli
