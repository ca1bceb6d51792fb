// The saved activations of a micro-batch slot (model/qwen3_activations.h): a backward must find
// the activations its own forward saved — a different micro-batch in the slot, or no forward at
// all, is an error naming the slot, never a silently fresh buffer; buffers are reused across
// steps (no growth for micro-batches that fit) and the result of a slot does not depend on
// what an earlier, larger micro-batch left in it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/model/qwen3_model.h"

using namespace twinkle;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  return c;
}

MicroBatch batch(int T, int salt) {
  MicroBatch mb;
  for (int t = 0; t < T; ++t) {
    mb.input_ids.push_back((t * 7 + salt) % 97);
    mb.labels.push_back((t * 5 + salt + 1) % 97);
    mb.position_ids.push_back(t);
  }
  mb.cu_seqlens = {0, T};
  return mb;
}

std::vector<float> grads(Qwen3Model& m) {
  const Tensor& g = m.store().flat_grads();
  return std::vector<float>(g.f32(), g.f32() + g.numel());
}

}  // namespace

TEST(StageActivations, BackwardOfAnotherMicroBatchIsAnError) {
  Qwen3Model m(tiny(), dist::make_single_process_state());
  m.init_random(1);
  StageBatch a = m.prepare(batch(12, 0)), b = m.prepare(batch(9, 3));
  EXPECT_THROW(m.backward(0, a, nullptr), Error);  // no forward in slot 0 yet
  m.forward(0, a, nullptr, 1.0f / static_cast<float>(a.num_targets), true);
  try {
    m.backward(0, b, nullptr);
    FAIL() << "backward of a 9-token batch over a 12-token forward did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("12 tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.output_hidden(3), Error);  // a slot that never ran
}

TEST(StageActivations, ReusedAcrossStepsAndIndependentOfEarlierContents) {
  auto run = [](Qwen3Model& m, const StageBatch& b) {
    m.store().zero_grad();
    const double loss = m.forward(0, b, nullptr, 1.0f / static_cast<float>(b.num_targets), true);
    m.backward(0, b, nullptr);
    return loss;
  };
  Qwen3Model fresh(tiny(), dist::make_single_process_state());
  fresh.init_random(2);
  Qwen3Model used(tiny(), dist::make_single_process_state());
  used.init_random(2);
  const StageBatch big = used.prepare(batch(40, 1)), small = used.prepare(batch(10, 2));
  run(used, big);  // leaves 40 tokens of activations in slot 0
  const size_t held = used.workspace_bytes();
  const double l_used = run(used, small);
  EXPECT_EQ(used.workspace_bytes(), held);  // the small batch fits: nothing allocated
  const double l_fresh = run(fresh, small);
  EXPECT_EQ(l_used, l_fresh);
  const auto g1 = grads(used), g2 = grads(fresh);
  ASSERT_EQ(g1.size(), g2.size());
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
}
