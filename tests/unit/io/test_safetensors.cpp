// Safetensors reader/writer and checkpoint directories: hostile input, round trips,
// atomic writes, sharding. Also compiled under ASan+UBSan as test_safetensors_asan.
#include "twinkle/io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "io_test_util.h"

using namespace twinkle;
using twinkle::iotest::expect_error;
using twinkle::iotest::read_bytes;
using twinkle::iotest::TempDir;
using twinkle::iotest::write_bytes;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
// A safetensors image: length prefix + header text + data bytes.
std::string st_bytes(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

// Writes the image to <dir>/<name> and expects SafetensorsFile::open to throw an error that
// names the file and every string in `parts`; the same bytes through open_from_memory too.
void expect_bad(const TempDir& d, const std::string& name, const std::string& bytes,
                const std::vector<std::string>& parts) {
  std::string p = d / name;
  write_bytes(p, bytes);
  std::vector<std::string> with_file = parts;
  with_file.push_back(p);
  expect_error([&] { SafetensorsFile::open(p); }, with_file);
  std::vector<std::string> with_mem = parts;
  with_mem.push_back("mem:" + name);
  expect_error([&] { SafetensorsFile::open_from_memory(bytes.data(), bytes.size(), "mem:" + name); }, with_mem);
}

Tensor random_bits(const Shape& shape, DType dt, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  std::mt19937 g(seed);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(g());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

const std::string kF32x2 = R"("dtype":"F32","shape":[2])";

}  // namespace

// ---- hostile input ------------------------------------------------------------------------

TEST(SafetensorsBad, ShortFile) {
  TempDir d;
  expect_bad(d, "empty.st", "", {"shorter than the 8-byte"});
  expect_bad(d, "seven.st", std::string(7, '\0'), {"7 bytes", "shorter than the 8-byte"});
}

TEST(SafetensorsBad, HeaderLength) {
  TempDir d;
  expect_bad(d, "toolong.st", le64(100) + "{}", {"header length 100", "exceeds the file size"});
  expect_bad(d, "absurd.st", le64(200'000'000) + "{}", {"100 MB"});
  expect_bad(d, "huge.st", le64(~uint64_t{0}) + "{}", {"100 MB"});
}

TEST(SafetensorsBad, HeaderNotJson) {
  TempDir d;
  expect_bad(d, "garbage.st", st_bytes("{\"a\": [1, 2", ""), {"not valid JSON"});
  expect_bad(d, "text.st", st_bytes("hello world", ""), {"not valid JSON"});
  expect_bad(d, "utf8.st", st_bytes("{\"\xff\xfe\":{}}", ""), {"not valid JSON"});
  expect_bad(d, "array.st", st_bytes("[1,2,3]", ""), {"must be a JSON object", "array"});
  expect_bad(d, "numovf.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1e99999],"data_offsets":[0,0]}})", ""),
             {"not valid JSON", "number overflow"});
  expect_bad(d, "number.st", st_bytes("42", ""), {"must be a JSON object"});
  // Deep nesting must produce an error, never a stack overflow.
  std::string deep = "{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_bad(d, "deep.st", st_bytes(deep, ""), {"nested deeper"});
}

