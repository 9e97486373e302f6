// A fixture for the download tests: `kestrel <args>` run from an empty work folder, with HOME
// inside the scratch folder (nothing cached elsewhere is used), downloads pointed at a mirror
// (KESTREL_DOWNLOAD_MIRROR), usually a loopback server the test starts.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/support/cli.h"
#include "tests/support/http_server.h"

namespace kestrel::testing {

class EmptyFolderRun : public ::testing::Test {
 protected:
  explicit EmptyFolderRun(const std::string& tag)
      : root_(std::filesystem::temp_directory_path() /
              ("kestrel_" + tag + "_" + std::to_string(::getpid()))) {}
  void SetUp() override {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "work");
    std::filesystem::create_directories(root_ / "home");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  CliResult run(const std::string& mirror, const std::string& args) {
    return run_command("cd '" + (root_ / "work").string() + "' && HOME='" + (root_ / "home").string() +
                       "' KESTREL_DOWNLOAD_MIRROR=" + mirror + " KESTREL_DOWNLOAD_TIMEOUT=10 " +
                       kestrel_binary().string() + " " + args);
  }

  // A shell script run the same way (HOME and the mirror exported to every command in it).
  CliResult run_script(const std::string& mirror, const std::string& script) {
    return run_command("cd '" + (root_ / "work").string() + "' && export HOME='" + (root_ / "home").string() +
                       "' KESTREL_DOWNLOAD_MIRROR=" + mirror + " KESTREL_DOWNLOAD_TIMEOUT=10 && { " + script + "; }");
  }

  std::filesystem::path root_;
  LoopbackHttpServer server_;
};

}  // namespace kestrel::testing
