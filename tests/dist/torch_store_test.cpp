// The client of PyTorch's TCPStore (dist/torch_store.h) against a real one: a TCPStore served by
// PyTorch from PyPI (the venv scripts/install-torch-venv.sh makes at $KESTREL_TORCH_VENV, default
// /opt/kestrel-torch), as torchrun's agent serves it. Skips, naming the install step, without it.
// Also: a server that is not a TCPStore, and a key that never comes, fail with clear messages.
#include "dist/torch_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/dist/spawn.h"
#include "tests/support/testing.h"

namespace fs = std::filesystem;
using kestrel::testing::error_of;
using namespace std::chrono_literals;

namespace kestrel::dist {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// A Python TCPStore host: sets "a", prints its port, waits for the key Kestrel sets and prints it.
TEST(TorchStoreClient, TalksToPyTorchsTcpStore) {
  const fs::path python = fs::path(env_or("KESTREL_TORCH_VENV", "/opt/kestrel-torch")) / "bin" / "python";
  if (!fs::exists(python))
    GTEST_SKIP() << "no PyTorch venv at " << python << ": run scripts/install-torch-venv.sh";
  const std::string script =
      "import datetime, torch.distributed as d\n"
      "s = d.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=30), wait_for_workers=False)\n"
      "s.set('a', 'hello from python')\n"
      "print(s.port, flush=True)\n"
      "s.wait(['kestrel/x'])\n"
      "print('got', s.get('kestrel/x').decode(), flush=True)\n";
  const fs::path dir = kestrel::testing::temp_dir("torch-store");
  const fs::path file = dir / "host.py";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  const std::string cmd = "LD_LIBRARY_PATH=" + env_or("CUDA_HOME", "/usr/local/cuda") + "/lib64 timeout 120 " +
                          python.string() + " " + file.string() + " 2>&1";
  FILE* host = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(host);
  char line[4096] = {};
  ASSERT_TRUE(std::fgets(line, sizeof line, host));
  const int port = std::atoi(line);
  ASSERT_GT(port, 0) << line;

  TorchStoreClient client("127.0.0.1", port, 1, 20000ms);
  EXPECT_EQ(client.get("/a"), "hello from python");  // PyTorch's clients put "/" before user keys
  // A key nobody sets: the wait gives up after the timeout, naming the key and rank 0.
  const std::string e = error_of([&] { TorchStoreClient("127.0.0.1", port, 1, 500ms).get("/never"); });
  EXPECT_NE(e.find("rank 1: timed out after 500 ms waiting for the key '/never'"), std::string::npos) << e;
  EXPECT_NE(e.find("did rank 0 fail"), std::string::npos) << e;
  client.set("/kestrel/x", "127.0.0.1:4242");
  EXPECT_EQ(client.get("/kestrel/x"), "127.0.0.1:4242");
  EXPECT_EQ(client.local_address(), "127.0.0.1");
  std::string rest;
  while (std::fgets(line, sizeof line, host)) rest += line;
  EXPECT_EQ(::pclose(host), 0) << rest;
  EXPECT_NE(rest.find("got 127.0.0.1:4242"), std::string::npos) << rest;
  fs::remove_all(dir);
}

// A port where something listens but never answers the TCPStore ping.
TEST(TorchStoreClient, RefusesAServerThatIsNoTcpStore) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string e = error_of([&] { TorchStoreClient("127.0.0.1", port, 1, 300ms); });
  EXPECT_NE(e.find("does not answer as PyTorch's TCPStore"), std::string::npos) << e;
  EXPECT_NE(e.find("--master-port"), std::string::npos) << e;
  ::close(fd);
}

TEST(TorchStoreClient, NoAgentFailsWithinTheTimeout) {
  const int port = kestrel::testing::free_port();
  const std::string e = error_of([&] { TorchStoreClient("127.0.0.1", port, 2, 300ms); });
  EXPECT_NE(e.find("rank 2: could not reach torchrun's agent store at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kestrel::dist
