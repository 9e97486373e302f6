// The flag parser: integer flags are checked against the type they end up in, so an overflowing
// value is a usage error (exit 2) rather than a silent wrap-around.
#include "yolo/cli/args.h"

#include <climits>

#include "tests/support/cli.h"
#include "tests/support/testing.h"

using kestrel::cli::Args;
using kestrel::cli::UsageError;
using kestrel::testing::run_kestrel;

namespace {

const std::map<std::string, bool> kSpec = {{"epochs", true}, {"nc", true}, {"rect", false}};

std::string usage_error_of(const std::vector<std::string>& argv, const char* flag) {
  try {
    Args(argv, kSpec).get_int32(flag, 0);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Args, Int32FlagsInRangeAreRead) {
  const Args args({"--epochs", "2147483647", "--nc=-2147483648", "--rect"}, kSpec);
  EXPECT_EQ(args.get_int32("epochs", 1), INT_MAX);
  EXPECT_EQ(args.get_optional_int32("nc"), INT_MIN);
  EXPECT_EQ(Args({}, kSpec).get_int32("epochs", 300), 300);
  EXPECT_EQ(Args({}, kSpec).get_optional_int32("nc"), std::nullopt);
  EXPECT_TRUE(args.has("rect"));
}

TEST(Args, Int32FlagsOutOfRangeAreUsageErrors) {
  // 4294967304 = 2^32 + 8 would wrap to 8 in an int.
  EXPECT_EQ(usage_error_of({"--epochs", "4294967304"}, "epochs"),
            "--epochs 4294967304 is out of range (at most 2147483647)");
  EXPECT_NE(usage_error_of({"--epochs", "-2147483649"}, "epochs"), "no error");
  EXPECT_THROW(Args({"--nc", "99999999999"}, kSpec).get_optional_int32("nc"), UsageError);
  // Beyond int64 too, and not a number at all.
  EXPECT_NE(usage_error_of({"--epochs", "99999999999999999999"}, "epochs"), "no error");
  EXPECT_NE(usage_error_of({"--epochs", "12x"}, "epochs"), "no error");
}

TEST(Args, CommandsRefuseOverflowingIntegersWithExitStatus2) {
  for (const char* args : {"train --batch-size 4294967304", "train --epochs 99999999999",
                           "train --img-size 4294967936", "val --weights w --batch-size 4294967304",
                           "detect --weights w --source s --img-size 4294967936",
                           "model --cfg models/yolov5n.yaml --nc 4294967297"}) {
    const kestrel::testing::CliResult r = run_kestrel(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("is out of range"), std::string::npos) << args << "\n" << r.out;
  }
}

// argparse's abbreviations, as the reference's users type them: a unique prefix names its flag,
// an ambiguous one is a usage error listing the candidates.
TEST(Args, UniquePrefixesNameTheirFlag) {
  const std::map<std::string, bool> spec = {{"batch-size", true}, {"bucket-cap-mb", true}, {"img-size", true},
                                            {"rect", false}};
  const Args args({"--batch", "8", "--img_s=320", "--re"}, spec);
  EXPECT_EQ(args.get_int32("batch-size", 0), 8);
  EXPECT_EQ(args.get_int32("img-size", 0), 320);
  EXPECT_TRUE(args.has("rect"));
  try {
    Args({"--b", "8"}, spec);
    ADD_FAILURE() << "--b is ambiguous";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch-size, --bucket-cap-mb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Args({"--batch", "8", "--batch-size", "9"}, spec), UsageError);  // the same flag twice
  EXPECT_THROW(Args({"--size", "8"}, spec), UsageError);                       // not a prefix
}

// An exact flag name wins over a longer flag it is a prefix of (--bucket is not --bucket-cap-mb),
// as in argparse; a shorter prefix of both is ambiguous.
TEST(Args, AnExactNameWinsOverLongerFlags) {
  const std::map<std::string, bool> spec = {{"bucket", true}, {"bucket-cap-mb", true}};
  const Args args({"--bucket", "my-bucket", "--bucket-cap-mb", "8"}, spec);
  EXPECT_EQ(args.get("bucket", ""), "my-bucket");
  EXPECT_EQ(args.get_double("bucket-cap-mb", 0), 8.0);
  EXPECT_EQ(Args({"--bucket", "b"}, spec).has("bucket-cap-mb"), false);
  EXPECT_THROW(Args({"--buck", "b"}, spec), UsageError);
}

// --img, --imgsz and --img-size are one flag, as in the reference's argparse: each spelling and
// its prefixes (--im, --imgs) name it, on every command that takes an image size, and `kestrel val
// --img 320` / `kestrel export --img 320` are no longer ambiguous.
TEST(Args, ImageSizeSpellingsAreOneFlag) {
  const std::map<std::string, bool> spec = {{"img-size", true}, {"iou-thres", true}};
  for (const char* spelling : {"--img", "--imgsz", "--img-size", "--img_size", "--im", "--imgs"})
    EXPECT_EQ(Args({spelling, "320"}, spec).get_int32("img-size", 0), 320) << spelling;
  EXPECT_THROW(Args({"--i", "320"}, spec), UsageError);  // also --iou-thres
  EXPECT_THROW(Args({"--img", "320", "--imgsz", "640"}, spec), UsageError);  // one flag given twice
  EXPECT_THROW(Args({"--img", "320"}, {{"rect", false}}), UsageError);  // a command without image size
  for (const char* command : {"val", "export"}) {
    const auto r = run_kestrel(std::string(command) + " --img 320 --weights /nonexistent.safetensors");
    EXPECT_EQ(r.out.find("ambiguous"), std::string::npos) << command << ": " << r.out;
    EXPECT_NE(r.code, 2) << command << ": " << r.out;  // past the flags, refused for the missing file
  }
}

// A prefix that names one of the reference's flags and one of Kestrel's own names the reference's,
// as the reference's argparse (which has only its own) reads it.
TEST(Args, PrefixesPreferTheReferencesFlags) {
  const std::map<std::string, bool> spec = {{"name", true}, {"nc", true}, {"nosave", false}, {"cfg", true}};
  EXPECT_EQ(Args({"--n", "exp"}, {{"name", true}, {"nc", true}}, {}, {"nc"}).get("name", ""), "exp");
  EXPECT_THROW(Args({"--n", "exp"}, {{"name", true}, {"nc", true}}), UsageError);  // no own flags: ambiguous
  EXPECT_THROW(Args({"--n", "exp"}, spec, {}, {"nc", "cfg"}), UsageError);          // name and nosave: ambiguous
  EXPECT_EQ(Args({"--nc", "3"}, spec, {}, {"nc", "cfg"}).get_int32("nc", 0), 3);     // own flags still work
}

// Every unique prefix of the reference's flags, and --img, on val, detect and export: each command
// gets past its flags (and fails only for the missing weights, exit 1, never a usage error).
TEST(Args, ReferencePrefixesWorkOnEveryInferenceCommand) {
  const std::string w = " --weig /nonexistent.pt";
  for (const std::string& command : {
           "val" + w + " --dat synthetic --img 320 --batch 4 --conf 0.1 --iou 0.5 --max 10 --ta val --dev cpu"
               " --work 1 --sing --aug --verb --save-t --save-con --save-j --proj /tmp/p --n exp --exist --hal --dn",
           "val" + w + " --imgsz 320 --batch-size 4",
           "detect" + w + " --sou x.jpg --img 480 640 --conf 0.1 --iou 0.5 --max 10 --dev cpu --save-t --save-co"
               " --save-cr --nos --cla 0 2 --agn --aug --vis --proj /tmp/p --na exp --ex --line 2 --hide-l --hide-c"
               " --hal --dn --vid 1 --dat coco128.yaml",
           "detect" + w + " --source x.jpg --imgsz 320",
           "export" + w + " --inc onnx --img 480 640 --batch 1 --dev cpu --ops 12 --dyn",
           "export" + w + " --imgsz 320 --half --device cpu"}) {
    const auto r = run_kestrel(command);
    EXPECT_EQ(r.out.find("ambiguous"), std::string::npos) << command << ": " << r.out;
    EXPECT_EQ(r.out.find("unknown flag"), std::string::npos) << command << ": " << r.out;
    if (command.find("--half --device cpu") != std::string::npos)
      EXPECT_EQ(r.code, 2) << r.out;  // export refuses --half without a GPU before opening anything
    else
      EXPECT_EQ(r.code, 1) << command << ": " << r.out;
  }
  // As argparse in the reference's export.py: --op could be --opset or --optimize.
  const auto op = run_kestrel("export" + w + " --op 12");
  EXPECT_EQ(op.code, 2) << op.out;
  EXPECT_NE(op.out.find("ambiguous flag --op: could be --opset, --optimize"), std::string::npos) << op.out;
}

// argparse's nargs='+': `--classes 0 2 3` takes the words up to the next flag; commas read the same.
TEST(Args, ListFlagsTakeSeveralWords) {
  const std::map<std::string, bool> spec = {{"classes", true}, {"img-size", true}, {"nosave", false}};
  const Args args({"--classes", "0", "2", "3", "--nosave", "--img-size", "480,640"}, spec, {"classes", "img-size"});
  EXPECT_EQ(args.get_int_list("classes"), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(args.get_int_list("img-size"), (std::vector<int>{480, 640}));
  EXPECT_TRUE(args.has("nosave"));
  EXPECT_TRUE(Args({}, spec, {"classes"}).get_int_list("classes").empty());
  // Not a list flag: a second word is an unexpected argument.
  EXPECT_THROW(Args({"--img-size", "480", "640"}, spec, {"classes"}), UsageError);
  try {
    Args({"--classes", "0", "x"}, spec, {"classes"}).get_int_list("classes");
    ADD_FAILURE() << "accepted a word that is no integer";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--classes expects integers like 0 or 0 2 3, got '0,x'"),
              std::string::npos) << e.what();
  }
}

// A flag table is the parser's spec, the --help lines and the start-up echo.
TEST(FlagTable, SpecHelpAndEcho) {
  const kestrel::cli::FlagTable table = {
      {"weights", "W.pt", nullptr, "model weights"},
      {"img-size", "PIXELS", "640", "inference size"},
      {"conf-thres", "C", "0.25", "confidence threshold"},
      {"device", "cpu|0", "", "device"},
      {"classes", "C [C ...]", nullptr, "classes to keep"},
      {"save-txt", nullptr, nullptr, "save labels"}};
  const std::map<std::string, bool> spec = kestrel::cli::flag_spec(table);
  EXPECT_EQ(spec.size(), 6u);
  EXPECT_TRUE(spec.at("weights"));
  EXPECT_FALSE(spec.at("save-txt"));
  EXPECT_EQ(kestrel::cli::flags_help(table),
            "  --weights W.pt       model weights\n"
            "  --img-size PIXELS    inference size (default 640)\n"
            "  --conf-thres C       confidence threshold (default 0.25)\n"
            "  --device cpu|0       device\n"
            "  --classes C [C ...]  classes to keep\n"
            "  --save-txt           save labels\n");
  const Args given({"--weights", "a.pt", "--img", "320", "--save-txt"}, spec, {"classes", "img-size"});
  EXPECT_EQ(given.echo(table, {"classes", "img-size"}),
            "weights=a.pt, imgsz=[320, 320], conf_thres=0.25, device=, classes=None, save_txt=True");
  const Args lists({"--classes", "0", "2", "--img-size", "480", "640"}, spec, {"classes", "img-size"});
  EXPECT_EQ(lists.echo(table, {"classes", "img-size"}),
            "weights=None, imgsz=[480, 640], conf_thres=0.25, device=, classes=[0, 2], save_txt=False");
  EXPECT_EQ(lists.echo(table), "weights=None, imgsz=480,640, conf_thres=0.25, device=, classes=0,2, save_txt=False");
}