TEST(SafetensorsBad, EntryShape) {
  TempDir d;
  expect_bad(d, "notobj.st", st_bytes(R"({"w": 3})", ""), {"'w'", "entry must be an object"});
  expect_bad(d, "nodtype.st", st_bytes(R"({"w": {"shape":[1],"data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'dtype'", "missing"});
  expect_bad(d, "noshape.st", st_bytes(R"({"w": {"dtype":"F32","data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'shape'", "missing"});
  expect_bad(d, "nooffs.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "missing"});
  expect_bad(d, "dtypeint.st", st_bytes(R"({"w": {"dtype":5,"shape":[1],"data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'dtype'", "must be a string"});
  expect_bad(d, "shapestr.st", st_bytes(R"({"w": {"dtype":"F32","shape":"1","data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'shape'", "must be an array"});
  expect_bad(d, "shapeflt.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'shape'", "non-negative integers"});
  expect_bad(d, "offs1.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "2 integers"});
  expect_bad(d, "offs3.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "2 integers"});
  expect_bad(d, "offsstr.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":["0",4]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "non-negative integers"});
  expect_bad(d, "offsneg.st", st_bytes(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "negative"});
}

TEST(SafetensorsBad, Dtype) {
  TempDir d;
  expect_bad(d, "f8.st", st_bytes(R"({"w": {"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", std::string(1, 0)),
             {"'w'", "'dtype'", "F8_E4M3"});
  expect_bad(d, "q4.st", st_bytes(R"({"w": {"dtype":"","shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
             {"'w'", "'dtype'"});
}

TEST(SafetensorsBad, ShapeValues) {
  TempDir d;
  expect_bad(d, "neg.st", st_bytes(R"({"w": {"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'", "negative"});
  expect_bad(d, "ovf.st",
             st_bytes(R"({"w": {"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'", "overflow"});
  // prod(shape) fits in 64 bits but times dtype size does not.
  expect_bad(d, "ovf2.st",
             st_bytes(R"({"w": {"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'", "overflow"});
  expect_bad(d, "ovf3.st",
             st_bytes(R"({"w": {"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'", "overflows int64"});
  // Zero-size, but the other dims multiply past int64 (their strides would overflow).
  expect_bad(d, "ovf5.st",
             st_bytes(R"({"w": {"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'", "overflow"});
  // Zero-size with sane dims is fine.
  const std::string zero = st_bytes(R"({"w": {"dtype":"F32","shape":[0,65536,65536],"data_offsets":[0,0]}})", "");
  EXPECT_NO_THROW(SafetensorsFile::open_from_memory(zero.data(), zero.size(), "z"));
  // Too large for uint64: the JSON parser yields a float, which is not an integer.
  expect_bad(d, "ovf4.st",
             st_bytes(R"({"w": {"dtype":"F32","shape":[99999999999999999999999],"data_offsets":[0,0]}})", ""),
             {"'w'", "'shape'"});
}

TEST(SafetensorsBad, Offsets) {
  TempDir d;
  std::string z8(8, '\0');
  expect_bad(d, "rev.st", st_bytes(R"({"w": {)" + kF32x2 + R"(,"data_offsets":[8,0]}})", z8),
             {"'w'", "'data_offsets'", "begin > end"});
  expect_bad(d, "beyond.st", st_bytes(R"({"w": {)" + kF32x2 + R"(,"data_offsets":[0,16]}})", z8),
             {"'w'", "'data_offsets'", "beyond the data buffer"});
  expect_bad(d, "size.st", st_bytes(R"({"w": {)" + kF32x2 + R"(,"data_offsets":[0,4]}})", std::string(4, 0)),
             {"'w'", "'data_offsets'", "4 bytes != 8 bytes"});
  expect_bad(d, "overlap.st",
             st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[0,8]}, "b": {)" + kF32x2 +
                          R"(,"data_offsets":[4,12]}})",
                      std::string(12, 0)),
             {"'a'", "'b'", "overlap"});
  expect_bad(d, "same.st",
             st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[0,8]}, "b": {)" + kF32x2 +
                          R"(,"data_offsets":[0,8]}})",
                      z8),
             {"overlap"});
  expect_bad(d, "hole.st",
             st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[0,8]}, "b": {)" + kF32x2 +
                          R"(,"data_offsets":[12,20]}})",
                      std::string(20, 0)),
             {"'b'", "hole", "[8, 12)"});
  expect_bad(d, "lead.st", st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[4,12]}})", std::string(12, 0)),
             {"'a'", "hole", "[0, 4)"});
  expect_bad(d, "trail.st", st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[0,8]}})", std::string(11, 0)),
             {"3 trailing bytes"});
  expect_bad(d, "emptytrail.st", st_bytes("{}", "xyz"), {"3 trailing bytes"});
}

TEST(SafetensorsBad, DuplicatesAndMetadata) {
  TempDir d;
  std::string z8(8, '\0');
  expect_bad(d, "dup.st",
             st_bytes(R"({"a": {)" + kF32x2 + R"(,"data_offsets":[0,8]}, "a": {)" + kF32x2 +
                          R"(,"data_offsets":[8,16]}})",
                      std::string(16, 0)),
             {"duplicate tensor name 'a'"});
  expect_bad(d, "meta1.st", st_bytes(R"({"__metadata__": [1]})", ""), {"'__metadata__'", "object"});
  expect_bad(d, "meta2.st", st_bytes(R"({"__metadata__": {"format": 1}})", ""), {"'__metadata__'", "'format'", "string"});
  // Control characters in a hostile name are escaped in the message.
  std::string hdr = std::string("{\"bad\\u0001name\": 7}");
  expect_bad(d, "ctl.st", st_bytes(hdr, ""), {"'bad\\x01name'"});
}

TEST(SafetensorsBad, LoadMisuse) {
  TempDir d;
  std::string p = d / "ok.st";
  save_safetensors(p, {{"ids", Tensor::zeros({2, 3}, DType::I32)}, {"w", Tensor::zeros({4, 6})}});
  auto f = SafetensorsFile::open(p);
  expect_error([&] { f.info("nope"); }, {p, "no tensor 'nope'"});
  expect_error([&] { f.load("nope"); }, {p, "'nope'"});
  expect_error([&] { f.load_f32("ids"); }, {p, "'ids'", "integer dtype I32"});
  expect_error([&] { f.load_f32_narrow("w", 2, 0, 1); }, {p, "'w'", "dim 2 out of range"});
  expect_error([&] { f.load_f32_narrow("w", 1, 4, 3); }, {p, "'w'", "outside dim 1"});
  expect_error([&] { f.load_f32_narrow("w", 0, -1, 1); }, {p, "'w'"});
  Tensor wrong = Tensor::zeros({6, 4});
  expect_error([&] { f.load_into("w", wrong); }, {p, "'w'", "destination shape [6, 4]"});
  Tensor wrong_dt = Tensor::zeros({4, 6}, DType::BF16);
  expect_error([&] { f.load_into("w", wrong_dt); }, {p, "'w'", "cannot convert"});
  SafetensorsFile unopened;
  EXPECT_THROW(unopened.names(), Error);
  expect_error([&] { SafetensorsFile::open(d / "missing.st"); }, {d / "missing.st", "cannot open"});
  expect_error([&] { SafetensorsFile::open(d.path()); }, {d.path(), "not a regular file"});
}

// ---- valid files --------------------------------------------------------------------------

TEST(Safetensors, ReadsHandWrittenFile) {
  TempDir d;
  // Header written by hand, buffer order differs from header order, header not padded.
  float a[2] = {1.5f, -2.25f};
  int64_t b[1] = {-7};
  std::string data(reinterpret_cast<char*>(b), 8);
  data += std::string(reinterpret_cast<char*>(a), 8);
  std::string hdr = R"({"__metadata__":{"format":"pt","k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                    R"("b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"z":{"dtype":"BF16","shape":[0,5],"data_offsets":[16,16]}})";
  std::string p = d / "hand.st";
  write_bytes(p, st_bytes(hdr, data));
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "a", "z"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("k"), "v");
  EXPECT_EQ(f.info("a").nbytes, 8u);
  EXPECT_EQ(f.info("a").offset, 8u);
  EXPECT_EQ(f.info("b").shape, Shape{});
  EXPECT_EQ(f.info("z").shape, (Shape{0, 5}));
  EXPECT_EQ(f.load_f32("a").to_vector(), (std::vector<float>{1.5f, -2.25f}));
  Tensor bt = f.load("b");
  EXPECT_EQ(bt.dtype(), DType::I64);
  EXPECT_EQ(bt.data<int64_t>()[0], -7);
  EXPECT_EQ(f.load_f32("z").numel(), 0);
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("__metadata__"));
  int64_t raw;
  std::memcpy(&raw, f.raw_data("b"), 8);
  EXPECT_EQ(raw, -7);
}

TEST(Safetensors, EmptyFileIsValid) {
  TempDir d;
  const std::string e = st_bytes("{}", ""), m = st_bytes(R"({"__metadata__":null})", "");
  auto f = SafetensorsFile::open_from_memory(e.data(), e.size(), "empty");
  EXPECT_TRUE(f.names().empty());
  auto g = SafetensorsFile::open_from_memory(m.data(), m.size(), "nullmeta");
  EXPECT_TRUE(g.metadata().empty());
}

TEST(Safetensors, RoundTripBitExactAllDtypes) {
  TempDir d;
  std::vector<std::pair<std::string, Tensor>> ts = {
      {"model.f32", random_bits({3, 5, 7}, DType::F32, 1)}, {"model.bf16", random_bits({33, 17}, DType::BF16, 2)},
      {"model.f16", random_bits({65}, DType::F16, 3)},      {"model.i32", random_bits({4, 4}, DType::I32, 4)},
      {"model.i64", random_bits({9}, DType::I64, 5)},       {"scalar", random_bits({}, DType::F32, 6)},
      {"empty", Tensor::zeros({0, 3}, DType::BF16)},        {"odd", random_bits({3}, DType::BF16, 7)},
  };
  std::string p = d / "rt.safetensors";
  save_safetensors(p, ts, {{"format", "pt"}, {"step", "12"}});
  auto f = SafetensorsFile::open(p);
  std::vector<std::string> want;
  for (const auto& [n, t] : ts) want.push_back(n);
  EXPECT_EQ(f.names(), want);  // given order kept on disk
  for (const auto& [n, t] : ts) {
    Tensor back = f.load(n);
    EXPECT_TRUE(same_bytes(back, t)) << n;
    EXPECT_EQ(f.info(n).dtype, t.dtype()) << n;
  }
  EXPECT_EQ(f.metadata().at("step"), "12");
  // Header padded with spaces to a multiple of 8; the data buffer starts 8-aligned.
  std::string bytes = read_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_NE(bytes[8 + n - 1], '\0');
  auto hdr = nlohmann::json::parse(bytes.substr(8, n));  // trailing spaces are JSON whitespace
  EXPECT_EQ(hdr["model.f32"]["dtype"], "F32");
  EXPECT_EQ(hdr["model.f32"]["data_offsets"][0], 0);
  EXPECT_EQ(hdr["model.f32"]["data_offsets"][1], 3 * 5 * 7 * 4);
  // No temporary file left behind.
  EXPECT_EQ(d.list(), std::vector<std::string>{"rt.safetensors"});
}

TEST(Safetensors, NonContiguousInputSavedContiguous) {
  TempDir d;
  Tensor base = Tensor::zeros({4, 6});
  for (int i = 0; i < 24; ++i) base.f32()[i] = static_cast<float>(i);
  Tensor cols = base.narrow(1, 2, 3);  // non-contiguous view [4, 3]
  ASSERT_FALSE(cols.is_contiguous());
  save_safetensors(d / "nc.st", {{"cols", cols}});
  auto v = SafetensorsFile::open(d / "nc.st").load_f32("cols").to_vector();
  EXPECT_EQ(v, (std::vector<float>{2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22}));
}

TEST(Safetensors, LoadF32Conversions) {
  TempDir d;
  // Every bf16 and every f16 bit pattern.
  Tensor bf = Tensor::empty({65536}, DType::BF16), hf = Tensor::empty({256, 256}, DType::F16);
  for (uint32_t i = 0; i < 65536; ++i) {
    bf.data<uint16_t>()[i] = static_cast<uint16_t>(i);
    hf.data<uint16_t>()[i] = static_cast<uint16_t>(i);
  }
  save_safetensors(d / "c.st", {{"bf", bf}, {"hf", hf}});
  auto f = SafetensorsFile::open(d / "c.st");
  Tensor b32 = f.load_f32("bf"), h32 = f.load_f32("hf");
  ASSERT_EQ(b32.dtype(), DType::F32);
  EXPECT_EQ(h32.shape(), (Shape{256, 256}));
  for (uint32_t i = 0; i < 65536; ++i) {
    uint32_t want = i << 16, got;
    std::memcpy(&got, b32.f32() + i, 4);
    ASSERT_EQ(got, want) << "bf16 pattern " << i;
    float hv = h32.f32()[i], ref = f16_to_f32(static_cast<uint16_t>(i));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(hv)) << "f16 pattern " << i;
    } else {
      ASSERT_EQ(hv, ref) << "f16 pattern " << i;
      ASSERT_EQ(std::signbit(hv), std::signbit(ref)) << "f16 pattern " << i;
    }
  }
  // Spot values independent of f16_to_f32: 1.0, -2.0, max, min subnormal.
  auto bits = [](uint16_t h) {
    return h;
  };
  EXPECT_EQ(h32.f32()[bits(0x3c00)], 1.0f);
  EXPECT_EQ(h32.f32()[bits(0xc000)], -2.0f);
  EXPECT_EQ(h32.f32()[bits(0x7bff)], 65504.0f);
  EXPECT_EQ(h32.f32()[bits(0x0001)], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(h32.f32()[0x7c00]));
  // load_into F32 destination and same-dtype destination.
  Tensor dst = Tensor::zeros({65536});
  f.load_into("bf", dst);
  EXPECT_EQ(std::memcmp(dst.raw(), b32.raw(), dst.nbytes()), 0);
  Tensor raw = Tensor::zeros({256, 256}, DType::F16);
  f.load_into("hf", raw);
  EXPECT_TRUE(same_bytes(raw, hf));
}

TEST(Safetensors, LoadF32Narrow) {
  TempDir d;
  Tensor t = random_bits({5, 6, 7}, DType::BF16, 11);
  save_safetensors(d / "n.st", {{"t", t}});
  auto f = SafetensorsFile::open(d / "n.st");
  Tensor full = f.load_f32("t");
  for (int64_t dim = -3; dim < 3; ++dim) {
    int64_t D = full.size(dim);
    for (int64_t start = 0; start < D; start += 2) {
      int64_t len = std::min<int64_t>(3, D - start);
      Tensor got = f.load_f32_narrow("t", dim, start, len);
      Tensor want = full.narrow(dim, start, len).clone();
      ASSERT_EQ(got.shape(), want.shape());
      ASSERT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << "dim " << dim << " start " << start;
    }
  }
  EXPECT_EQ(f.load_f32_narrow("t", 1, 6, 0).numel(), 0);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir d;
  std::string p = d / "w.st";
  expect_error([&] { save_safetensors(p, {{"", Tensor::zeros({1})}}); }, {p, "empty name"});
  expect_error([&] { save_safetensors(p, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}); },
               {p, "duplicate tensor name 'a'"});
  expect_error([&] { save_safetensors(p, {{"__metadata__", Tensor::zeros({1})}}); }, {p, "reserved"});
  expect_error([&] { save_safetensors(p, {{"u", Tensor()}}); }, {p, "'u'", "undefined"});
  expect_error([&] { save_safetensors(p, {{"bad\xff", Tensor::zeros({1})}}); }, {p, "UTF-8"});
  EXPECT_TRUE(d.list().empty());
}

TEST(Safetensors, AtomicWriteLeavesNoPartialFile) {
  TempDir d;
  // Final rename fails: the destination is a non-empty directory.
  std::string target = d / "model.safetensors";
  std::filesystem::create_directory(target);
  write_bytes(target + "/keep", "x");
  expect_error([&] { save_safetensors(target, {{"w", Tensor::zeros({1024})}}); }, {target, "rename"});
  EXPECT_EQ(d.list(), std::vector<std::string>{"model.safetensors"});  // no *.tmp.<pid>
  EXPECT_TRUE(std::filesystem::is_directory(target));
  // Missing parent directory.
  expect_error([&] { save_safetensors(d / "no/such/dir/x.st", {{"w", Tensor::zeros({1})}}); },
               {d / "no/such/dir/x.st", "cannot create"});
  // Overwrite: old content fully replaced, nothing else left.
  std::string p = d / "o.st";
  save_safetensors(p, {{"big", Tensor::zeros({4096})}});
  save_safetensors(p, {{"small", Tensor::full({2}, 3.0f)}});
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"small"});
  EXPECT_EQ(d.list(), (std::vector<std::string>{"model.safetensors", "o.st"}));
  // A failed save leaves the previous file intact.
  expect_error([&] { save_safetensors(p, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}); }, {"duplicate"});
  EXPECT_EQ(SafetensorsFile::open(p).load_f32("small").to_vector(), (std::vector<float>{3.0f, 3.0f}));
}

