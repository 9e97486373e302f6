// Unpacking archives built by tests/support/zip_writer: stored and deflated entries come out byte
// for byte and the archive's folders appear only once complete; names that climb out, links,
// sizes beyond the limit, entries that inflate to more than they declare, damage and an existing
// destination are refused with nothing left behind.
#include "io/zip_extract.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"

namespace {

namespace fs = std::filesystem;
using kestrel::testing::error_of;
using kestrel::testing::make_zip;
using kestrel::testing::ZipInput;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string repeated(const std::string& text, int times) {
  std::string s;
  for (int i = 0; i < times; ++i) s += text;
  return s;
}

class ZipExtract : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_zip_extract_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string archive(const std::vector<ZipInput>& entries) {
    const std::string path = (dir_ / "data.zip").string();
    kestrel::write_file_atomic(path, make_zip(entries));
    return path;
  }
  std::vector<std::string> left_in_out() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "out")) names.push_back(e.path().filename().string());
    return names;
  }
  // The refusal of unpacking `entries`, after checking that nothing was left in the destination.
  std::string refusal(const std::vector<ZipInput>& entries, const kestrel::UnzipLimits& limits = {}) {
    const std::string path = archive(entries);
    const std::string e = error_of([&] { kestrel::unzip_file(path, (dir_ / "out").string(), limits); });
    EXPECT_FALSE(e.empty()) << "not refused";
    EXPECT_TRUE(left_in_out().empty()) << "a refused archive left " << left_in_out().front();
    EXPECT_NE(e.find("data.zip"), std::string::npos) << e;
    return e;
  }

  fs::path dir_;
};

TEST_F(ZipExtract, UnpacksStoredAndDeflatedEntries) {
  const std::string text = repeated("0 0.5 0.5 0.25 0.25\n", 500);
  const std::string path = archive({{"coco/", ""},
                                    {"coco/labels/a.txt", text, 0, 0, false, true},
                                    {"coco/images/a.jpg", std::string("\xff\xd8\xff\xe0 jpeg", 9)},
                                    {"coco/empty.txt", "", 0, 0, false, true},
                                    {"README.txt", "hello", 0, 0, false, true},
                                    {"__MACOSX/coco/._a.jpg", "resource fork"},
                                    {"coco/.DS_Store", "finder"}});
  const std::vector<std::string> made = kestrel::unzip_file(path, (dir_ / "out").string());
  EXPECT_EQ(made, (std::vector<std::string>{"README.txt", "coco"}));
  EXPECT_EQ(read_all(dir_ / "out/coco/labels/a.txt"), text);
  EXPECT_EQ(read_all(dir_ / "out/coco/images/a.jpg"), std::string("\xff\xd8\xff\xe0 jpeg", 9));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "out/coco/empty.txt"));
  EXPECT_EQ(read_all(dir_ / "out/README.txt"), "hello");
  EXPECT_FALSE(fs::exists(dir_ / "out/__MACOSX"));
  EXPECT_FALSE(fs::exists(dir_ / "out/coco/.DS_Store"));
  EXPECT_EQ(left_in_out().size(), 2u) << "the unpacking folder was left behind";
}

