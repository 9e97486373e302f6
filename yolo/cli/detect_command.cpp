// `kestrel detect`: the reference's detect.py on images: letterbox (minimum rectangle), model,
// NMS, boxes back to the image, annotated copies and optional YOLO txt files.
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/autograd.h"
#include "yolo/box_ops.h"
#include "yolo/cli/args.h"
#include "yolo/cli/commands.h"
#include "yolo/cli/inference_model.h"
#include "yolo/data/augment.h"
#include "yolo/data/dataset_config.h"
#include "yolo/data/image_codec.h"
#include "yolo/nms.h"
#include "yolo/plot_canvas.h"
#include "yolo/run_dir.h"

namespace kestrel::cli {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<std::string> collect_sources(const std::string& source) {
  if (fs::is_directory(source)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(source))
      if (e.is_regular_file() && yolo::data::is_image_path(e.path().string())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    KESTREL_CHECK(!files.empty(), "--source '", source, "' holds no .jpg/.png images");
    return files;
  }
  KESTREL_CHECK(fs::is_regular_file(source), "--source '", source, "' is neither an image nor a directory");
  return {source};
}

}  // namespace

const Command kDetectCommand = {
    "detect", "detect objects in images and save annotated copies (reference detect.py)",
    "usage: kestrel detect --weights W.safetensors --source IMAGE|DIR [--img-size 640]\n"
    "                      [--conf-thres 0.25] [--iou-thres 0.45] [--max-det 1000] [--device cpu|0]\n"
    "                      [--save-txt] [--save-conf] [--project runs/detect] [--name exp]\n"
    "                      [--exist-ok] [--cfg M.yaml] [--nc N]\n",
    run_detect};

