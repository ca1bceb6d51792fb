# Checkpoints and LoRA adapters moving between twinkle and the real libraries, transformers / PEFT
# (the project environment .venv) as the oracle in float64 (tests/reference/check_hf_interop.py,
# whose docstring describes each case, its oracle and the controls that show it can fail):
#  - twinkle_ckpt_in_transformers: twinkle-trained dense (tied; untied + biases) and Qwen3-MoE
#    checkpoints in from_pretrained (clean loading info) and their held-out loss vs `twinkle eval`;
#  - transformers_sharded_bf16_in_twinkle: a bf16 save_pretrained with >= 2 shards read by
#    `twinkle train` (step-1 loss at lr 0);
#  - transformers_f64_in_twinkle: a float64 save_pretrained model and a float64 PEFT adapter (F64
#    tensors) read by `twinkle train` / `twinkle eval --adapter`;
#  - twinkle_adapter_in_peft: twinkle's PEFT adapters (all-linear; rslora + a target list) in
#    PeftModel.from_pretrained (keys, config fields, scaling) and the held-out loss;
#  - peft_adapter_in_twinkle: get_peft_model(..., init_lora_weights=False).save_pretrained read by
#    `twinkle train --adapter` / `twinkle eval --adapter`;
#  - export_merge_vs_merge_and_unload: `twinkle export --merge` (sharded, f32 and bf16 bases) vs
#    PEFT's merge_and_unload, tensor by tensor.
# Each must agree within 1e-5 relative (losses) / 1e-6 of the tensor's max (merged f32 weights).
set(TWINKLE_HF_INTEROP_CASES
  twinkle_ckpt_in_transformers
  transformers_sharded_bf16_in_twinkle
  transformers_f64_in_twinkle
  twinkle_adapter_in_peft
  peft_adapter_in_twinkle
  export_merge_vs_merge_and_unload)
foreach(case ${TWINKLE_HF_INTEROP_CASES})
  add_test(NAME hf_interop_${case}
           COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_hf_interop.py
                   --build ${CMAKE_BINARY_DIR} --case ${case})
  set_tests_properties(hf_interop_${case} PROPERTIES TIMEOUT 300 LABELS "reference;hf")
endforeach()
