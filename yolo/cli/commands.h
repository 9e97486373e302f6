// The CLI's subcommands. Each takes the arguments after its name and returns the exit status;
// errors are thrown (kestrel::Error: exit 1; cli::UsageError: usage and exit 2).
#pragma once
#include <string>
#include <vector>

#include "yolo/cli/args.h"
#include "yolo/train/train_options.h"

namespace kestrel::cli {

struct Command {
  const char* name;
  const char* summary;
  const char* usage;
  int (*run)(const std::vector<std::string>& args);
  const FlagTable* flags;  // every flag it takes, as --help lists them
  // A family's subcommands (`kestrel classify train|val|predict`, `kestrel segment predict`),
  // whose run() handles --help and each subcommand's usage errors itself; null for a plain command.
  const std::vector<const Command*>* subcommands = nullptr;
};

// Every command, in the order the overview lists them.
const std::vector<const Command*>& all_commands();

// A command's --help: its usage, then one line per flag.
std::string command_help(const Command& command);

int run_model(const std::vector<std::string>& args);
int run_demo(const std::vector<std::string>& args);
int run_step(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_val(const std::vector<std::string>& args);
int run_detect(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_env(const std::vector<std::string>& args);
int run_classify(const std::vector<std::string>& args);
int run_classify_train(const std::vector<std::string>& args);
int run_classify_val(const std::vector<std::string>& args);
int run_classify_predict(const std::vector<std::string>& args);
int run_segment(const std::vector<std::string>& args);
int run_segment_predict(const std::vector<std::string>& args);
int run_segment_val(const std::vector<std::string>& args);
int run_segment_train(const std::vector<std::string>& args);
// `kestrel train` and `kestrel segment train`: one command over the task's option table.
int run_training(const std::vector<std::string>& args, yolo::TrainTaskKind task);

extern const Command kModelCommand;
extern const Command kDemoCommand;
extern const Command kStepCommand;
extern const Command kTrainCommand;
extern const Command kValCommand;
extern const Command kDetectCommand;
extern const Command kExportCommand;
extern const Command kEnvCommand;
extern const Command kClassifyCommand;
const std::vector<const Command*>& classify_commands();
extern const Command kClassifyTrainCommand;
extern const Command kClassifyValCommand;
extern const Command kClassifyPredictCommand;
extern const Command kSegmentCommand;
const std::vector<const Command*>& segment_commands();
extern const Command kSegmentPredictCommand;
extern const Command kSegmentValCommand;
extern const Command kSegmentTrainCommand;

}  // namespace kestrel::cli
