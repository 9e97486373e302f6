// COCO RLE against pycocotools: recorded strings, areas and boxes for fixed masks (from
// tests/scripts/rle_reference.py, pycocotools 2.0.11), the same masks run live through that script
// when a Python with pycocotools is found, round trips, and a hand-derived case. Polygons (frPoly
// through annToRLE), merges, uncompressed RLE and mask IoU with crowd regions: the recorded cases of
// tests/data/rle/polygons.json (its make_fixtures.py), and those and a few hundred seeded polygons
// run live through tests/scripts/rle_poly_reference.py.
#include "io/rle.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/json.h"
#include "tests/support/cli.h"
#include "tests/support/testing.h"

using namespace kestrel;
namespace fs = std::filesystem;
namespace kt = kestrel::testing;

namespace {

struct Mask {
  int64_t h, w;
  std::vector<uint8_t> px;  // row-major
};

// A seeded mask: a linear congruential generator's bits, set with probability `density` / 256,
// so runs of every length appear and differences of counts go negative.
Mask noise(int64_t h, int64_t w, uint32_t seed, uint32_t density) {
  Mask m{h, w, std::vector<uint8_t>(static_cast<size_t>(h * w))};
  for (auto& v : m.px) {
    seed = seed * 1664525u + 1013904223u;
    v = ((seed >> 24) & 0xff) < density;
  }
  return m;
}
Mask disc(int64_t h, int64_t w, double cy, double cx, double radius) {
  Mask m{h, w, std::vector<uint8_t>(static_cast<size_t>(h * w))};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      m.px[y * w + x] = (y - cy) * (y - cy) + (x - cx) * (x - cx) <= radius * radius;
  return m;
}
Mask rect(int64_t h, int64_t w, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  Mask m{h, w, std::vector<uint8_t>(static_cast<size_t>(h * w))};
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x) m.px[y * w + x] = 1;
  return m;
}

// The fixed masks, and pycocotools' line for each (counts, h, w, area, bbox).
std::vector<Mask> masks() {
  Mask ring = rect(30, 25, 3, 27, 2, 23);
  for (int64_t y = 8; y < 22; ++y)
    for (int64_t x = 7; x < 18; ++x) ring.px[y * 25 + x] = 0;
  return {rect(4, 5, 1, 3, 1, 4),       // the hand case below
          rect(3, 3, 0, 3, 0, 3),       // all set: the first count is 0
          rect(6, 7, 0, 0, 0, 0),       // nothing set
          rect(5, 4, 0, 1, 0, 1),       // the first pixel only
          rect(5, 4, 4, 5, 3, 4),       // the last pixel only
          rect(20, 30, 15, 16, 7, 23),  // one row: runs of 1 across columns (bbox's shortcut)
          ring,
          noise(37, 23, 7, 128),
          noise(64, 48, 99, 250),
          disc(480, 640, 200.5, 300.25, 150)};
}
const std::vector<std::string> kPycocotools = {
    "5220003 4 5 6 1.0 1.0 3.0 2.0",
    "09 3 3 9 0.0 0.0 3.0 3.0",
    "Z1 6 7 0 0.0 0.0 0.0 0.0",
    "01c0 5 4 1 0.0 0.0 1.0 1.0",
    "c01 5 4 1 3.0 4.0 1.0 1.0",
    "k41c000000000000000000000000000000m3 20 30 16 7.0 15.0 16.0 1.0",
    "o1h0600000000]O80H080H080H080H080H080H080H080H080H080H080Hc000000000i1 30 25 350 2.0 3.0"
    " 21.0 24.0",
    "0151L1040M0M4120NOL17OI1000O0032N0100OOO123OKO30N027OIN10O0110OO071KON10O01020O0O4OL13OM"
    "1012ON21MO02201OM0000110OO21NO2OO51K20L10021NO1O21MO034OLO0O10O10O040L010O11000001ON10O1"
    "10OO11O010020N40LO01OO20N13O11L60I101000N0121NN170JOO0020O1O00O40L003002MN121OOO10O10O00"
    "0021O0O20MO0072IO110N02ON1020N72JM20M53KN0O70I013O00M42L21N30LN40M2ON20N020N00000010O10O"
    "035MK000110301OL26N70B01010O0O13ON33MO0N 37 23 438 0.0 0.0 23.0 37.0",
    "081T10d20TM0UO0:0^10W10\\N0eN0k00f00d10\\M0b10gM0>0?0S20N0QM0j1070nM0300030m00H0]30YL0D0M0"
    "701070b00h30[K0:020@0V10D0:0TO070K020l00WO070G0B0g40nK0F0f00WO0k00R10d50fH090C0K090U60fI"
    "0k00@0<080kN0N 64 48 2998 0.0 0.0 48.0 64.0",
    "jnV2n0j=`0B<F8H8H8I6I8J4K6J6K4K6K4L4L4L4L4L4M2M4L4M2M4L4M2N2M4M2M4M2N2M4M2N2N2N2N2M4M2N2"
    "N2N2N2N2N2N2N2N2N2O0O2N2N2N2N2O0O2N2N2N2O0O2N2O0O2N2O0O2N2O0O2N2O0O2O0O2O0O2N2O0O2O0O2O0"
    "O2O000O2O0O2O0O2O000O2O0O2O000O2O000O2O000O2O00000O2O000O2O0000000O2O00000O2O00000000000"
    "O2O000000000000000O2O0000000000000000000000000000000000000000000001N10000000000000001N10"
    "000000001N100000001N1000001N1000001N10001N1000001N10001N101N10001N101N10001N101N101N101N"
    "101N101N101N101N2N101N101N2N101N2N101N2N101N2N2N101N2N2N2N101N2N2N2N2N2N2N2N2N2N2N2N2N2N"
    "2N2N2N2N3L3N2N2N3L3N2N3L3N3L3N3L3N3L4L3N3L4L4L4L4L4L5J5L5J5L5J6J6J7H8H8H9F<Ba0\\OZ]h2 480"
    " 640 70684 151.0 51.0 300.0 300.0",
};

