# Tokenizer and chat-template acceptance tests against independent references:
#  - the Rust Hugging Face `tokenizers` library through @anush008/tokenizers (node), with
#    @huggingface/tokenizers as a reported second opinion;
#  - Debian's python3-jinja2 rendering the real Qwen3 chat_template.
# The tokenizer files (models/qwen3-tiny/tokenizer*.json) and node_modules come from
# scripts/fetch-assets (run by scripts/setup); when they are missing these tests FAIL.
if(NOT TARGET twinkle_cli)  # never drop these tests silently
  message(FATAL_ERROR "tokenizer.cmake needs the twinkle CLI target (tools/twinkle)")
endif()

set(TWINKLE_REF_PYTHON /usr/bin/python3)  # Debian's python (jinja2); not a pyenv python3
set(TWINKLE_TOK_WORK ${CMAKE_BINARY_DIR}/tokenizer_tests)

# 1. Qwen3 tokenizer.json: >= 2000 generated strings, ids / decode / round trip / random-id decode.
add_test(NAME tokenizer_reference_qwen3
         COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/tok_check.py
                 --twinkle $<TARGET_FILE:twinkle_cli>
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny
                 --work ${TWINKLE_TOK_WORK}/qwen3)
set_tests_properties(tokenizer_reference_qwen3 PROPERTIES TIMEOUT 300 LABELS "reference;tokenizer")

# 1b. Code point sweep: one probe per code point (BMP, every 5th above, and the ranges where the
#     reference's Unicode versions differ from PCRE2 / utf8proc), NFC round trip not required.
add_test(NAME tokenizer_reference_sweep
         COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/tok_check.py
                 --twinkle $<TARGET_FILE:twinkle_cli>
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny
                 --work ${TWINKLE_TOK_WORK}/sweep --sweep --decode-fuzz 0)
set_tests_properties(tokenizer_reference_sweep PROPERTIES TIMEOUT 600 LABELS "reference;tokenizer")

# 2. Synthetic tokenizer.json variants (string merges, every added-token flag, NFKC+Lowercase,
#    ByteLevel with regex and prefix space, all Split behaviors, invert, ignore_merges, added-token
#    ids that the Rust library reassigns).
add_test(NAME tokenizer_synthetic_setup
         COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/tok_synthetic.py
                 ${CMAKE_SOURCE_DIR}/models/qwen3-tiny/tokenizer.json ${TWINKLE_TOK_WORK}/synthetic)
set_tests_properties(tokenizer_synthetic_setup PROPERTIES FIXTURES_SETUP tok_synthetic LABELS "reference;tokenizer")
foreach(variant strmerges wrongids gpt2 behaviors invert)
  add_test(NAME tokenizer_reference_${variant}
           COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/tok_check.py
                   --twinkle $<TARGET_FILE:twinkle_cli>
                   --tokenizer-dir ${TWINKLE_TOK_WORK}/synthetic/${variant}
                   --work ${TWINKLE_TOK_WORK}/synthetic/${variant}/work
                   --n-random 400 --min-texts 500 --specials --no-roundtrip --decode-fuzz 200)
  set_tests_properties(tokenizer_reference_${variant} PROPERTIES FIXTURES_REQUIRED tok_synthetic TIMEOUT 300
                       LABELS "reference;tokenizer")
endforeach()

# 3. Qwen3 chat template: renders vs jinja2, input_ids / labels / prompts vs the Rust library.
add_test(NAME template_reference_qwen3
         COMMAND ${TWINKLE_REF_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/template_check.py
                 --twinkle $<TARGET_FILE:twinkle_cli>
                 --tokenizer-dir ${CMAKE_SOURCE_DIR}/models/qwen3-tiny
                 --work ${TWINKLE_TOK_WORK}/template)
set_tests_properties(template_reference_qwen3 PROPERTIES TIMEOUT 300 LABELS "reference;tokenizer")
