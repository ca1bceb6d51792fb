// The sharded checkpoint index and slice reader (twinkle/io/sharded_checkpoint.h), and the streaming
// safetensors writer (twinkle/io/safetensors.h save_safetensors_streamed).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "io_test_util.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/sharded_checkpoint.h"

namespace twinkle {
namespace {

using iotest::TempDir;

std::string bytes_of(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A [5, 7] tensor with value 100 r + c, stored as three boxes in two files: rows 0-1 whole
// (file 0), rows 2-4 columns 0-2 (file 1) and rows 2-4 columns 3-6 in bf16-exact values (file 1).
struct Fixture {
  TempDir dir;
  ShardedIndex ix;
  Fixture() {
    auto box = [](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
      Tensor t = Tensor::empty({nr, nc});
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < nc; ++c) t.f32()[r * nc + c] = static_cast<float>(100 * (r0 + r) + (c0 + c));
      return t;
    };
    save_safetensors(dir / sharded_file_name(0, 2), {{"w#0", box(0, 2, 0, 7)}, {"b#0", Tensor::full({3}, 1.5f)}});
    save_safetensors(dir / sharded_file_name(1, 2), {{"w#1", box(2, 3, 0, 3)}, {"w#2", box(2, 3, 3, 4)},
                                                     {"b#1", Tensor::full({2}, 2.5f)}});
    ix.world_size = 2;
    const std::string f0 = sharded_file_name(0, 2), f1 = sharded_file_name(1, 2);
    ix.tensors.push_back({"k/w", DType::F32, {5, 7},
                          {{f0, "w#0", {0, 0}, {2, 7}}, {f1, "w#1", {2, 0}, {3, 3}}, {f1, "w#2", {2, 3}, {3, 4}}}});
    ix.tensors.push_back({"k/b", DType::F32, {5}, {{f0, "b#0", {0}, {3}}, {f1, "b#1", {3}, {2}}}});
    write();
  }
  void write() {
    std::ofstream(dir / kShardedIndexName) << ix.to_json();
  }
};

TEST(ShardedCheckpoint, ReadsAnyBoxAcrossChunks) {
  Fixture fx;
  const ShardedCheckpointReader r = ShardedCheckpointReader::open(fx.dir.path(), "k/");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(r.info("w").shape, (Shape{5, 7}));
  const Tensor full = r.load_f32("w");
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(full.f32()[i], static_cast<float>(100 * (i / 7) + i % 7)) << i;
  // a box that crosses all three chunks
  std::vector<float> out(3 * 4);
  r.read_f32("w", {1, 2}, {3, 4}, out.data());
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(out[a * 4 + b], static_cast<float>(100 * (1 + a) + 2 + b));
  const Tensor cols = r.load_f32_narrow("w", 1, 2, 3);  // a tp shard of a row-parallel weight
  EXPECT_EQ(cols.shape(), (Shape{5, 3}));
  EXPECT_EQ(cols.f32()[4 * 3 + 2], 404.0f);
  const Tensor b = r.load_f32_narrow("b", 0, 2, 2);
  EXPECT_EQ(b.f32()[0], 1.5f);
  EXPECT_EQ(b.f32()[1], 2.5f);
  EXPECT_GT(r.bytes_read(), 0);
  EXPECT_THROW(r.read_f32("w", {4, 0}, {2, 7}, out.data()), Error);  // outside the shape
  EXPECT_THROW(r.info("nope"), Error);
}

void expect_refused(Fixture& fx, const std::string& what) {
  fx.write();
  try {
    ShardedCheckpointReader::open(fx.dir.path(), "k/");
    ADD_FAILURE() << "accepted; expected an error containing: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ShardedCheckpoint, RefusesHolesOverlapsAndBoxesOutside) {
  {
    Fixture fx;
    fx.ix.tensors[0].chunks.pop_back();
    expect_refused(fx, "the chunks cover 23 of its 35 elements");
  }
  {
    Fixture fx;
    fx.ix.tensors[0].chunks[2].offsets[1] = 2;  // overlaps w#1's column 2
    expect_refused(fx, "overlaps chunk 1");
  }
  {
    Fixture fx;
    fx.ix.tensors[1].chunks[1].offsets[0] = 4;
    expect_refused(fx, "lies outside the shape");
  }
  {
    Fixture fx;
    fx.ix.tensors[0].chunks[0].file = "../x.safetensors";
    expect_refused(fx, "plain name");
  }
  {
    TempDir d;
    try {
      ShardedCheckpointReader::open(d.path());
      ADD_FAILURE() << "a directory without an index was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is missing: the save did not complete"), std::string::npos) << e.what();
    }
  }
}

TEST(ShardedCheckpoint, NamesTheFileAndKeyOfAMissingSlice) {
  Fixture fx;
  fx.ix.tensors[0].chunks[1].key = "w#9";
  fx.write();
  const ShardedCheckpointReader r = ShardedCheckpointReader::open(fx.dir.path(), "k/");
  try {
    r.load_f32("w");
    ADD_FAILURE() << "a missing key was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor 'w#9'"), std::string::npos) << e.what();
  }
  std::filesystem::remove(fx.dir / sharded_file_name(1, 2));
  const ShardedCheckpointReader r2 = ShardedCheckpointReader::open(fx.dir.path(), "k/");
  try {
    r2.load_f32("b");
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(sharded_file_name(1, 2) + " is missing"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsStreamed, SameBytesAsInMemoryThroughASmallBuffer) {
  TempDir d;
  Tensor a = Tensor::empty({3, 5});
  for (int64_t i = 0; i < 15; ++i) a.f32()[i] = static_cast<float>(i) * 0.25f;
  Tensor b = Tensor::full({7}, 3.0f).to_dtype(DType::BF16);
  save_safetensors(d / "mem.safetensors", {{"a", a}, {"b", b}}, {{"format", "pt"}});
  int calls = 0;
  std::vector<TensorSource> src = {
      {"a", DType::F32, {3, 5}, nullptr,
       [&](void* dst, size_t off, size_t n) {
         ++calls;
         std::memcpy(dst, static_cast<const char*>(a.raw()) + off, n);
       }},
      {"b", DType::BF16, {7}, b.raw(), {}}};
  save_safetensors_streamed(d / "streamed.safetensors", src, {{"format", "pt"}}, 8);
  EXPECT_EQ(bytes_of(d / "mem.safetensors"), bytes_of(d / "streamed.safetensors"));
  EXPECT_EQ(calls, 8);  // 60 bytes in 8-byte pieces
  std::vector<TensorSource> bad = {{"a", DType::F32, {3, 5}, nullptr,
                                    [](void*, size_t, size_t) { throw Error("fill failed"); }}};
  EXPECT_THROW(save_safetensors_streamed(d / "bad.safetensors", bad), Error);
  EXPECT_EQ(d.list(), (std::vector<std::string>{"mem.safetensors", "streamed.safetensors"}));  // no temporary left
}

}  // namespace
}  // namespace twinkle