std::string line_of(const Mask& m) {
  const rle::Rle r = rle::encode(m.px.data(), m.h, m.w);
  const rle::Bbox b = rle::bbox(r);
  std::ostringstream s;
  const auto num = [](double v) {
    std::ostringstream o;
    o.precision(17);
    o << v;
    if (o.str().find_first_of(".e") == std::string::npos) o << ".0";
    return o.str();
  };
  s << rle::to_string(r.counts) << ' ' << m.h << ' ' << m.w << ' ' << rle::area(r) << ' ' << num(b.x) << ' '
    << num(b.y) << ' ' << num(b.w) << ' ' << num(b.h);
  return s.str();
}

}  // namespace

TEST(Rle, HandCase) {
  // 4 x 5, rows 1-2 and columns 1-3 set. Column-major: column 0 and row 0 of column 1 give 5
  // zeros, then 2 ones, 2 zeros, 2 ones, 2 zeros, 2 ones, 5 zeros. The string: 5, 2, 2, then the
  // differences from two counts back, 0, 0, 0 and 5 - 2 = 3.
  const Mask m = rect(4, 5, 1, 3, 1, 4);
  const rle::Rle r = rle::encode(m.px.data(), 4, 5);
  EXPECT_EQ(r.counts, (std::vector<uint32_t>{5, 2, 2, 2, 2, 2, 5}));
  EXPECT_EQ(rle::to_string(r.counts), "5220003");
  EXPECT_EQ(rle::area(r), 6u);
  const rle::Bbox b = rle::bbox(r);
  EXPECT_EQ(b.x, 1);
  EXPECT_EQ(b.y, 1);
  EXPECT_EQ(b.w, 3);
  EXPECT_EQ(b.h, 2);
}

TEST(Rle, StringsOfLargeAndNegativeValues) {
  // 32 needs two groups: 0 | 0x20 -> 'P', then 1 -> '1'. 15 is '?'; 16 needs two groups (0x10 is
  // the sign bit): 0x30 -> '`', then '0'. From the fourth count on, differences: -1 is one group
  // 0x1f -> 'O'; -33 is 0x1f | 0x20 -> 'o', then 0x1e -> 'N'.
  EXPECT_EQ(rle::to_string({32}), "P1");
  EXPECT_EQ(rle::to_string({15}), "?");
  EXPECT_EQ(rle::to_string({16}), "`0");
  EXPECT_EQ(rle::to_string({5, 5, 5, 4}), "555O");
  EXPECT_EQ(rle::to_string({40, 0, 40, 7}), "X10X17");
  EXPECT_EQ(rle::to_string({40, 40, 40, 7}), "X1X1X1oN");
  for (const std::vector<uint32_t>& counts : std::vector<std::vector<uint32_t>>{
           {}, {0}, {7, 3}, {1u << 31, 5, 0, 4000000000u, 1, 12345678}, {32, 0, 1, 64, 1024}}) {
    EXPECT_EQ(rle::from_string(rle::to_string(counts)), counts);
  }
}

