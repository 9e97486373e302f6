// The pickle writer (io/pickle_writer.h) read back by Kestrel's own unpickler (io/pickle.h): every
// kind of value comes back as written, shared nodes come back as one shared value, and the
// torch zip container (io/torch_zip_writer.h) is read by io/torch_file.h with its storages
// on 64-byte boundaries.
#include "io/pickle_writer.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "io/pickle.h"
#include "io/torch_file.h"
#include "io/torch_zip_writer.h"
#include "io/zip_archive.h"
#include "tests/support/testing.h"

namespace {

namespace pk = kestrel::pickle;
using kestrel::pickle::Value;
using kestrel::testing::error_of;

bool allow_all(const std::string&) { return true; }

pk::Document round_trip(const pk::NodePtr& root) {
  return pk::parse(pk::dump(root), allow_all, "written.pkl");
}

TEST(PickleWriter, WritesScalars) {
  const int64_t ints[] = {0,           1,          255,        256,       65535,     65536,  -1,
                          -129,        INT32_MIN,  INT32_MAX,  int64_t{1} << 31, -(int64_t{1} << 31) - 1,
                          int64_t{1} << 40, -(int64_t{1} << 40), std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int64_t>::min(), 127, 128, -128, 32767, 32768};
  std::vector<pk::NodePtr> items;
  for (int64_t i : ints) items.push_back(pk::integer(i));
  items.push_back(pk::none());
  items.push_back(pk::boolean(true));
  items.push_back(pk::boolean(false));
  items.push_back(pk::real(-1.5e-300));
  items.push_back(pk::real(0.03));
  items.push_back(pk::str("héron"));
  items.push_back(pk::str(""));
  items.push_back(pk::bytes(std::string("\0\x01\xff", 3)));
  items.push_back(pk::bytes(std::string(300, 'b')));
  const pk::Document doc = round_trip(pk::list(items));
  const Value& root = doc.root();
  ASSERT_TRUE(root.is(Value::Kind::List));
  ASSERT_EQ(root.items.size(), items.size());
  size_t k = 0;
  for (int64_t i : ints) {
    ASSERT_TRUE(root.items[k]->is(Value::Kind::Int)) << i;
    EXPECT_EQ(root.items[k++]->integer, i);
  }
  EXPECT_TRUE(root.items[k++]->is(Value::Kind::None));
  EXPECT_TRUE(root.items[k]->is(Value::Kind::Bool) && root.items[k++]->boolean);
  EXPECT_TRUE(root.items[k]->is(Value::Kind::Bool) && !root.items[k++]->boolean);
  EXPECT_EQ(root.items[k++]->real, -1.5e-300);
  EXPECT_EQ(root.items[k++]->real, 0.03);
  EXPECT_EQ(root.items[k++]->text, "héron");
  EXPECT_EQ(root.items[k++]->text, "");
  EXPECT_TRUE(root.items[k]->is(Value::Kind::Bytes));
  EXPECT_EQ(root.items[k++]->text, std::string("\0\x01\xff", 3));
  EXPECT_EQ(root.items[k++]->text, std::string(300, 'b'));
}

TEST(PickleWriter, WritesContainersOfEverySize) {
  for (size_t n : {0, 1, 2, 3, 4, 999, 1000, 1001, 2500}) {
    std::vector<std::string> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = std::string("k").append(std::to_string(i));
    std::vector<pk::NodePtr> items;
    std::vector<std::pair<pk::NodePtr, pk::NodePtr>> entries;
    for (size_t i = 0; i < n; ++i) {
      items.push_back(pk::integer(static_cast<int64_t>(i)));
      entries.emplace_back(pk::str(keys[i]), pk::integer(static_cast<int64_t>(i) * 2));
    }
    const pk::Document doc =
        round_trip(pk::tuple({pk::list(items), pk::tuple(items), pk::dict(entries), pk::ordered_dict(entries)}));
    const Value& root = doc.root();
    ASSERT_TRUE(root.is(Value::Kind::Tuple));
    ASSERT_EQ(root.items.size(), 4u);
    EXPECT_TRUE(root.items[0]->is(Value::Kind::List));
    EXPECT_TRUE(root.items[1]->is(Value::Kind::Tuple));
    EXPECT_TRUE(root.items[2]->is(Value::Kind::Dict));
    EXPECT_TRUE(root.items[3]->is_call("collections.OrderedDict")) << n;
    EXPECT_TRUE(root.items[3]->args->items.empty());
    for (int c = 0; c < 2; ++c) {
      ASSERT_EQ(root.items[c]->items.size(), n);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(root.items[c]->items[i]->integer, static_cast<int64_t>(i));
    }
    for (int c = 2; c < 4; ++c) {
      ASSERT_EQ(root.items[c]->entries.size(), n);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(root.items[c]->entries[i].first->text, keys[i]);
        EXPECT_EQ(root.items[c]->entries[i].second->integer, static_cast<int64_t>(i) * 2);
      }
    }
  }
}

