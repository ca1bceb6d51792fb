# transformers, PEFT and torch themselves as the oracle (tests/reference/hf_oracle.py, the project
# environment .venv): one-process training steps of twinkle against transformers' Qwen3ForCausalLM /
# Qwen3MoeForCausalLM in float64 loaded with from_pretrained from the same checkpoint, transformers'
# ForCausalLMLoss (and load_balancing_loss_func with output_router_logits), torch.optim.AdamW and
# torch.nn.utils.clip_grad_norm_, and PEFT's LoraModel for adapters: loss and grad norm of every step
# (1e-5), every step-0 gradient (1e-4 of the tensor's max), the parameters after the AdamW steps
# (check_train.compare_params, the float64 rule). LoRA dropout: PEFT's own lora.Linear forward with
# each lora_dropout module (PEFT's nn.Dropout built from the saved adapter's lora_dropout) replaced by
# the mask twinkle drew for that module and step (hf_oracle.SharedMaskDropout). The models written for
# the tests (qwen3_ref.py, qwen3_moe_ref.py, lora_ref.py) stay the oracle where transformers has no
# knob: layouts, packing, Megatron's per-layer aux loss and z-loss, expert LoRA (tests/README.md).
set(CHECK_TRAIN_HF ${CMAKE_SOURCE_DIR}/tests/reference/check_train.py)

# dense Qwen3: name | variant | extra flags (each config variant must change the oracle's loss vs the base
# config, as train_vs_torch_config_*, so the test can fail)
set(TWINKLE_HF_DENSE
  "tied_gqa_headdim|a|--steps 4"
  "untied_bias|b|--steps 4"
  "swa_layer_types|b|--steps 3 --batch rows:6:40:64 --config-json '{\"use_sliding_window\":true,\"sliding_window\":5,\"layer_types\":[\"sliding_attention\",\"full_attention\"]}'"
  "swa_all_layers|a|--steps 3 --batch rows:6:40:64 --config-json '{\"use_sliding_window\":true,\"sliding_window\":3,\"max_window_layers\":0}'"
  "rope_linear|b|--steps 3 --config-json '{\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":3.0,\"rope_theta\":1000.0}}' --base-json '{\"rope_theta\":1000.0}'"
  "rope_dynamic_below_max|a|--steps 3 --same-as-base --config-json '{\"rope_parameters\":{\"rope_type\":\"dynamic\",\"factor\":4.0,\"rope_theta\":1000000.0}}'"
  "rope_yarn_attention_factor|b|--steps 3 --init-std 0.2 --config-json '{\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":2.0,\"rope_theta\":20000.0,\"beta_fast\":16,\"attention_factor\":1.3}}' --base-json '{\"rope_theta\":20000.0}'"
  "rope_yarn_null_attention_factor|a|--steps 3 --init-std 0.2 --config-json '{\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"rope_theta\":10000.0,\"original_max_position_embeddings\":128,\"attention_factor\":null}}' --base-json '{\"rope_theta\":10000.0}'"
  "lora_all_linear|b|--steps 3 --lora-r 4 --lora-alpha 16 --lora-targets all-linear"
  "lora_rslora_targets|a|--steps 3 --lora-r 8 --lora-alpha 32 --lora-targets q_proj,v_proj,down_proj --lora-rslora"
  "lora_dropout|b|--steps 3 --lora-r 4 --lora-alpha 16 --lora-targets all-linear --lora-dropout 0.1"
  "lora_dropout_rslora_targets|a|--steps 3 --lora-r 8 --lora-alpha 32 --lora-targets q_proj,v_proj,down_proj --lora-rslora --lora-dropout 0.1")
foreach(spec ${TWINKLE_HF_DENSE})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 variant)
  list(GET parts 2 extra)
  separate_arguments(extra_args UNIX_COMMAND "${extra}")
  add_test(NAME hf_train_${name} COMMAND ${TWINKLE_REF_RUN} ${CHECK_TRAIN_HF} --build ${CMAKE_BINARY_DIR}
           --oracle hf --variant ${variant} ${extra_args})
  set_tests_properties(hf_train_${name} PROPERTIES TIMEOUT 300 LABELS "reference;hf")
endforeach()

# Qwen3-MoE (3 layers, layer 1 in mlp_only_layers, 6 experts top-2, rows of 5..24 tokens right-padded in
# micro-batches): norm_topk_prob true / false, transformers' aux loss with padding (output_router_logits),
# and a model whose every layer is dense but one.
set(TWINKLE_HF_MOE
  "norm_topk_aux_global|--norm-topk-prob true --aux-coef 0.1 --mbs 3"
  "raw_topk_aux_global|--norm-topk-prob false --aux-coef 0.05 --mbs 6"
  "norm_topk_aux_off_dense_first|--norm-topk-prob true --mlp-only-layers 0,1 --mbs 2")
foreach(spec ${TWINKLE_HF_MOE})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME hf_moe_train_${name}
           COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/check_train_moe.py
                   --build ${CMAKE_BINARY_DIR} --oracle hf --steps 3 ${flag_list})
  set_tests_properties(hf_moe_train_${name} PROPERTIES TIMEOUT 300 LABELS "reference;hf")
endforeach()
