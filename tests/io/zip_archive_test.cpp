// The zip reader on archives built by tests/support/zip_writer: stored entries read back
// byte for byte, plain and ZIP64; what torch.save never writes (compression, encryption), damage
// (a wrong CRC, truncation) and hostile directories are refused, naming the entry.
#include "io/zip_archive.h"

#include "tests/support/testing.h"
#include "tests/support/zip_writer.h"

namespace {

using kestrel::ZipArchive;
using kestrel::testing::error_of;
using kestrel::testing::make_zip;
using kestrel::testing::ZipInput;

const std::vector<ZipInput> kEntries = {{"archive/data.pkl", "\x80\x02}q\x00."},
                                        {"archive/data/0", std::string("\x01\x02\x03\x04\0\0", 6)},
                                        {"archive/version", "3\n"},
                                        {"archive/empty", ""}};

void expect_entries(const ZipArchive& zip) {
  ASSERT_EQ(zip.entries().size(), kEntries.size());
  for (size_t i = 0; i < kEntries.size(); ++i) {
    EXPECT_EQ(zip.entries()[i].name, kEntries[i].name);
    const kestrel::ZipEntry* e = zip.find(kEntries[i].name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(zip.data(*e), kEntries[i].data) << kEntries[i].name;
  }
  EXPECT_EQ(zip.find("archive/missing"), nullptr);
}

TEST(ZipArchive, ReadsStoredEntries) {
  const std::string bytes = make_zip(kEntries);
  EXPECT_TRUE(kestrel::looks_like_zip(bytes));
  expect_entries(ZipArchive::parse(bytes, "a.pt"));
}

TEST(ZipArchive, ReadsZip64Records) {
  const std::string bytes = make_zip(kEntries, true);
  expect_entries(ZipArchive::parse(bytes, "a.pt"));
}

TEST(ZipArchive, FindsTheEndRecordBehindAComment) {
  std::string bytes = make_zip(kEntries);
  bytes[bytes.size() - 2] = 5;  // comment length
  bytes += "hello";
  expect_entries(ZipArchive::parse(bytes, "a.pt"));
}

TEST(ZipArchive, RefusesCompressedEntries) {
  const std::string bytes = make_zip({{"archive/data.pkl", "xyz", 8}});
  const std::string e = error_of([&] { ZipArchive::parse(bytes, "a.pt"); });
  EXPECT_NE(e.find("'a.pt'"), std::string::npos) << e;
  EXPECT_NE(e.find("entry 'archive/data.pkl' is compressed (method 8)"), std::string::npos) << e;
}

TEST(ZipArchive, RefusesEncryptedEntries) {
  const std::string bytes = make_zip({{"archive/data.pkl", "xyz", 0, 1}});
  EXPECT_NE(error_of([&] { ZipArchive::parse(bytes, "a.pt"); }).find("'archive/data.pkl' is encrypted"),
            std::string::npos);
}

TEST(ZipArchive, RefusesAWrongChecksum) {
  const std::string bytes = make_zip({{"archive/data/0", "abcd", 0, 0, true}});
  EXPECT_NE(error_of([&] { ZipArchive::parse(bytes, "a.pt"); }).find("'archive/data/0' fails its CRC-32 check"),
            std::string::npos);
}

TEST(ZipArchive, RefusesDuplicateNames) {
  const std::string bytes = make_zip({{"a", "1"}, {"a", "2"}});
  EXPECT_NE(error_of([&] { ZipArchive::parse(bytes, "a.pt"); }).find("'a' appears twice"), std::string::npos);
}

TEST(ZipArchive, RefusesEveryTruncation) {
  const std::string bytes = make_zip(kEntries, true);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(error_of([&] { ZipArchive::parse(bytes.substr(0, n), "a.pt"); }).empty()) << n;
}

TEST(ZipArchive, RefusesACountItsDirectoryCannotHold) {
  std::string bytes = make_zip(kEntries);
  const size_t end = bytes.size() - 22;
  bytes[end + 8] = bytes[end + 10] = '\xff';  // 65535 + entries in a directory of four
  EXPECT_NE(error_of([&] { ZipArchive::parse(bytes, "a.pt"); }).find("more than its"), std::string::npos);
}

TEST(ZipArchive, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(kestrel::crc32("123456789"), 0xCBF43926u);  // the CRC-32 catalogue's check value
  EXPECT_EQ(kestrel::crc32(""), 0u);
}

}  // namespace