TEST(Rle, MatchesRecordedPycocotools) {
  const std::vector<Mask> ms = masks();
  ASSERT_EQ(ms.size(), kPycocotools.size());
  for (size_t i = 0; i < ms.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(line_of(ms[i]), kPycocotools[i]);
  }
}

TEST(Rle, RoundTrips) {
  for (const Mask& m : masks()) {
    const rle::Rle r = rle::encode(m.px.data(), m.h, m.w);
    const rle::Rle back{m.h, m.w, rle::from_string(rle::to_string(r.counts))};
    EXPECT_EQ(back.counts, r.counts);
    EXPECT_EQ(rle::decode(back), m.px);
  }
  const rle::Rle empty = rle::encode(nullptr, 0, 0);
  EXPECT_EQ(empty.counts, std::vector<uint32_t>{0});
  EXPECT_TRUE(rle::decode(empty).empty());
}

TEST(Rle, JsonAsSaveOneJsonWritesIt) {
  const Mask m = rect(4, 5, 1, 3, 1, 4);
  const rle::Rle r = rle::encode(m.px.data(), 4, 5);
  EXPECT_EQ(json::dump(rle::to_json(r)), R"({"size":[4,5],"counts":"5220003"})");
  const rle::Rle back = rle::from_json(json::parse(R"({"size":[4,5],"counts":"5220003"})"), "test");
  EXPECT_EQ(back.counts, r.counts);
  EXPECT_EQ(back.height, 4);
  const rle::Rle plain = rle::from_json(json::parse(R"({"counts":[5,2,2,2,2,2,5],"size":[4,5]})"), "test");
  EXPECT_EQ(rle::decode(plain), m.px);
  EXPECT_NE(
      kt::error_of([] { rle::from_json(json::parse(R"({"size":[4,5]})"), "row 3"); }).find("row 3: expected"),
      std::string::npos);
}

TEST(Rle, RefusesBadInput) {
  const std::vector<uint8_t> two = {0, 2, 1, 0};
  EXPECT_NE(kt::error_of([&] { rle::encode(two.data(), 2, 2); }).find("pixel (0, 1) is 2"),
            std::string::npos);
  EXPECT_NE(kt::error_of([] { rle::from_string("5 2"); }).find("outside '0'..'o'"), std::string::npos);
  EXPECT_NE(kt::error_of([] { rle::from_string("5P"); }).find("truncated"), std::string::npos);
  EXPECT_NE(kt::error_of([] { rle::decode({2, 2, {1, 2}}); }).find("add up to 3 pixels"), std::string::npos);
}