int run_detect(const std::vector<std::string>& argv) {
  Args args(argv, {{"weights", true}, {"source", true}, {"img-size", true}, {"imgsz", true},
                   {"conf-thres", true}, {"iou-thres", true}, {"max-det", true}, {"device", true},
                   {"save-txt", false}, {"save-conf", false}, {"project", true}, {"name", true},
                   {"exist-ok", false}, {"cfg", true}, {"nc", true}});
  if (!args.has("weights") || !args.has("source")) throw UsageError("--weights and --source are required");
  const int img_size = args.get_int32("img-size", args.get_int32("imgsz", 640));
  yolo::NmsOptions nms;
  nms.conf_thres = args.get_double("conf-thres", 0.25);
  nms.iou_thres = args.get_double("iou-thres", 0.45);
  nms.max_det = args.get_int("max-det", 1000);
  const Device device = inference_device(args.get("device", ""));
  const std::optional<int> nc = args.get_optional_int32("nc");
  InferenceModel im = load_inference_model(args.get("weights", ""), args.get("cfg", ""), nc, device);
  const int stride = static_cast<int>(std::max(32.0, im.model->strides().back()));
  const std::vector<std::string> sources = collect_sources(args.get("source", ""));
  const std::string save_dir = yolo::increment_path(args.get("project", "runs/detect") + "/" + args.get("name", "exp"), args.has("exist-ok"));
  fs::create_directories(save_dir);
  if (args.has("save-txt")) fs::create_directories(save_dir + "/labels");
  auto name_of = [&](int c) { return c < static_cast<int>(im.names.size()) ? im.names[c] : std::to_string(c); };

  autograd::NoGradGuard no_grad;
  double t_pre = 0, t_inf = 0, t_nms = 0;
  size_t skipped = 0;
  for (size_t k = 0; k < sources.size(); ++k) {
    const std::string& path = sources[k];
    auto t0 = Clock::now();
    // One unreadable file in a folder must not cost the results of all the others.
    cv::Mat original;
    std::string damage;
    try {
      original = yolo::data::read_image(path, &damage);
    } catch (const Error& e) {
      std::fprintf(stderr, "WARNING: skipping %s: %s\n", path.c_str(), e.what());
      ++skipped;
      continue;
    }
    if (!damage.empty())
      std::fprintf(stderr, "WARNING: %s: corrupt JPEG restored (%s); what is missing is grey\n",
                   path.c_str(), damage.c_str());
    yolo::data::Letterboxed lb = yolo::data::letterbox(original, img_size, img_size, true, true, stride);
    cv::Mat rgb;
    cv::cvtColor(lb.image, rgb, cv::COLOR_BGR2RGB);
    Tensor x = Tensor::empty({1, rgb.rows, rgb.cols, 3});
    float* px = x.data<float>();
    for (int y = 0; y < rgb.rows; ++y)
      for (int i = 0; i < rgb.cols * 3; ++i) px[y * rgb.cols * 3 + i] = rgb.ptr<uint8_t>(y)[i] / 255.0f;
    x = x.to(device);
    t_pre += ms_since(t0);
    t0 = Clock::now();
    yolo::DetectionModel::Prediction pred = im.model->predict(x);
    current_stream(device).synchronize();
    const double inf_ms = ms_since(t0);
    t_inf += inf_ms;
    t0 = Clock::now();
    Tensor det = yolo::non_max_suppression(pred.boxes, nms)[0];
    t_nms += ms_since(t0);
    yolo::scale_boxes(det, {rgb.rows, rgb.cols}, {original.rows, original.cols},
                      yolo::RatioPad{lb.ratio_w, lb.pad_w, lb.pad_h});

    const std::vector<float> d = det.to_vector<float>();
    std::map<int, int> counts;
    std::ofstream txt;
    if (args.has("save-txt")) txt.open(save_dir + "/labels/" + fs::path(path).stem().string() + ".txt");
    for (size_t i = 0; i + 6 <= d.size(); i += 6) {
      const int c = static_cast<int>(d[i + 5]);
      ++counts[c];
      const cv::Point p1(static_cast<int>(d[i]), static_cast<int>(d[i + 1]));
      const cv::Point p2(static_cast<int>(d[i + 2]), static_cast<int>(d[i + 3]));
      const int thick = std::max(1, (original.rows + original.cols) / 600);
      cv::rectangle(original, p1, p2, yolo::class_colour(c), thick, cv::LINE_AA);
      yolo::draw_label(original, name_of(c) + " " + yolo::short_number(d[i + 4]), p1, yolo::class_colour(c), 0.5);
      if (txt) {
        const double w = original.cols, h = original.rows;
        txt << c << " " << (d[i] + d[i + 2]) / 2 / w << " " << (d[i + 1] + d[i + 3]) / 2 / h << " "
            << (d[i + 2] - d[i]) / w << " " << (d[i + 3] - d[i + 1]) / h;
        if (args.has("save-conf")) txt << " " << d[i + 4];
        txt << "\n";
      }
    }
    const std::string out_path = save_dir + "/" + fs::path(path).filename().string();
    if (fs::path(path).extension() == ".png")
      yolo::data::write_png(out_path, original);
    else
      yolo::data::write_jpeg(out_path, original, 95);
    std::string summary;
    for (const auto& [c, n] : counts) summary += str(n, " ", name_of(c), n > 1 ? "s" : "", ", ");
    std::printf("image %zu/%zu %s: %dx%d %s%.1fms\n", k + 1, sources.size(), path.c_str(), rgb.rows,
                rgb.cols, summary.empty() ? "(no detections), " : summary.c_str(), inf_ms);
  }
  const char* files = skipped == 1 ? "file" : "files";
  if (skipped > 0) std::printf("%zu %s skipped (unreadable or corrupt, see the warnings above)\n", skipped, files);
  KESTREL_CHECK(skipped < sources.size(), "no image of --source '", args.get("source", ""),
                "' could be read (", skipped, " ", files, " skipped); check the files named above");
  const double n = static_cast<double>(sources.size() - skipped);
  std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (1, 3, %d, %d)\n",
              t_pre / n, t_inf / n, t_nms / n, img_size, img_size);
  std::printf("Results saved to %s\n", save_dir.c_str());
  return 0;
}

}  // namespace kestrel::cli
