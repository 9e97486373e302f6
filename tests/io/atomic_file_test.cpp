// Atomic files: write_file_atomic creates and replaces a file and leaves no temporary behind; each
// writer fills a temporary of its own (unique_temp_path: pid and counter), so writers of one file
// at the same time (two runs, two threads) never meet in one temporary: each rename installs a
// whole file and none fails; an AtomicFile dropped without commit() keeps the old content and
// removes its temporary; publish_copy makes `dst` equal
// to `src` (over an existing `dst` too; a hard link on one file system, a copy across file systems),
// and `dst` keeps that content when `src` is later replaced atomically (a new inode); failures
// throw kestrel::Error naming the path. Runs as any user: "unwritable" is a parent that is a
// regular file or does not exist, which refuses root too.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "base/error.h"

using namespace kestrel;
namespace fs = std::filesystem;

namespace {

fs::path make_temp_dir(const fs::path& parent) {
  std::string tmpl = (parent / "kestrel_atomic_file_XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_plain(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ino_t inode_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Runs `f`, which must throw kestrel::Error with `needle` in its message.
template <class F>
void expect_error_naming(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir(fs::temp_directory_path());
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The temporaries (unique_temp_path names) in the test's directory.
  std::vector<std::string> temporaries() const {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp") != std::string::npos) found.push_back(e.path().filename());
    return found;
  }

  fs::path dir_;
};

}  // namespace

TEST_F(AtomicFileTest, WriteCreatesAndReplacesAndLeavesNoTemporary) {
  const std::string p = path("results.csv");
  write_file_atomic(p, "first\n");
  EXPECT_EQ(read_bytes(p), "first\n");
  EXPECT_TRUE(temporaries().empty());

  write_file_atomic(p, "2nd");  // shorter: no trace of the old bytes may remain
  EXPECT_EQ(read_bytes(p), "2nd");
  EXPECT_TRUE(temporaries().empty());

  // A crashed writer's temporary under this process's next name (pid reuse) is truncated, not
  // appended to or overlaid.
  const std::string next = unique_temp_path(p);
  const std::string following = next.substr(0, next.rfind('.') + 1) +
                                std::to_string(std::stoull(next.substr(next.rfind('.') + 1)) + 1);
  write_plain(following, "a much longer stale temporary file");
  write_file_atomic(p, "new");
  EXPECT_EQ(read_bytes(p), "new");
  EXPECT_TRUE(temporaries().empty());

  write_file_atomic(p, "");
  EXPECT_TRUE(fs::exists(p));
  EXPECT_EQ(fs::file_size(p), 0u);

  // Binary content with NULs goes through unchanged.
  const std::string binary("a\0b\xff\n\0", 6);
  write_file_atomic(p, binary);
  EXPECT_EQ(read_bytes(p), binary);
}

TEST_F(AtomicFileTest, PiecewiseWritesThenCommit) {
  const std::string p = path("weights.bin");
  {
    AtomicFile f(p);
    f.write("abc", 3);
    ASSERT_EQ(temporaries().size(), 1u) << "the writer fills one temporary beside the file";
    EXPECT_TRUE(is_temp_name(temporaries()[0])) << temporaries()[0];
    EXPECT_EQ(temporaries()[0].rfind("weights.bin.tmp.", 0), 0u) << temporaries()[0];
    EXPECT_FALSE(fs::exists(p)) << "nothing appears under the final name before commit()";
    f.write("defg", 4);
    f.commit();
    EXPECT_TRUE(temporaries().empty());
  }
  EXPECT_EQ(read_bytes(p), "abcdefg");
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(AtomicFileTest, DroppedWithoutCommitKeepsTheOldFileAndRemovesTheTemporary) {
  const std::string p = path("last.safetensors");
  write_file_atomic(p, "old complete content");
  const ino_t before = inode_of(p);
  {
    AtomicFile f(p);
    f.write("half a ne", 9);
    // Leaves scope as an exception thrown mid-write would.
  }
  EXPECT_EQ(read_bytes(p), "old complete content");
  EXPECT_EQ(inode_of(p), before);
  EXPECT_TRUE(temporaries().empty());

  // With no old file there is still nothing afterwards.
  const std::string q = path("never.bin");
  { AtomicFile f(q); f.write("x", 1); }
  EXPECT_FALSE(fs::exists(q));
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(AtomicFileTest, PublishCopyMakesDstEqualToSrcAndSurvivesSrcReplacement) {
  const std::string src = path("last.safetensors"), dst = path("best.safetensors");
  write_file_atomic(src, "epoch 3 weights");
  publish_copy(src, dst);
  EXPECT_EQ(read_bytes(dst), "epoch 3 weights");
  EXPECT_EQ(read_bytes(src), "epoch 3 weights");
  EXPECT_TRUE(temporaries().empty());

  // The trainer's next save replaces last through a rename (a new inode): best must not follow.
  write_file_atomic(src, "epoch 4 weights");
  EXPECT_EQ(read_bytes(src), "epoch 4 weights");
  EXPECT_EQ(read_bytes(dst), "epoch 3 weights");
}

TEST_F(AtomicFileTest, PublishCopyReplacesAnExistingDst) {
  const std::string src = path("last.safetensors"), dst = path("best.safetensors");
  write_file_atomic(dst, "an older and longer best checkpoint");
  write_file_atomic(src, "newer");
  publish_copy(src, dst);
  EXPECT_EQ(read_bytes(dst), "newer");
  EXPECT_TRUE(temporaries().empty());
  // On one file system it is a hard link (no copy of a large checkpoint), stale temporary or not.
  EXPECT_EQ(inode_of(dst), inode_of(src));
  // Publishing again (dst already a link to src) is harmless.
  publish_copy(src, dst);
  EXPECT_EQ(read_bytes(dst), "newer");
  write_file_atomic(src, "newest");
  EXPECT_EQ(read_bytes(dst), "newer");
}

// /dev/shm is a tmpfs on Linux, usually another file system than the temp directory: link()
// fails there (EXDEV) and publish_copy must fall back to copying the bytes.
TEST_F(AtomicFileTest, PublishCopyAcrossFileSystemsCopies) {
  struct stat a {}, b {};
  if (::stat("/dev/shm", &b) != 0 || ::stat(dir_.c_str(), &a) != 0 || a.st_dev == b.st_dev)
    GTEST_SKIP() << "no second file system at /dev/shm to copy across";
  const fs::path other = make_temp_dir("/dev/shm");
  ASSERT_FALSE(other.empty());
  const std::string src = (other / "last.safetensors").string(), dst = path("best.safetensors");
  const std::string bytes("cross\0device\n", 13);
  write_file_atomic(src, bytes);
  write_file_atomic(dst, "old");
  publish_copy(src, dst);
  EXPECT_EQ(read_bytes(dst), bytes);
  EXPECT_NE(inode_of(dst), 0u);
  EXPECT_TRUE(temporaries().empty());
  write_file_atomic(src, "replaced");
  EXPECT_EQ(read_bytes(dst), bytes);
  fs::remove_all(other);
}

TEST_F(AtomicFileTest, ErrorsNameThePath) {
  // The parent is a regular file: not even root can create anything under it.
  write_plain(dir_ / "plainfile", "x");
  const std::string under_file = path("plainfile/results.csv");
  expect_error_naming([&] { write_file_atomic(under_file, "data"); }, under_file);
  expect_error_naming([&] { AtomicFile f(under_file); }, under_file);

  const std::string missing_dir = path("no/such/dir/opt.yaml");
  expect_error_naming([&] { write_file_atomic(missing_dir, "data"); }, missing_dir);

  // The rename fails (the destination is a non-empty directory): error, and no temporary left.
  fs::create_directories(dir_ / "occupied" / "child");
  const std::string occupied = path("occupied");
  expect_error_naming([&] { write_file_atomic(occupied, "data"); }, occupied);
  EXPECT_TRUE(temporaries().empty());
  EXPECT_TRUE(fs::is_directory(occupied));

  // publish_copy from a missing source names the source; into an unwritable place, the target.
  const std::string missing_src = path("missing.safetensors");
  expect_error_naming([&] { publish_copy(missing_src, path("best.safetensors")); }, missing_src);
  EXPECT_FALSE(fs::exists(path("best.safetensors")));
  const std::string src = path("last.safetensors");
  write_file_atomic(src, "w");
  expect_error_naming([&] { publish_copy(src, under_file); }, under_file);
}

TEST(UniqueTempPath, NamesAreBesideThePathDistinctAndRecognised) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) {
    const std::string t = unique_temp_path("/runs/exp/weights/last.safetensors");
    EXPECT_EQ(t.rfind("/runs/exp/weights/last.safetensors.tmp." + std::to_string(::getpid()) + ".", 0), 0u) << t;
    EXPECT_TRUE(is_temp_name(fs::path(t).filename())) << t;
    names.insert(t);
  }
  EXPECT_EQ(names.size(), 100u);
  for (const char* other : {"last.safetensors", "results.csv", "last.safetensors.tmp", ".tmp.1.2",
                            "a.tmp.12", "a.tmp.x.3", "a.tmp.3.", "a.tmp..3", "exp.tmp-12"})
    EXPECT_FALSE(is_temp_name(other)) << other;
}

// Two writers of one file at the same moment (two runs given one run directory, two threads):
// with one shared `path.tmp` the first rename took the second writer's temporary away ("cannot
// rename ... No such file or directory") or installed its half-written bytes. Each writer's own
// temporary makes every commit succeed and every installed file whole.
TEST_F(AtomicFileTest, WritersOfOneFileAtOnceEachInstallAWholeFile) {
  const std::string p = path("last.safetensors");
  const std::string a(4096, 'a'), b(1024, 'b');
  {
    AtomicFile first(p), second(p);
    first.write(a.data(), a.size());
    second.write(b.data(), b.size());
    first.commit();
    EXPECT_EQ(read_bytes(p), a);
    second.commit();
    EXPECT_EQ(read_bytes(p), b);
  }
  EXPECT_TRUE(temporaries().empty());

  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      const std::string bytes(1000 * (t + 1), static_cast<char>('p' + t));
      for (int i = 0; i < 50; ++i) {
        try {
          write_file_atomic(p, bytes);
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  for (auto& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  const std::string last = read_bytes(p);
  ASSERT_FALSE(last.empty());
  const int t = last[0] - 'p';
  ASSERT_TRUE(t >= 0 && t < 4) << "content of no writer";
  EXPECT_EQ(last, std::string(1000 * (t + 1), last[0])) << "a torn or mixed file";
  EXPECT_TRUE(temporaries().empty());
}
