#include "yolo/cli/commands.h"

namespace kestrel::cli {

const std::vector<const Command*>& all_commands() {
  static const std::vector<const Command*> commands = {&kTrainCommand,  &kValCommand,   &kDetectCommand,
                                                       &kExportCommand, &kModelCommand, &kStepCommand,
                                                       &kDemoCommand,   &kEnvCommand,
                                                       &kClassifyCommand, &kSegmentCommand};
  return commands;
}

std::string command_help(const Command& command) {
  std::string out = command.usage;
  if (command.flags && !command.flags->empty()) out += "\nflags:\n" + flags_help(*command.flags);
  return out;
}

}  // namespace kestrel::cli
