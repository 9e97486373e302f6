#include "yolo/plot/training_board.h"

#include <filesystem>

#include "base/error.h"
#include "yolo/common/run_dir.h"
#include "yolo/data/image_codec.h"

namespace kestrel::yolo {
namespace fs = std::filesystem;

TrainingBoard::TrainingBoard(const std::string& save_dir, std::optional<int64_t> resumed_at_epoch)
    : save_dir_(save_dir), writer_(save_dir) {
  if (resumed_at_epoch) writer_.restart_at(*resumed_at_epoch);
}

void TrainingBoard::log_epoch(int64_t epoch, const std::vector<double>& results) {
  const std::vector<std::string>& tags = ResultsCsv::columns();
  KESTREL_CHECK(results.size() == tags.size(), "TrainingBoard: ", results.size(), " results for ", tags.size(),
                " columns");
  for (size_t i = 0; i < tags.size(); ++i) writer_.add_scalar(tags[i], static_cast<float>(results[i]), epoch);
}

void TrainingBoard::log_scalars(int64_t epoch, const std::vector<std::pair<std::string, double>>& metrics) {
  for (const auto& [tag, value] : metrics) writer_.add_scalar(tag, static_cast<float>(value), epoch);
}

void TrainingBoard::log_image(const std::string& image_path, int64_t step) {
  const std::vector<uint8_t> bytes = data::read_file_bytes(image_path);
  const data::ImageInfo info = data::probe_image(bytes, image_path);
  writer_.add_image(fs::path(image_path).stem().string(), std::string(bytes.begin(), bytes.end()), info.height,
                    info.width, step);
}

void TrainingBoard::log_result_plots(int64_t epoch) {
  for (const char* name : {"results.png", "confusion_matrix.png", "F1_curve.png", "PR_curve.png", "P_curve.png",
                           "R_curve.png"}) {
    const std::string path = save_dir_ + "/" + name;
    if (fs::exists(path)) log_image(path, epoch);
  }
}

}  // namespace kestrel::yolo