TEST(Rle, MatchesLivePycocotools) {
  const std::string python = kt::find_python({"pycocotools", "numpy"});
  if (python.empty())
    GTEST_SKIP() << "no Python with pycocotools ($KESTREL_PYTHON, python3): live parity not run";
  const fs::path dir = fs::temp_directory_path() / ("kestrel_rle_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::vector<Mask> ms = masks();
  std::string args;
  for (size_t i = 0; i < ms.size(); ++i) {
    const fs::path f = dir / ("mask" + std::to_string(i) + ".txt");
    std::ofstream out(f);
    for (int64_t y = 0; y < ms[i].h; ++y) {
      for (int64_t x = 0; x < ms[i].w; ++x) out << char('0' + ms[i].px[y * ms[i].w + x]);
      out << '\n';
    }
    args.append(" ").append(f.string());
  }
  const kt::CliResult r = kt::run_command(python + " tests/scripts/rle_reference.py" + args);
  fs::remove_all(dir);
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  for (size_t i = 0; i < ms.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_EQ(line_of(ms[i]), line);
  }
}

namespace {

// annToRLE of a list of polygons: each rasterised, then merged.
rle::Rle polygons_rle(const json::Value& segm, int64_t h, int64_t w) {
  std::vector<rle::Rle> parts;
  for (const json::Value& poly : segm.as_array()) {
    std::vector<double> xy;
    for (const json::Value& v : poly.as_array()) xy.push_back(v.as_real());
    parts.push_back(rle::from_polygon(xy.data(), xy.size() / 2, h, w));
  }
  return rle::merge(parts);
}
rle::Rle case_rle(const json::Value& c) {
  return polygons_rle(*c.find("segm"), c.find("h")->as_integer(), c.find("w")->as_integer());
}

// Every case of `cases` (rle_poly_reference.py's input) against `expected` (its output).
void expect_cases(const json::Value& cases, const json::Value& expected) {
  const json::Array& polys = cases.find("polygons")->as_array();
  ASSERT_EQ(polys.size(), expected.find("polygons")->as_array().size());
  for (size_t i = 0; i < polys.size(); ++i) {
    SCOPED_TRACE("polygon case " + std::to_string(i) + ": " + json::dump(polys[i]));
    const json::Value& want = expected.find("polygons")->as_array()[i];
    const rle::Rle r = case_rle(polys[i]);
    EXPECT_EQ(rle::to_string(r.counts), want.find("counts")->as_string());
    EXPECT_EQ(static_cast<int64_t>(rle::area(r)), want.find("area")->as_integer());
    const rle::Bbox b = rle::bbox(r);
    const json::Array& wb = want.find("bbox")->as_array();
    EXPECT_EQ(b.x, wb[0].as_real());
    EXPECT_EQ(b.y, wb[1].as_real());
    EXPECT_EQ(b.w, wb[2].as_real());
    EXPECT_EQ(b.h, wb[3].as_real());
  }
  if (const json::Value* merges = cases.find("merges"))
    for (size_t i = 0; i < merges->as_array().size(); ++i) {
      SCOPED_TRACE("merge case " + std::to_string(i));
      const json::Value& c = merges->as_array()[i];
      const int64_t h = c.find("h")->as_integer(), w = c.find("w")->as_integer();
      std::vector<rle::Rle> parts;
      for (const json::Value& p : c.find("parts")->as_array()) parts.push_back(polygons_rle(p, h, w));
      const rle::Rle m = rle::merge(parts, c.find("intersect")->as_integer() != 0);
      EXPECT_EQ(rle::to_string(m.counts), expected.find("merges")->as_array()[i].as_string());
    }
  if (const json::Value* plain = cases.find("uncompressed"))
    for (size_t i = 0; i < plain->as_array().size(); ++i) {
      const rle::Rle r = rle::from_json(plain->as_array()[i], "case");
      EXPECT_EQ(rle::to_string(r.counts), expected.find("uncompressed")->as_array()[i].as_string()) << i;
    }
  if (const json::Value* ious = cases.find("ious"))
    for (size_t i = 0; i < ious->as_array().size(); ++i) {
      SCOPED_TRACE("iou case " + std::to_string(i));
      const json::Value& c = ious->as_array()[i];
      const json::Array& rows = expected.find("ious")->as_array()[i].as_array();
      const json::Array& dts = c.find("dt")->as_array();
      const json::Array& gts = c.find("gt")->as_array();
      ASSERT_EQ(rows.size(), dts.size());
      for (size_t d = 0; d < dts.size(); ++d)
        for (size_t g = 0; g < gts.size(); ++g)
          EXPECT_EQ(rle::iou(case_rle(dts[d]), case_rle(gts[g]), c.find("crowd")->as_array()[g].as_integer() != 0),
                    rows[d].as_array()[g].as_real())
              << "dt " << d << " gt " << g;
    }
}

json::Value read_json(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return json::parse(s.str());
}

const fs::path kPolygonFixture = "tests/data/rle/polygons.json";

// Seeded cases beyond the fixture's: larger images, long and self-crossing polygons, points far
// outside, pixel-centre grids, crowd IoUs.
json::Value seeded_cases() {
  uint32_t seed = 2024;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) / 16777216.0;
  };
  const int64_t sizes[][2] = {{480, 640}, {64, 48}, {13, 29}, {100, 100}, {2, 3}};
  auto polygon = [&](int64_t h, int64_t w) {
    json::Array xy;
    const int n = 3 + static_cast<int>(next() * 20);
    const bool grid = next() < 0.3;
    for (int i = 0; i < n; ++i) {
      double x = -0.3 * w + 1.6 * w * next(), y = -0.3 * h + 1.6 * h * next();
      if (grid) x = std::round(x * 2) / 2, y = std::round(y * 2) / 2;
      xy.emplace_back(x);
      xy.emplace_back(y);
    }
    return json::Value(std::move(xy));
  };
  json::Array polys, ious;
  for (int i = 0; i < 300; ++i) {
    const auto* s = sizes[i % 5];
    json::Array segm{polygon(s[0], s[1])};
    if (i % 7 == 0) segm.push_back(polygon(s[0], s[1]));
    polys.emplace_back(json::Object{{"h", s[0]}, {"w", s[1]}, {"segm", std::move(segm)}});
  }
  for (int i = 0; i < 20; ++i) {
    const auto* s = sizes[i % 4];
    json::Array dt, gt, crowd;
    for (int k = 0; k < 4; ++k) dt.emplace_back(json::Object{{"h", s[0]}, {"w", s[1]}, {"segm", json::Array{polygon(s[0], s[1])}}});
    for (int k = 0; k < 3; ++k) {
      gt.emplace_back(json::Object{{"h", s[0]}, {"w", s[1]}, {"segm", json::Array{polygon(s[0], s[1])}}});
      crowd.emplace_back(int64_t{next() < 0.4});
    }
    ious.emplace_back(json::Object{{"dt", std::move(dt)}, {"gt", std::move(gt)}, {"crowd", std::move(crowd)}});
  }
  return json::Object{{"polygons", std::move(polys)}, {"ious", std::move(ious)}};
}

}  // namespace

