// The downloader against a loopback server (tests/support/http_server) that serves, redirects,
// fails, stalls and truncates: a good transfer arrives whole with its progress reported; every
// failure leaves no file at the target (nor a temporary beside it), keeps a file already there
// as it was, and names the URL, the reason and the manual alternative.
#include "io/http_download.h"

#include "io/curl_library.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/support/http_server.h"
#include "tests/support/testing.h"

namespace {

namespace fs = std::filesystem;
using kestrel::DownloadOptions;
using kestrel::download_file;
using kestrel::testing::error_of;
using kestrel::testing::LoopbackHttpServer;
using kestrel::testing::temporaries_of;

std::string random_bytes(size_t n) {
  std::mt19937 gen(7);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class HttpDownload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kestrel_http_download_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string target() const { return (dir_ / "file.bin").string(); }

  // The failure's message, after checking that it left nothing at the target.
  std::string failure(const std::string& url, DownloadOptions options = {}) {
    options.manual = "save it by hand as file.bin";
    const std::string e = error_of([&] { download_file(url, target(), options); });
    EXPECT_FALSE(fs::exists(target())) << "a failed download left a file";
    EXPECT_TRUE(temporaries_of(target()).empty()) << "a failed download left a temporary";
    EXPECT_NE(e.find(url), std::string::npos) << e;
    EXPECT_NE(e.find("save it by hand as file.bin"), std::string::npos) << e;
    return e;
  }

  fs::path dir_;
  LoopbackHttpServer server_;
};

TEST_F(HttpDownload, FetchesAWholeFileAndReportsItsProgress) {
  const std::string body = random_bytes(3 << 20);
  server_.serve("/weights.pt", body);
  uint64_t last_done = 0, last_total = 0, finals = 0;
  DownloadOptions options;
  options.progress = [&](uint64_t done, uint64_t total, bool last) {
    EXPECT_GE(done, last_done) << "progress went backwards";
    last_done = done;
    last_total = total;
    finals += last;
  };
  EXPECT_EQ(download_file(server_.url("/weights.pt"), target(), options), body.size());
  EXPECT_EQ(read_all(target()), body);
  EXPECT_EQ(finals, 1u);
  EXPECT_EQ(last_done, body.size());
  EXPECT_EQ(last_total, body.size());
  EXPECT_TRUE(temporaries_of(target()).empty());
}

TEST_F(HttpDownload, FollowsRedirects) {
  server_.serve("/assets/real.bin", "the real bytes");
  server_.redirect("/releases/download/v7.0/file.bin", server_.url("/assets/real.bin"));
  download_file(server_.url("/releases/download/v7.0/file.bin"), target());
  EXPECT_EQ(read_all(target()), "the real bytes");
}

TEST_F(HttpDownload, AnHttpErrorNamesItsStatus) {
  server_.fail("/gone.pt", 404);
  EXPECT_NE(failure(server_.url("/gone.pt")).find("HTTP 404"), std::string::npos);
  server_.fail("/broken.pt", 500);
  EXPECT_NE(failure(server_.url("/broken.pt")).find("HTTP 500"), std::string::npos);
  server_.fail("/moved.pt", 302);  // a redirect that says nowhere: its own body is not the file
  EXPECT_NE(failure(server_.url("/moved.pt")).find("HTTP 302"), std::string::npos);
}

TEST_F(HttpDownload, AStalledTransferFailsAfterTheStallTimeout) {
  server_.stall("/slow.pt", random_bytes(100000), 1000);
  DownloadOptions options;
  options.stall_seconds = 0.5;
  options.stall_advice = "wait longer";
  const auto start = std::chrono::steady_clock::now();
  const std::string e = failure(server_.url("/slow.pt"), options);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find("no data for 0.5 s after 1000 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("wait longer"), std::string::npos) << e;
  EXPECT_LT(took, 10.0) << "the stall timeout did not stop the transfer";
}

TEST_F(HttpDownload, AStallBeforeAnyByteFailsToo) {
  server_.stall("/silent.pt", "abc", 0);
  DownloadOptions options;
  options.stall_seconds = 0.5;
  EXPECT_NE(failure(server_.url("/silent.pt"), options).find("no data for 0.5 s after 0 bytes"), std::string::npos);
}

TEST_F(HttpDownload, ATruncatedTransferIsRefused) {
  server_.truncate("/cut.pt", random_bytes(50000), 20000);
  const std::string e = failure(server_.url("/cut.pt"));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("20000 of 50000 bytes"), std::string::npos) << e;
}

TEST_F(HttpDownload, NoServerNamesCurlsReason) {
  int port = 0;
  {
    LoopbackHttpServer gone;
    port = gone.port();
  }  // closed: nothing listens there now
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/yolov5s.pt";
  const std::string e = failure(url);
  EXPECT_NE(e.find("onnect"), std::string::npos) << e;  // "Couldn't connect" / "Failed to connect"
}

TEST_F(HttpDownload, AFailureKeepsTheFileAlreadyThere) {
  {
    std::ofstream(target(), std::ios::binary) << "old";
  }
  server_.truncate("/cut.pt", random_bytes(5000), 100);
  EXPECT_FALSE(error_of([&] { download_file(server_.url("/cut.pt"), target()); }).empty());
  EXPECT_EQ(read_all(target()), "old");
  EXPECT_TRUE(temporaries_of(target()).empty());
}

TEST_F(HttpDownload, ReadsAFileUrlForAMirrorOnDisk) {
  {
    std::ofstream(dir_ / "mirrored.pt", std::ios::binary) << "from disk";
  }
  download_file("file://" + (dir_ / "mirrored.pt").string(), target());
  EXPECT_EQ(read_all(target()), "from disk");
  fs::remove(target());
  const std::string e = failure("file://" + (dir_ / "absent.pt").string());
  EXPECT_NE(e.find("absent.pt"), std::string::npos) << e;
}

TEST_F(HttpDownload, OnlyHttpHttpsAndFileAreSpoken) {
  const std::string e = error_of([&] { download_file("ftp://127.0.0.1/x", target()); });
  EXPECT_NE(e.find("ftp://127.0.0.1/x"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(target()));
}

// libcurl is opened at the first download (not linked): a machine without it gets a refusal that
// names the library, the package and the manual alternative, not a binary that will not start.
TEST(CurlLibrary, AMissingLibraryIsRefusedWithTheFix) {
  const std::string e = error_of([] { kestrel::open_curl_library("libcurl-absent.so.9", "fetch it by hand"); });
  EXPECT_NE(e.find("libcurl-absent.so.9"), std::string::npos) << e;
  EXPECT_NE(e.find("apt install libcurl4"), std::string::npos) << e;
  EXPECT_NE(e.find("fetch it by hand"), std::string::npos) << e;
}

TEST(CurlLibrary, OpensOnceAndResolvesEveryEntryPoint) {
  const kestrel::CurlLibrary& a = kestrel::curl_library();
  EXPECT_EQ(&a, &kestrel::curl_library());
  EXPECT_NE(a.easy_init, nullptr);
  EXPECT_STREQ(a.easy_strerror(CURLE_OK), "No error");
}

}  // namespace
