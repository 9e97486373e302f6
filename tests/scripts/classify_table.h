// The table `classify val` and the reference's classify/val.py print ("Class Images top1_acc
// top5_acc", then a row for all and each class): its rows as "name images top1 top5", in order.
#pragma once
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace kestrel::testing {

inline std::vector<std::string> classify_table_rows(const std::string& text) {
  static const std::regex re(R"(^\s*(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$)");
  std::vector<std::string> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
    std::smatch m;
    if (std::regex_match(line, m, re) && m[1] != "Class")
      rows.push_back(m[1].str() + " " + m[2].str() + " " + m[3].str() + " " + m[4].str());
  }
  return rows;
}

}  // namespace kestrel::testing
