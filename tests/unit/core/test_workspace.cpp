// Workspace: named scratch buffers reused across calls (the model's saved activations live in
// typed structs, model/qwen3_activations.h; the workspace is scratch only).
#include <gtest/gtest.h>

#include "twinkle/core/error.h"
#include "twinkle/core/workspace.h"

using namespace twinkle;

TEST(Workspace, SameKeyReusesTheBufferAndKeysAreDistinct) {
  Workspace ws;
  Tensor a = ws.get("a", {4, 8});
  Tensor b = ws.get("b", {4, 8});
  EXPECT_NE(a.f32(), b.f32());
  EXPECT_EQ(a.shape(), (Shape{4, 8}));
  a.fill_(3.0f);
  Tensor a2 = ws.get("a", {2, 8});  // smaller: same storage, no new allocation
  EXPECT_EQ(a2.f32(), a.f32());
  EXPECT_EQ(a2.f32()[0], 3.0f);     // contents are whatever the previous user left
  const size_t held = ws.bytes();
  ws.get("a", {4, 8});
  EXPECT_EQ(ws.bytes(), held);      // steady state: no growth
}

TEST(Workspace, GrowsWithHeadroomAndZeroesOnRequest) {
  Workspace ws;
  ws.get("x", {100});
  const size_t first = ws.bytes();
  Tensor big = ws.get("x", {110});  // within the 25% headroom: no reallocation
  EXPECT_EQ(ws.bytes(), first);
  big.fill_(1.0f);
  Tensor bigger = ws.get("x", {1000}, DType::F32, /*zero=*/true);
  EXPECT_GT(ws.bytes(), first);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(bigger.f32()[i], 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bigger.f32()) % 64, 0u);  // aligned for the vector kernels
}

TEST(Workspace, OnlyF32) {
  Workspace ws;
  EXPECT_THROW(ws.get("ids", {4}, DType::I32), Error);
}