TEST_F(ZipExtract, RefusesNamesThatLeaveTheFolder) {
  for (const std::string name : {"../evil.txt", "coco/../../evil.txt", "/etc/evil", "C:/evil", "..", "./"}) {
    const std::string e = refusal({{"coco/ok.txt", "ok"}, {name, "x"}});
    EXPECT_NE(e.find("'" + name + "'"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(dir_ / "evil.txt"));
  EXPECT_EQ(kestrel::safe_entry_path("a/./b//c.txt", "z.zip"), fs::path("a/b/c.txt"));
}

// Names that differ only by ./ or // unpack to one file: refused as exact duplicates are (the
// second would silently overwrite the first, issue 42).
TEST_F(ZipExtract, RefusesNamesThatUnpackToTheSameFile) {
  for (const std::string twin : {"./coco/a.txt", "coco//a.txt", "coco/./a.txt"}) {
    const std::string e = refusal({{"coco/a.txt", "first"}, {twin, "second"}});
    EXPECT_NE(e.find("unpacks to coco/a.txt, as an earlier entry does"), std::string::npos) << e;
  }
}

// A disk that fills during an unpack (issue 42): refused up front when the entries' sizes do not
// fit the free space, and where they are not checked (or the space goes while writing), the
// failed write names the file and the reason, and the destination is left as it was. The
// destination is a 256 KB tmpfs; the case skips where nothing can be mounted.
TEST_F(ZipExtract, ADiskThatFillsLeavesNothingBehind) {
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  if (std::system(("mount -t tmpfs -o size=256k tmpfs '" + small.string() + "' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)";
  const std::string path = archive({{"coco/a.bin", std::string(1 << 20, 'x'), 0, 0, false, true}});
  const std::string up_front = error_of([&] { kestrel::unzip_file(path, small.string()); });
  kestrel::UnzipLimits unchecked;
  unchecked.check_free_space = false;
  const std::string while_writing = error_of([&] { kestrel::unzip_file(path, small.string(), unchecked); });
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(small)) left.push_back(e.path().filename().string());
  std::system(("umount '" + small.string() + "'").c_str());
  EXPECT_NE(up_front.find("it needs 1048576 bytes and the disk has"), std::string::npos) << up_front;
  EXPECT_NE(while_writing.find("a.bin"), std::string::npos) << while_writing;
  EXPECT_NE(while_writing.find("No space left on device"), std::string::npos) << while_writing;
  EXPECT_TRUE(left.empty()) << left.front();
}

// A dataset archive's refusals speak of archives, not of torch.save (issue 42).
TEST_F(ZipExtract, AnEncryptedDatasetArchiveIsRefusedWithoutTorchSave) {
  ZipInput locked{"coco/a.txt", "x"};
  locked.flags = 1;
  const std::string e = refusal({locked});
  EXPECT_NE(e.find("is encrypted; Kestrel reads only unencrypted archives: decrypt it first"), std::string::npos) << e;
  EXPECT_EQ(e.find("torch.save"), std::string::npos) << e;
}

TEST_F(ZipExtract, RefusesLinks) {
  const std::string e = refusal({{"coco/link", "/etc/passwd", 0, 0, false, false, -1, 0120777}});
  EXPECT_NE(e.find("symbolic link"), std::string::npos) << e;
}

TEST_F(ZipExtract, RefusesAnEntryThatInflatesToMoreThanItDeclares) {
  // A bomb's trick: a tiny declared size over a large deflate stream.
  const std::string e = refusal({{"coco/bomb.txt", std::string(1 << 20, 'a'), 0, 0, false, true, 1000}});
  EXPECT_NE(e.find("inflates to more than the 1000 bytes"), std::string::npos) << e;
}

TEST_F(ZipExtract, RefusesDeclaredSizesBeyondTheLimitBeforeWriting) {
  kestrel::UnzipLimits limits;
  limits.max_bytes = 1000;
  const std::string e = refusal({{"coco/a.txt", std::string(600, 'a'), 0, 0, false, true},
                                 {"coco/b.txt", std::string(600, 'b'), 0, 0, false, true}},
                                limits);
  EXPECT_NE(e.find("more than 1000 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("coco/b.txt"), std::string::npos) << e;
}

TEST_F(ZipExtract, RefusesDamage) {
  EXPECT_NE(refusal({{"coco/a.txt", repeated("abc", 1000), 0, 0, true, true}}).find("CRC-32"), std::string::npos);
  EXPECT_NE(refusal({{"coco/a.txt", repeated("abc", 1000), 0, 0, false, true, 5000}}).find("inflates to 3000 bytes"),
            std::string::npos);
  // A stored entry's bytes that are no deflate stream, labelled deflated.
  EXPECT_NE(refusal({{"coco/a.txt", "\xff\xff\xff\xff not deflate", 8}}).find("does not inflate"), std::string::npos);
  EXPECT_NE(refusal({{"coco/a.txt", "abc", 12}}).find("compression method 12"), std::string::npos);
}

TEST_F(ZipExtract, RefusesADestinationThatExists) {
  fs::create_directories(dir_ / "out/coco/labels");
  const std::string path = archive({{"coco/images/a.jpg", "x"}});
  const std::string e = error_of([&] { kestrel::unzip_file(path, (dir_ / "out").string()); });
  EXPECT_NE(e.find("already exists"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "out/coco/images"));
  EXPECT_EQ(left_in_out(), std::vector<std::string>{"coco"});
}

// An unpack that was killed leaves its folder `data.unzip.tmp.<pid>.<n>`: the next unpack of the
// same archive removes it once that process is gone, and leaves a live process's folder alone.
TEST_F(ZipExtract, RemovesTheFolderOfAKilledUnpack) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const fs::path killed = dir_ / "out" / ("data.unzip.tmp." + std::to_string(dead) + ".0");
  const fs::path running = dir_ / "out" / ("data.unzip.tmp." + std::to_string(::getppid()) + ".3");
  const fs::path other = dir_ / "out" / ("other.unzip.tmp." + std::to_string(dead) + ".0");
  for (const fs::path& p : {killed, running, other}) {
    fs::create_directories(p / "coco/images");
    kestrel::write_file_atomic((p / "coco/images/half.jpg").string(), "partial");
  }
  kestrel::unzip_file(archive({{"coco/images/a.jpg", "x"}}), (dir_ / "out").string());
  EXPECT_FALSE(fs::exists(killed));
  EXPECT_TRUE(fs::exists(running)) << "the folder of an unpack that is still running";
  EXPECT_TRUE(fs::exists(other)) << "another archive's folder";
  EXPECT_EQ(read_all(dir_ / "out/coco/images/a.jpg"), "x");
}

TEST_F(ZipExtract, ReadsADeflatedEntryInPieces) {
  const std::string text = repeated("kestrel ", 200000);  // 1.6 MB: several output chunks
  const std::string bytes = make_zip({{"a.txt", text, 0, 0, false, true}});
  const kestrel::ZipArchive zip = kestrel::ZipArchive::parse(bytes, "a.zip", kestrel::ZipMethods::StoredOrDeflated);
  std::string out;
  int pieces = 0;
  kestrel::read_zip_entry(zip, zip.entries()[0], [&](std::string_view piece) {
    out += piece;
    ++pieces;
  });
  EXPECT_EQ(out, text);
  EXPECT_GT(pieces, 1);
  EXPECT_LT(zip.entries()[0].size, text.size() / 100) << "not deflated";
  // The torch.save reading still refuses it, and data() will not hand out compressed bytes.
  EXPECT_NE(error_of([&] { kestrel::ZipArchive::parse(bytes, "a.pt"); }).find("is compressed (method 8)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { zip.data(zip.entries()[0]); }).find("is deflated"), std::string::npos);
}

}  // namespace