// A hand case: the square [1, 4] x [1, 4] covers the pixels whose centres are inside it, columns
// and rows 1..3 of a 6 x 6 mask; a union and an intersection of two squares; the crowd rule.
TEST(RlePolygon, HandCases) {
  const double square[] = {1, 1, 4, 1, 4, 4, 1, 4};
  const rle::Rle r = rle::from_polygon(square, 4, 6, 6);
  EXPECT_EQ(r.counts, (std::vector<uint32_t>{7, 3, 3, 3, 3, 3, 14}));
  const double other[] = {2, 2, 5, 2, 5, 5, 2, 5};
  const rle::Rle o = rle::from_polygon(other, 4, 6, 6);
  EXPECT_EQ(rle::area(rle::merge({r, o})), 14u);
  EXPECT_EQ(rle::area(rle::merge({r, o}, /*intersect=*/true)), 4u);
  EXPECT_DOUBLE_EQ(rle::iou(r, o, false), 4.0 / 14);
  EXPECT_DOUBLE_EQ(rle::iou(r, o, true), 4.0 / 9);  // over the detection's own 9 pixels
  EXPECT_EQ(rle::iou(r, rle::from_polygon(square, 4, 7, 6), false), -1.0);  // sizes differ
  const double far[] = {10, 10, 12, 10, 12, 12};
  EXPECT_EQ(rle::area(rle::from_polygon(far, 3, 6, 6)), 0u);
  EXPECT_EQ(rle::from_polygon(far, 1, 6, 6).counts, std::vector<uint32_t>{36});  // one vertex: empty
  EXPECT_EQ(rle::merge({}).counts, std::vector<uint32_t>{});
  EXPECT_EQ(rle::merge({r, rle::from_polygon(square, 4, 7, 6)}).height, 0);  // sizes differ: 0 x 0
  const double bad[] = {1, 1, 1e12, 1, 4, 4};
  EXPECT_NE(kt::error_of([&] { rle::from_polygon(bad, 3, 6, 6); }).find("vertex 1"), std::string::npos);
}

TEST(RlePolygon, MatchesRecordedPycocotools) {
  const json::Value fixture = read_json(kPolygonFixture);
  expect_cases(*fixture.find("cases"), *fixture.find("expected"));
}

TEST(RlePolygon, MatchesLivePycocotools) {
  const std::string python = kt::find_python({"pycocotools", "numpy"});
  if (python.empty())
    GTEST_SKIP() << "no Python with pycocotools ($KESTREL_PYTHON, python3): live parity not run";
  const fs::path dir = fs::temp_directory_path() / ("kestrel_rle_poly_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const json::Value seeded = seeded_cases();
  std::ofstream(dir / "seeded.json") << json::dump(seeded);
  for (const fs::path& cases : {kPolygonFixture, dir / "seeded.json"}) {
    SCOPED_TRACE(cases.string());
    const kt::CliResult r = kt::run_command(python + " tests/scripts/rle_poly_reference.py " + cases.string());
    ASSERT_EQ(r.code, 0) << r.out;
    const json::Value doc = read_json(cases);
    expect_cases(doc.find("cases") ? *doc.find("cases") : doc, json::parse(r.out));
  }
  fs::remove_all(dir);
}