TEST(PickleWriter, WritesObjectsGlobalsAndPersistentIds) {
  pk::NodePtr state = pk::dict();
  state->set("training", pk::boolean(true)).set("eps", pk::real(1e-3));
  pk::NodePtr module = pk::new_object(pk::global("torch.nn.modules.batchnorm.BatchNorm2d"), pk::tuple(), state);
  pk::NodePtr storage = pk::persistent_id(
      pk::tuple({pk::str("storage"), pk::global("torch.HalfStorage"), pk::str("0"), pk::str("cpu"), pk::integer(4)}));
  pk::NodePtr tensor = pk::call(pk::global("torch._utils._rebuild_tensor_v2"),
                                pk::tuple({storage, pk::integer(0), pk::tuple({pk::integer(4)}),
                                           pk::tuple({pk::integer(1)}), pk::boolean(false), pk::ordered_dict()}));
  pk::NodePtr set = pk::call(pk::global("__builtin__.set"), pk::tuple({pk::list()}));
  const pk::Document doc = round_trip(pk::list({module, tensor, set, pk::global("models.yolo.Detect")}));
  const Value& root = doc.root();
  const Value& m = *root.items[0];
  ASSERT_TRUE(m.is_call("torch.nn.modules.batchnorm.BatchNorm2d"));
  ASSERT_TRUE(m.state && m.state->is(Value::Kind::Dict));
  EXPECT_TRUE(m.state->find("training")->boolean);
  EXPECT_EQ(m.state->find("eps")->real, 1e-3);
  const Value& t = *root.items[1];
  ASSERT_TRUE(t.is_call("torch._utils._rebuild_tensor_v2"));
  EXPECT_EQ(t.state, nullptr);
  ASSERT_EQ(t.args->items.size(), 6u);
  const Value& pid = *t.args->items[0];
  ASSERT_TRUE(pid.is(Value::Kind::PersistentId));
  EXPECT_EQ(pid.id->items[1]->text, "torch.HalfStorage");
  EXPECT_EQ(pid.id->items[4]->integer, 4);
  EXPECT_TRUE(t.args->items[5]->is_call("collections.OrderedDict"));
  EXPECT_TRUE(root.items[2]->is_call("__builtin__.set"));
  EXPECT_TRUE(root.items[3]->is(Value::Kind::Global));
  EXPECT_EQ(root.items[3]->text, "models.yolo.Detect");
}

TEST(PickleWriter, SharedNodesAreWrittenOnceAndComeBackShared) {
  pk::NodePtr act_state = pk::dict();
  act_state->set("inplace", pk::boolean(true));
  pk::NodePtr act = pk::new_object(pk::global("torch.nn.modules.activation.SiLU"), pk::tuple(), act_state);
  pk::NodePtr shared_list = pk::list({pk::integer(7)});
  pk::NodePtr shared_tuple = pk::tuple({pk::integer(1), pk::integer(2), pk::integer(3), pk::integer(4)});
  std::vector<pk::NodePtr> convs;
  for (int i = 0; i < 300; ++i) {  // past 256 memo entries: LONG_BINPUT / LONG_BINGET
    pk::NodePtr s = pk::dict();
    s->set("act", act).set("l", shared_list).set("t", shared_tuple).set("name" + std::to_string(i), pk::str("x"));
    convs.push_back(pk::new_object(pk::global("models.common.Conv"), pk::tuple(), s));
  }
  const std::string bytes = pk::dump(pk::list(convs));
  // The SiLU's class name is written once: each later Conv refers to the memo.
  size_t count = 0;
  for (size_t at = bytes.find("SiLU"); at != std::string::npos; at = bytes.find("SiLU", at + 1)) ++count;
  EXPECT_EQ(count, 1u);
  const pk::Document doc = pk::parse(bytes, allow_all, "shared.pkl");
  const Value& root = doc.root();
  ASSERT_EQ(root.items.size(), 300u);
  const Value* first_act = root.items[0]->state->find("act");
  ASSERT_TRUE(first_act->is_call("torch.nn.modules.activation.SiLU"));
  for (const Value* conv : root.items) {
    EXPECT_EQ(conv->state->find("act"), first_act);
    EXPECT_EQ(conv->state->find("l"), root.items[0]->state->find("l"));
    EXPECT_EQ(conv->state->find("t"), root.items[0]->state->find("t"));
  }
  EXPECT_EQ(root.items[299]->state->find("name299")->text, "x");
  EXPECT_EQ(first_act->state->find("inplace")->boolean, true);
}