TEST(Safetensors, MappingOutlivesFileHandleAndCopies) {
  TempDir d;
  std::string p = d / "m.st";
  save_safetensors(p, {{"w", Tensor::full({8}, 2.0f)}});
  Tensor t;
  {
    auto f = SafetensorsFile::open(p);
    auto g = f;  // shares the mapping
    std::filesystem::remove(p);
    t = g.load_f32("w");
  }
  EXPECT_EQ(t.to_vector(), std::vector<float>(8, 2.0f));
}

// ---- checkpoint directories ---------------------------------------------------------------

namespace {
std::vector<std::pair<std::string, Tensor>> sample_model() {
  return {
      {"model.embed_tokens.weight", random_bits({16, 8}, DType::BF16, 21)},    // 256 B
      {"model.layers.0.mlp.up_proj.weight", random_bits({8, 8}, DType::F32, 22)},  // 256 B
      {"model.layers.0.input_layernorm.weight", random_bits({8}, DType::F32, 23)},  // 32 B
      {"model.norm.weight", random_bits({8}, DType::F16, 24)},                  // 16 B
      {"lm_head.weight", random_bits({16, 8}, DType::F32, 25)},                 // 512 B
  };
}
}  // namespace

TEST(Checkpoint, SingleFile) {
  TempDir d;
  auto ts = sample_model();
  save_checkpoint_dir(d.path(), ts);
  EXPECT_EQ(d.list(), std::vector<std::string>{"model.safetensors"});
  auto r = CheckpointReader::open_dir(d.path());
  EXPECT_TRUE(r.has_weights());
  EXPECT_EQ(r.names().size(), ts.size());
  for (const auto& [n, t] : ts) {
    EXPECT_TRUE(same_bytes(r.load(n), t)) << n;
    EXPECT_EQ(r.file_of(n), d / "model.safetensors");
  }
  EXPECT_EQ(SafetensorsFile::open(d / "model.safetensors").metadata().at("format"), "pt");
  Tensor emb = r.load_f32("model.embed_tokens.weight");
  Tensor rows = r.load_f32_narrow("model.embed_tokens.weight", 0, 4, 4);
  EXPECT_EQ(std::memcmp(rows.raw(), emb.narrow(0, 4, 4).raw(), rows.nbytes()), 0);
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir d;
  auto ts = sample_model();
  // 300-byte shards, greedy in the given order: [emb 256] [up 256 + ln 32] [norm 16] [lm_head 512].
  save_checkpoint_dir(d.path(), ts, 300);
  EXPECT_EQ(d.list(), (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                                "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                                "model.safetensors.index.json"}));
  auto idx = nlohmann::json::parse(read_bytes(d / "model.safetensors.index.json"));
  EXPECT_EQ(idx["metadata"]["total_size"], 256 + 256 + 32 + 16 + 512);
  EXPECT_EQ(idx["weight_map"].size(), ts.size());
  EXPECT_EQ(idx["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(idx["weight_map"]["model.layers.0.mlp.up_proj.weight"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(idx["weight_map"]["model.layers.0.input_layernorm.weight"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(idx["weight_map"]["model.norm.weight"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(idx["weight_map"]["lm_head.weight"], "model-00004-of-00004.safetensors");
  for (int i = 1; i <= 4; ++i) {
    auto f = SafetensorsFile::open(d / ("model-0000" + std::to_string(i) + "-of-00004.safetensors"));
    EXPECT_EQ(f.metadata().at("format"), "pt");
  }
  auto r = CheckpointReader::open_dir(d.path());
  EXPECT_TRUE(r.has_weights());
  for (const auto& [n, t] : ts) EXPECT_TRUE(same_bytes(r.load(n), t)) << n;
  EXPECT_EQ(r.file_of("lm_head.weight"), d / "model-00004-of-00004.safetensors");
  EXPECT_EQ(r.info("model.norm.weight").dtype, DType::F16);
  // 600-byte shards: the first four fit together, lm_head (560 + 512 > 600) starts shard 2.
  TempDir e;
  save_checkpoint_dir(e.path(), ts, 600);
  auto idx2 = nlohmann::json::parse(read_bytes(e / "model.safetensors.index.json"));
  EXPECT_EQ(idx2["weight_map"]["model.norm.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(idx2["weight_map"]["lm_head.weight"], "model-00002-of-00002.safetensors");
  // A tensor larger than the cap gets a shard of its own.
  TempDir g;
  save_checkpoint_dir(g.path(), {{"a", Tensor::zeros({4})}, {"big", Tensor::zeros({100})}, {"b", Tensor::zeros({4})}}, 64);
  auto idx3 = nlohmann::json::parse(read_bytes(g / "model.safetensors.index.json"));
  EXPECT_EQ(idx3["weight_map"]["a"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(idx3["weight_map"]["big"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(idx3["weight_map"]["b"], "model-00003-of-00003.safetensors");
}

TEST(Checkpoint, ResaveRemovesStaleFiles) {
  TempDir d;
  auto ts = sample_model();
  save_checkpoint_dir(d.path(), ts, 300);  // 4 shards
  write_bytes(d / "config.json", "{}");    // unrelated files survive
  save_checkpoint_dir(d.path(), ts, 600);  // 2 shards
  EXPECT_EQ(d.list(), (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors", "model.safetensors.index.json"}));
  save_checkpoint_dir(d.path(), ts);  // single
  EXPECT_EQ(d.list(), (std::vector<std::string>{"config.json", "model.safetensors"}));
  save_checkpoint_dir(d.path(), ts, 600);  // back to sharded: model.safetensors must go (it would win)
  EXPECT_EQ(d.list().size(), 4u);
  auto r = CheckpointReader::open_dir(d.path());
  EXPECT_EQ(r.file_of("lm_head.weight"), d / "model-00002-of-00002.safetensors");
  for (const auto& [n, t] : ts) EXPECT_TRUE(same_bytes(r.load(n), t)) << n;
}

TEST(Checkpoint, InterruptedSaveNeverLooksComplete) {
  TempDir d;
  auto ts = sample_model();
  save_checkpoint_dir(d.path(), ts);
  // Shards written, index missing (as after a crash before the index): no weights.
  TempDir e;
  save_checkpoint_dir(e.path(), ts, 300);
  std::filesystem::remove(e / "model.safetensors.index.json");
  EXPECT_FALSE(CheckpointReader::open_dir(e.path()).has_weights());
  // Index cannot be written (a directory sits in its place): the save fails and nothing that
  // looks like a complete checkpoint of mixed content remains.
  std::filesystem::create_directory(d / "model.safetensors.index.json");
  write_bytes(d / "model.safetensors.index.json/x", "x");
  EXPECT_THROW(save_checkpoint_dir(d.path(), ts, 300), Error);
  auto r = CheckpointReader::open_dir(d.path());
  if (r.has_weights()) {  // the old single file, untouched
    for (const auto& [n, t] : ts) EXPECT_TRUE(same_bytes(r.load(n), t)) << n;
  }
  for (const auto& f : d.list()) EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
}

TEST(Checkpoint, NoWeights) {
  TempDir d;
  write_bytes(d / "pytorch_model.bin", "not supported");
  auto r = CheckpointReader::open_dir(d.path());
  EXPECT_FALSE(r.has_weights());
  EXPECT_TRUE(r.names().empty());
  EXPECT_FALSE(r.contains("x"));
  expect_error([&] { r.load_f32("x"); }, {d.path(), "'x'", "no safetensors weights"});
  expect_error([&] { CheckpointReader::open_dir(d / "nope"); }, {d / "nope", "not found"});
  expect_error([&] { CheckpointReader::open_dir(d / "pytorch_model.bin"); }, {"not a directory"});
}

TEST(Checkpoint, BadIndex) {
  auto ts = sample_model();
  auto with_index = [&](const std::string& text, const std::vector<std::string>& parts) {
    TempDir d;
    save_checkpoint_dir(d.path(), ts, 300);
    write_bytes(d / "model.safetensors.index.json", text);
    std::vector<std::string> all = parts;
    all.push_back(d / "model.safetensors.index.json");
    expect_error([&] { CheckpointReader::open_dir(d.path()); }, all);
  };
  const std::string s1 = "model-00001-of-00004.safetensors", s2 = "model-00002-of-00004.safetensors";
  with_index("{not json", {"not valid JSON"});
  with_index("[]", {"must be a JSON object"});
  with_index(R"({"metadata": {}})", {"'weight_map' is missing"});
  with_index(R"({"weight_map": []})", {"'weight_map' must be an object"});
  with_index(R"({"weight_map": {"lm_head.weight": 3}})", {"'lm_head.weight'", "file name string"});
  with_index(R"({"weight_map": {"lm_head.weight": "../model-00004-of-00004.safetensors"}})",
             {"'lm_head.weight'", "not a plain file name"});
  with_index(R"({"weight_map": {"lm_head.weight": "/etc/passwd"}})", {"not a plain file name"});
  with_index(R"({"weight_map": {"lm_head.weight": "model-00009-of-00009.safetensors"}})",
             {"shard 'model-00009-of-00009.safetensors'", "'lm_head.weight'", "not found"});
  with_index(R"({"weight_map": {"lm_head.weight": ")" + s1 + R"("}})",
             {"'lm_head.weight'", "mapped to '" + s1 + "'", "does not contain it"});
  // A tensor stored in two shards (the index names one of them):
  {
    TempDir d;
    save_safetensors(d / s1, {{"a", Tensor::zeros({1})}, {"b", Tensor::zeros({1})}});
    save_safetensors(d / s2, {{"b", Tensor::zeros({1})}});
    write_bytes(d / "model.safetensors.index.json",
                R"({"weight_map": {"a": ")" + s1 + R"(", "b": ")" + s2 + R"("}})");
    expect_error([&] { CheckpointReader::open_dir(d.path()); }, {"'b'", "duplicate"});
  }
  // A corrupt shard is reported with the shard's path.
  {
    TempDir d;
    save_checkpoint_dir(d.path(), ts, 300);
    write_bytes(d / s2, "garbage!garbage!");
    expect_error([&] { CheckpointReader::open_dir(d.path()); }, {d / s2});
  }
}

TEST(Checkpoint, UnlistedShardTensorsAreLoadable) {
  TempDir d;
  save_safetensors(d / "model-00001-of-00001.safetensors", {{"a", Tensor::full({2}, 1.0f)}, {"b", Tensor::full({1}, 2.0f)}});
  write_bytes(d / "model.safetensors.index.json", R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})");
  auto r = CheckpointReader::open_dir(d.path());
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.load_f32("b").to_vector(), std::vector<float>{2.0f});
}

TEST(Checkpoint, WriterValidatesBeforeTouchingDir) {
  TempDir d;
  auto ts = sample_model();
  save_checkpoint_dir(d.path(), ts);
  auto before = read_bytes(d / "model.safetensors");
  auto bad = ts;
  bad.push_back({"lm_head.weight", Tensor::zeros({1})});
  expect_error([&] { save_checkpoint_dir(d.path(), bad, 300); }, {d.path(), "duplicate tensor name 'lm_head.weight'"});
  expect_error([&] { save_checkpoint_dir(d.path(), ts, 0); }, {"max_shard_bytes"});
  EXPECT_EQ(read_bytes(d / "model.safetensors"), before);
  EXPECT_EQ(d.list(), std::vector<std::string>{"model.safetensors"});
  // Nested directories are created.
  save_checkpoint_dir(d / "a/b/c", ts, 300);
  EXPECT_TRUE(CheckpointReader::open_dir(d / "a/b/c").has_weights());
}
