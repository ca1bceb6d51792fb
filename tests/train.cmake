# Trainer against independent references (tests/reference/check_train.py, PyTorch of the project environment):
#  - one process vs PyTorch (float64): loss, grad norm, step-0 gradients, params after 5 AdamW steps;
#  - every parallel layout vs the single-process run of the same model, batch and seed.
set(TWINKLE_PY ${TWINKLE_REF_RUN})
set(CHECK_TRAIN ${CMAKE_SOURCE_DIR}/tests/reference/check_train.py)

add_test(NAME train_vs_torch_tied_gqa_headdim COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --steps 5)
add_test(NAME train_vs_torch_untied_bias COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --steps 5)
add_test(NAME train_vs_torch_padding_idx_tied COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --pad-token-id 13 --steps 3)
add_test(NAME train_vs_torch_padded_microbatches COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --batch rows:6 --mbs 4 --steps 3)

# Every layout (fused kernels) is checked against the one-process run on the plain reference kernels.
# name | ranks | variant | flags
set(TWINKLE_LAYOUTS
  "tp2|2|a|--tp 2"
  "tp2_sp|2|b|--tp 2 --sequence-parallel"
  "pp2_tied|2|a|--pp 2"
  "pp4_m8|4|b|--pp 4"
  "dp2_distopt|2|a|--dp 2"
  "dp2_no_distopt|2|b|--dp 2 --use-distributed-optimizer false"
  "tp2_pp2_dp2_tied|8|a|--tp 2 --pp 2 --dp 2"
  "tp2_pp2_dp2_sp_untied|8|b|--tp 2 --pp 2 --dp 2 --sequence-parallel")