TEST(PickleWriter, RefusesWhatPickleCannotWrite) {
  EXPECT_NE(error_of([] { pk::dump(pk::global("nodot")); }).find("module.name"), std::string::npos);
  EXPECT_NE(error_of([] { pk::dump(pk::call(pk::global("a.b"), pk::list())); }).find("no tuple"), std::string::npos);
  pk::NodePtr t = pk::tuple();
  pk::NodePtr l = pk::list({t});
  t->items.push_back(l);  // a tuple holding a list holding the tuple
  EXPECT_NE(error_of([&] { pk::dump(t); }).find("cycle"), std::string::npos);
  t->items.clear();  // break the cycle, so the nodes can be freed
  pk::NodePtr self = pk::list();
  self->items.push_back(self);  // a list holding itself: as Python writes it, through the memo
  const pk::Document doc = round_trip(self);
  EXPECT_EQ(doc.root().items[0], &doc.root());
  self->items.clear();
}

TEST(TorchZipWriter, WritesWhatTorchFileReads) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("kestrel_torch_zip_writer_" + std::to_string(::getpid()) + ".pt");
  const std::string values("\x00\x3c\x00\x40\x00\x42", 6);  // float16 1, 2, 3
  pk::NodePtr tensor = pk::call(
      pk::global("torch._utils._rebuild_tensor_v2"),
      pk::tuple({pk::persistent_id(pk::tuple({pk::str("storage"), pk::global("torch.HalfStorage"), pk::str("0"),
                                              pk::str("cpu"), pk::integer(3)})),
                 pk::integer(0), pk::tuple({pk::integer(3)}), pk::tuple({pk::integer(1)}), pk::boolean(false),
                 pk::ordered_dict()}));
  pk::NodePtr root = pk::dict();
  root->set("t", tensor);
  {
    kestrel::TorchZipWriter w(path.string(), "ckpt");
    w.write_pickle(pk::dump(root));
    w.add_storage("0", values);
    w.add_storage("1", "");
    w.commit();
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  const kestrel::ZipArchive zip = kestrel::ZipArchive::parse(bytes, path.string());
  std::vector<std::string> names;
  for (const kestrel::ZipEntry& e : zip.entries()) {
    names.push_back(e.name);
    const std::string_view data = zip.data(e);
    EXPECT_EQ(static_cast<size_t>(data.data() - bytes.data()) % kestrel::kTorchZipAlignment, 0u) << e.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt/data.pkl", "ckpt/byteorder", "ckpt/data/0", "ckpt/data/1",
                                             "ckpt/version"}));
  EXPECT_EQ(zip.data(*zip.find("ckpt/version")), "3\n");
  EXPECT_EQ(zip.data(*zip.find("ckpt/byteorder")), "little");
  const kestrel::TorchFile file = kestrel::TorchFile::parse(bytes, path.string(), [](const std::string&) { return false; });
  const kestrel::TorchTensor t = file.tensor(*file.root().find("t"), "t");
  EXPECT_EQ(t.dtype, "F16");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(t.bytes, values);
  std::filesystem::remove(path);
}

TEST(TorchZipWriter, LeavesNothingWithoutCommit) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kestrel_torch_zip_uncommitted_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    kestrel::TorchZipWriter w((dir / "x.pt").string());
    w.write_pickle(pk::dump(pk::none()));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

}  // namespace
