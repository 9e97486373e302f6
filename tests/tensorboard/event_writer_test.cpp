// The event file as TensorBoard expects it: its name, the TFRecord framing (both CRCs checked by
// an independent reader, and damage detected), "brain.Event:2" first, then the scalars, images and
// restart markers as tensorflow.Event protobufs. Where Python's tensorboard package is importable,
// its own EventAccumulator reads the scalars and images back.
#include "tensorboard/event_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

#include "base/error.h"
#include "tests/support/cli.h"
#include "tests/tensorboard/event_file.h"

using namespace kestrel;
namespace fs = std::filesystem;
namespace kt = kestrel::testing;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("kestrel_tb_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Stand-in bytes: the writer carries images as they are encoded, it never decodes them.
const std::string kImage = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, '\0') + "IEND";

std::string write_sample(const fs::path& dir) {
  tensorboard::EventWriter w(dir.string());
  w.add_scalar("train/box_loss", 0.125f, 0);
  w.add_scalar("metrics/mAP_0.5:0.95", 0.5f, 0);
  w.add_scalar("train/box_loss", 0.0625f, 1);
  w.add_image("train_batch0", kImage, 48, 64, 1);
  w.restart_at(2);
  return w.path();
}

}  // namespace

TEST(EventWriter, WritesTheEventsTensorBoardReads) {
  const fs::path dir = scratch("sample");
  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const fs::path path = write_sample(dir);
  EXPECT_EQ(path.parent_path(), dir);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_TRUE(std::regex_match(path.filename().string(),
                               std::regex("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host) + "\\." +
                                          std::to_string(::getpid()))))
      << path;

  const kt::EventFile f = kt::read_event_file(path);
  ASSERT_EQ(f.error, "");
  ASSERT_EQ(f.events.size(), 6u);
  EXPECT_EQ(f.events[0].file_version(), "brain.Event:2");
  for (const tensorflow::Event& e : f.events) {
    EXPECT_GE(e.wall_time(), before - 1);
    EXPECT_LE(e.wall_time(), before + 60);
  }
  const auto s = kt::scalars(f);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.at("train/box_loss"), (std::vector<std::pair<int64_t, float>>{{0, 0.125f}, {1, 0.0625f}}));
  EXPECT_EQ(s.at("metrics/mAP_0.5:0.95"), (std::vector<std::pair<int64_t, float>>{{0, 0.5f}}));

  const tensorflow::Event& image = f.events[4];
  EXPECT_EQ(image.step(), 1);
  ASSERT_EQ(image.summary().value_size(), 1);
  const tensorflow::Summary::Value& v = image.summary().value(0);
  EXPECT_EQ(v.tag(), "train_batch0");
  ASSERT_TRUE(v.has_image());
  EXPECT_EQ(v.image().height(), 48);
  EXPECT_EQ(v.image().width(), 64);
  EXPECT_EQ(v.image().colorspace(), 3);
  EXPECT_EQ(v.image().encoded_image_string(), kImage);

  const tensorflow::Event& restart = f.events[5];
  EXPECT_EQ(restart.step(), 2);
  ASSERT_TRUE(restart.has_session_log());
  EXPECT_EQ(restart.session_log().status(), tensorflow::SessionLog::START);
}

// The reader checks what it claims: a flipped bit in a record's length or its data is caught.
TEST(EventWriter, DamagedRecordsFailTheirCrc) {
  const std::string bytes = kt::read_binary(write_sample(scratch("damage")));
  const size_t first = 12 + kt::read_le(bytes, 0, 8) + 4;  // the second record's offset
  std::string bad_length = bytes;
  bad_length[first] ^= 0x01;
  EXPECT_NE(kt::parse_event_records(bad_length).error.find("length CRC mismatch at byte " + std::to_string(first)),
            std::string::npos);
  std::string bad_data = bytes;
  bad_data[first + 14] ^= 0x01;
  EXPECT_NE(kt::parse_event_records(bad_data).error.find("data CRC mismatch at byte " + std::to_string(first)),
            std::string::npos);
  EXPECT_NE(kt::parse_event_records(bytes.substr(0, bytes.size() - 1)).error.find("truncated"), std::string::npos);
}

TEST(EventWriter, WritersInTheSameSecondGetTheirOwnFiles) {
  const fs::path dir = scratch("two");
  tensorboard::EventWriter a(dir.string()), b(dir.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(kt::event_files(dir).size(), 2u);
}

TEST(EventWriter, MissingDirectoryIsRefusedNamingIt) {
  const std::string dir = (scratch("missing") / "no" / "such").string();
  try {
    tensorboard::EventWriter w(dir);
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
}

TEST(EventWriter, TensorBoardsOwnReaderReadsTheFileBack) {
  const std::string python = kt::find_python({"tensorboard"});
  if (python.empty())
    GTEST_SKIP() << "Python's tensorboard package is not importable (tried $KESTREL_PYTHON, python3, "
                    "/usr/bin/python3); the framing and protobufs are checked by the other cases";
  const fs::path dir = scratch("accumulator");
  write_sample(dir);
  const fs::path script = dir / "read.py";
  std::ofstream(script) << "import sys\n"
                           "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
                           "acc = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0, 'images': 0})\n"
                           "acc.Reload()\n"
                           "for tag in sorted(acc.Tags()['scalars']):\n"
                           "    for s in acc.Scalars(tag):\n"
                           "        print('scalar', tag, s.step, s.value)\n"
                           "for tag in sorted(acc.Tags()['images']):\n"
                           "    for i in acc.Images(tag):\n"
                           "        print('image', tag, i.step, i.width, i.height, len(i.encoded_image_string))\n";
  const kt::CliResult r = kt::run_command(python + " " + script.string() + " " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("scalar metrics/mAP_0.5:0.95 0 0.5\n"
                       "scalar train/box_loss 0 0.125\n"
                       "scalar train/box_loss 1 0.0625\n"
                       "image train_batch0 1 64 48 " + std::to_string(kImage.size()) + "\n"),
            std::string::npos)
      << r.out;
}