foreach(spec ${TWINKLE_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(GET parts 3 flags)
  add_test(NAME layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant ${variant}
           --layers 4 --batch rows:8 --mbs 1 --steps 3 --against single --np ${np} --layout "${flags}"
           --single-kernels reference)
  set_tests_properties(layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
add_test(NAME reference_model_selftest COMMAND ${TWINKLE_REF_RUN} ${CMAKE_SOURCE_DIR}/tests/reference/qwen3_ref.py selftest)

# Config variants transformers accepts (RoPE scaling spellings, sliding-window layer
# selection), each against the
# PyTorch reference (losses, grad norms, step-0 gradients, params after 3 steps); every variant must
# change the reference loss vs the base config (or, for dynamic NTK below max_position_embeddings and
# configs that window no layer, equal it), so a run that ignored it would fail.
set(TWINKLE_CONFIG_VARIANTS
  "rope_yarn|a|{\"rope_theta\": 10000.0, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 128}}|--init-std 0.2 --base-json '{\"rope_theta\":10000.0}'"
  "rope_yarn_v5_rope_parameters_legacy_type|b|{\"rope_parameters\": {\"type\": \"yarn\", \"factor\": 2.0, \"rope_theta\": 20000.0, \"beta_fast\": 16, \"truncate\": false, \"attention_factor\": 1.3}}|--init-std 0.2 --base-json '{\"rope_theta\":20000.0}'"
  "rope_linear|b|{\"rope_scaling\": {\"type\": \"linear\", \"factor\": 3.0}, \"rope_theta\": 1000.0}|--base-json '{\"rope_theta\":1000.0}'"
  "rope_dynamic_below_max_positions|a|{\"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 4.0, \"rope_theta\": 1000000.0}}|--same-as-base"
  "swa_on_all_layers|a|{\"use_sliding_window\": true, \"sliding_window\": 2, \"max_window_layers\": 0}|--batch rows:6:40:64"
  "swa_layer_types|b|{\"use_sliding_window\": true, \"sliding_window\": 5, \"layer_types\": [\"sliding_attention\", \"full_attention\"]}|--batch rows:6:40:64"
  "swa_window70_skips_tiles|b|{\"use_sliding_window\": true, \"sliding_window\": 70, \"max_window_layers\": 1}|--batch rows:4:100:300 --init-std 0.2"
  "swa_off_flag_false|a|{\"use_sliding_window\": false, \"sliding_window\": 2, \"max_window_layers\": 0}|--same-as-base --batch rows:6:40:64"
  "swa_no_layer_windowed|a|{\"use_sliding_window\": true, \"sliding_window\": 2, \"max_window_layers\": 2}|--same-as-base --batch rows:6:40:64")
foreach(spec ${TWINKLE_CONFIG_VARIANTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 variant)
  list(GET parts 2 cfgjson)
  list(GET parts 3 extra)
  separate_arguments(extra_args UNIX_COMMAND "${extra}")
  add_test(NAME train_vs_torch_config_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR}
           --variant ${variant} --steps 3 --config-json "${cfgjson}" ${extra_args})
endforeach()
# tie_word_embeddings true + lm_head in the checkpoint: a distinct head is kept (untied, warned, saved),
# an identical copy stays tied (transformers 5).
add_test(NAME train_vs_torch_tied_flag_distinct_lm_head COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR}
         --variant a --steps 3 --lm-head distinct
         --expect-log "lm_head.weight differs from model.embed_tokens.weight" --expect-saved-tie false)
add_test(NAME train_vs_torch_tied_flag_lm_head_copy COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR}
         --variant a --steps 3 --lm-head copy --expect-saved-tie true)
add_test(NAME generate_stops_at_declared_eos_ids
         COMMAND ${TWINKLE_PY} ${CMAKE_SOURCE_DIR}/tests/reference/check_generate.py --build ${CMAKE_BINARY_DIR}
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny)
# Kernel sets (twinkle/kernels/registry.h): --kernels reference vs --kernels fused on the same model,
# batch and layout: loss of every step 1e-6 relative, step-1 gradients 1e-5 of each tensor's max.
set(TWINKLE_KERNEL_CHECKS
  "single_tied|1|a|"
  "single_bias_padded|1|b|--micro-batch-size 4"
  "tp2_sp|2|b|--tp 2 --sequence-parallel"
  "pp2_tied|2|a|--pp 2")
foreach(spec ${TWINKLE_KERNEL_CHECKS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(LENGTH parts n)
  set(flags "")
  if(n GREATER 3)
    list(GET parts 3 flags)
  endif()
  add_test(NAME kernels_fused_vs_reference_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR}
           --variant ${variant} --layers 3 --batch rows:6 --steps 2 --against kernels --np ${np} --layout "${flags}")
  set_tests_properties(kernels_fused_vs_reference_${name} PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()

# Context parallelism: cp2 (ring p2p and Ulysses a2a) and cp combined with tp+sp, dp
# and pp (1F1B keeps two micro-batches in flight: Ulysses state per slot) equal one process on the
# same data (rows of odd lengths padded per row to 2*cp(*tp)); packed micro-batches split per segment.
set(TWINKLE_CP_LAYOUTS
  "cp2_p2p_tied|2|a|--cp 2"
  "cp2_a2a_untied|2|b|--cp 2 --cp-comm-type a2a"
  "tp2_cp2_sp|4|b|--tp 2 --cp 2 --sequence-parallel"
  "dp2_cp2|4|a|--dp 2 --cp 2"
  "pp2_cp2_a2a|4|a|--pp 2 --cp 2 --cp-comm-type a2a")
foreach(spec ${TWINKLE_CP_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(GET parts 3 flags)
  add_test(NAME layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant ${variant}
           --layers 4 --batch rows:8 --mbs 1 --steps 3 --against single --np ${np} --layout "${flags}")
  set_tests_properties(layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
add_test(NAME layout_cp2_packed COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b
         --layers 2 --batch rows:8 --mbs 4 --packing --steps 3 --against single --np 2 --layout "--cp 2")
set_tests_properties(layout_cp2_packed PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Packed rows on every layout family, against the one-process run of the same rows UNPACKED
# (check_train.py --packed-layout): the loss is a mean over the same labelled tokens either way,
# so attention across documents (a packed loss below the unpacked one: row 1 repeats row 0), a
# middle stage without the block-diagonal mask or per-document positions, or a pad counted as a
# token shows as a difference. Rows of lengths 1..29 (cp4: 1..7, documents shorter than 2*cp,
# ranks holding pads only); pp3 with an uneven split, pp4; sequence parallelism on tp2 and
# tp2 x cp2 (packs padded to a multiple of 2*cp*tp); a sliding window under cp2; LoRA dropout
# under cp2 (its masks keyed by token; 2 steps: the fp32 ring merge's rounding, amplified by AdamW
# on the adapter's near-zero gradients, reaches the 1e-5 grad-norm rule by step 3 with or without
# packing).
# name | ranks | variant | check flags | layout flags
set(TWINKLE_PACKED_LAYOUTS
  "dp2|2|a|--layers 2 --mbs 4|--dp 2"
  "tp2_sp|2|b|--layers 2 --mbs 4|--tp 2 --sequence-parallel"
  "pp3_uneven_1_2_1|3|a|--layers 4 --mbs 2|--pp 3 --layers-per-stage 1,2,1"
  "pp4|4|b|--layers 4 --mbs 2|--pp 4"
  "cp2_a2a|2|b|--layers 2 --mbs 4|--cp 2 --cp-comm-type a2a"
  "cp4_ring_docs_below_2cp|4|a|--layers 2 --mbs 4 --batch rows:8:1:7:dup|--cp 4"
  "tp2_cp2_sp|4|b|--layers 2 --mbs 4|--tp 2 --cp 2 --sequence-parallel"
  "cp2_lora_dropout|2|a|--layers 2 --mbs 4 --lora-r 4 --lora-dropout 0.1 --steps 2|--cp 2")
foreach(spec ${TWINKLE_PACKED_LAYOUTS})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(GET parts 3 flags)
  list(GET parts 4 layout)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  add_test(NAME layout_packed_vs_unpacked_${name}
           COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant ${variant} --batch rows:8:1:29:dup
                   --steps 3 ${flag_list} --against single --packed-layout --np ${np} --layout "${layout}")
  set_tests_properties(layout_packed_vs_unpacked_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
# Uneven pipeline splits with per-layer settings, which must use the global layer index:
# sliding-window layers (layer_types from max_window_layers; rows longer than the window) and
# LoRA dropout masks (keyed by module name).
add_test(NAME layout_pp2_split_1_3_swa_from_layer_2
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --layers 4 --batch rows:6:20:40
                 --mbs 2 --steps 3 --config-json "{\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 2}"
                 --against single --np 2 --layout "--pp 2 --layers-per-stage 1,3")
add_test(NAME layout_pp2_split_3_1_swa_from_layer_1
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --layers 4 --batch rows:6:20:40
                 --mbs 2 --steps 3 --config-json "{\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 1}"
                 --against single --np 2 --layout "--pp 2 --layers-per-stage 3,1")
add_test(NAME layout_pp2_split_1_3_lora_dropout
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --layers 4 --batch rows:8 --mbs 2
                 --steps 3 --lora-r 4 --lora-dropout 0.1 --against single --np 2 --layout "--pp 2 --layers-per-stage 1,3")
add_test(NAME layout_pp2_split_3_1_lora_dropout
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant b --layers 4 --batch rows:8 --mbs 2
                 --steps 3 --lora-r 4 --lora-dropout 0.1 --against single --np 2 --layout "--pp 2 --layers-per-stage 3,1")
set_tests_properties(layout_pp2_split_1_3_swa_from_layer_2 layout_pp2_split_3_1_swa_from_layer_1
                     layout_pp2_split_1_3_lora_dropout layout_pp2_split_3_1_lora_dropout PROPERTIES TIMEOUT 300 PROCESSORS 2)
add_test(NAME layout_packed_vs_unpacked_cp2_swa
         COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant a --batch rows:8:1:29:dup --steps 3
                 --layers 2 --mbs 4 --config-json "{\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 0}"
                 --against single --packed-layout --np 2 --layout "--cp 2")
set_tests_properties(layout_packed_vs_unpacked_cp2_swa PROPERTIES TIMEOUT 300 PROCESSORS 2)

# cp = 4: 4 ranks, dense, ring and Ulysses, equal to one process; Ulysses at cp 4 needs
# kv heads divisible by 4 (MHA variant). Sliding-window layers under CP (Qwen3 use_sliding_window,
# every layer windowed, window 5 < the 2*cp chunks of 40..64-token rows): the windowed single-process
# run is checked against PyTorch by train_vs_torch_config_swa_*, and these layouts must equal it.
# name | ranks | variant | layout flags | config json (shape:JSON = before the init) | batch
set(TWINKLE_CP_MORE
  "cp4_p2p_tied|4|a|--cp 4||rows:8"
  "cp4_a2a_mha_untied|4|b|--cp 4 --cp-comm-type a2a|shape:{\"num_key_value_heads\": 4}|rows:8"
  "cp2_p2p_swa|2|a|--cp 2|{\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 0}|rows:6:40:64"
  "cp2_a2a_swa|2|b|--cp 2 --cp-comm-type a2a|{\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 0}|rows:6:40:64"
  "cp4_p2p_swa_window_spans_ranks|4|b|--cp 4|{\"use_sliding_window\": true, \"sliding_window\": 21, \"max_window_layers\": 0}|rows:6:40:64")
foreach(spec ${TWINKLE_CP_MORE})
  string(REPLACE "|" ";" parts "${spec}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 variant)
  list(GET parts 3 flags)
  list(GET parts 4 cfgjson)
  list(GET parts 5 batch)
  set(cfg_args "")
  if(cfgjson MATCHES "^shape:(.*)$")  # shape fields change the weights' shapes: set before the init
    set(cfg_args --shape-json "${CMAKE_MATCH_1}")
  elseif(NOT cfgjson STREQUAL "")
    set(cfg_args --config-json "${cfgjson}")
  endif()
  add_test(NAME layout_${name} COMMAND ${TWINKLE_PY} ${CHECK_TRAIN} --build ${CMAKE_BINARY_DIR} --variant ${variant}
           --layers 2 --batch ${batch} --mbs 2 --steps 3 --against single --np ${np} --layout "${flags}" ${cfg_args})
  set_tests_properties(layout_${name} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
